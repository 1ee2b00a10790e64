"""`anchorft toy pretrain`, `compare`, `report` and `interpolate` (WiSE-FT): the embedded testbed; `toy bench`
writes its held-out math items as benchmark files for `anchorft eval`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.commands.toy_verdict import main_verdict
from anchorft.dataclass_flags import FlagParser, both_spellings
from anchorft.dataclass_yaml import resolve_presets
from anchorft.resources import configs_dir
from anchorft.runs import existing_files
from anchorft.studies.testbed import report as testbed_report  # module.function: a test may stand in for one
from anchorft.studies.testbed.layout import base_folders
from anchorft.toy.bench import bench_into


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft toy", description="Embedded testbed: a tiny pretrained Llama.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pre = sub.add_parser("pretrain", help="pretrain the tiny model (cached by config hash) and copy it to --out")
    pre.add_argument("--out", required=True, help="output directory (model, tokenizer, metrics.json)")
    pre.add_argument("--preset", default="default", help="smoke | default | a YAML file (its pretrain: section)")
    pre.add_argument("--steps", type=int, default=None, help="override the number of pretraining steps")
    pre.add_argument("--seed", type=int, help="override the pretraining seed (corpus draws, tokenizer, init)")
    pre.add_argument("--no-cache", action="store_true", help="pretrain again even when cached")
    pre.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    cmp_ = sub.add_parser("compare", help="fine-tune base with every method, evaluate, write the report")
    cmp_.add_argument("--out", required=True, help="output directory")
    cmp_.add_argument("--preset", default="default", help="smoke | default | a YAML file")
    cmp_.add_argument("--methods", nargs="+", default=None, help="methods or run names to keep (default: all)")
    cmp_.add_argument(
        "--sweep",
        action="append",
        default=[],
        help="key=v1,v2,... (anchor_rank, anchor_lambda, anchor_targets, learning_rate, anchor_rank_rule, "
        "anchor_layers, anchor_memory, anchor_lambda_rest, anchor_kind); repeatable",
    )
    seeds = cmp_.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, nargs="+", default=None, help="the fine-tuning seeds (a list)")
    seeds.add_argument("--n-seeds", dest="n_seeds", type=int, default=None, help="seeds 0 .. N-1")
    cmp_.add_argument(
        "--overwrite", action="store_true", help="replace an output folder that holds another comparison"
    )
    cmp_.add_argument(
        "--workers",
        type=int,
        default=None,
        help="fine-tunes run at once, one process each (default: --threads); each runs on the config's `threads` "
        "torch threads (default 1), so the results do not depend on it",
    )
    add_executor_flags(cmp_)
    rep = sub.add_parser(
        "report",
        help="one report.md + tradeoff.png from several comparisons of the same base (a run found in several, "
        "at different seeds, is pooled over its seeds)",
    )
    rep.add_argument("--from", dest="sources", nargs="+", required=True, help="comparison folders (results.json)")
    rep.add_argument("--out", required=True, help="output folder (report.md, tradeoff.png, results.json)")
    rep.add_argument(
        "--front", nargs="+", default=None, metavar="RUN",
        help="also front.md: every run against the interpolated front of these runs (and the base)",
    )  # fmt: skip
    rep.add_argument(
        "--pick", action="append", default=[], metavar="GROUP=RUN,RUN",
        help="with --front: choose among these runs (an option's knob values) the one furthest above the front on "
        "the validation items, and report it on the held-out ones; repeatable",
    )  # fmt: skip
    rep.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    itp = sub.add_parser(
        "interpolate",
        help="WiSE-FT weight interpolation: evaluate W0 + alpha (W_ft - W0) for a grid of alpha from a comparison's "
        "finished fine-tunes (merge with it: toy report --from COMPARISON OUT)",
        description="WiSE-FT weight interpolation (Wortsman et al. 2022): W0 + alpha (W_ft - W0) from the saved "
        "models of a finished `toy compare`, every seed, scored on its held-out and validation items.",
    )
    itp.add_argument("--compare", required=True, help="a finished comparison folder (results.json, models/)")
    itp.add_argument("--runs", nargs="+", required=True, help="its runs to interpolate (e.g. sft l2)")
    itp.add_argument("--alphas", default="0.25,0.5,0.75", help="alpha grid in (0, 1], comma-separated")
    itp.add_argument("--out", required=True, help="output folder (results.json, report.md, tradeoff.png)")
    itp.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    add_executor_flags(itp)
    bench = sub.add_parser(
        "bench",
        help="the testbed's held-out math items as benchmark files for `anchorft eval --bench` (CPU)",
        description="Write OUT/SKILL.jsonl: items of the testbed's evaluation split (never trained on) in the "
        "paper's benchmark format (prompt messages, reward_model.ground_truth), short enough for the testbed "
        "model's 128-token context: `anchorft eval` runs on the testbed model with them (docs/eval.md).",
    )
    bench.add_argument("--out", required=True, help="output folder (one SKILL.jsonl per skill)")
    bench.add_argument("--skills", nargs="+", default=None, help="math skills (default: all of them)")
    bench.add_argument("--items", type=int, default=50, help="items per skill (default %(default)s)")
    bench.add_argument("--seed", type=int, default=0, help="which items are drawn (default %(default)s)")
    bench.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    for sp in (pre, cmp_, rep, itp, bench):  # the global option is accepted after the subcommand too
        sp.add_argument("--threads", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub.add_parser("rl", add_help=False, help="DAPO from a comparison's models, evaluated before/after (rl -h)")
    sub.add_parser(
        "verdict",
        add_help=False,
        help="each run's excess over a front, paired intervals pooled over bases; or a pilot's power (verdict -h)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads of the command's own work (default: the cores shared among the anchorft processes "
        "running now, at most 4); pretraining and each fine-tune run on the counts their config pins "
        "(pretrain.threads, threads), so their numbers do not depend on it",
    )
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args, extra = _parser().parse_known_args(argv)
    if args.cmd in ("pretrain", "compare") and not extra:  # an unknown preset or malformed YAML before torch loads
        resolve_presets(args.preset, configs_dir("toy"), "preset")  # as load_config reads it
    if args.cmd == "verdict":
        return main_verdict(extra)  # statistics on saved grades: no torch
    if args.threads is None:  # the command's thread policy (anchorft.threads), at most 4
        import torch  # lazy: loads torch (seconds); the lines above need none

        args.threads = max(1, min(4, torch.get_num_threads()))
    if args.cmd == "rl":
        from anchorft.commands.toy_rl import main_rl  # lazy: the RL stage loads TRL

        return main_rl(["--threads", str(args.threads), *extra])
    if extra:
        _parser().error(f"unrecognized arguments: {' '.join(extra)}")
    if args.threads < 1:
        raise ValueError(f"--threads: must be >= 1, got {args.threads}")
    if args.cmd == "bench":
        if (paths := bench_into(args.out, args.skills, args.items, args.seed, args.overwrite)) is not None:
            print(f"toy bench: {args.items} items per file in {', '.join(map(str, paths))}")
        return 0
    if args.cmd == "report":
        merged = testbed_report.report_into(args.sources, args.out, args.front, args.pick, args.overwrite)
        print(f"report: {Path(args.out) / 'report.md'}  ({len(merged['methods'])} runs from {len(args.sources)} "
              "comparisons)")  # fmt: skip
        return 0
    import torch  # lazy: each branch below loads it (pretraining, fine-tuning, interpolating)

    torch.set_num_threads(args.threads)
    if args.cmd == "interpolate":
        from anchorft.studies.testbed.interpolate import interpolate_into

        cluster = cluster_from(args)
        if (
            res := interpolate_into(args.compare, args.runs, args.alphas, args.out, args.overwrite, cluster)
        ) is not None:
            print(f"interpolate: {len(res['methods'])} runs in {Path(args.out) / 'results.json'}")
        return 0
    from anchorft.studies.testbed.compare_config import load_config

    cfg = load_config(args.preset)
    if args.cmd == "pretrain":
        from anchorft.toy.pretrain import pretrain_claimed

        overrides = {k: v for k, v in (("steps", args.steps), ("seed", args.seed)) if v is not None}
        metrics = pretrain_claimed(dataclasses.replace(cfg.pretrain, **overrides), args.out, args.no_cache,
                                   args.overwrite)  # fmt: skip
        if metrics is not None:
            acc = ", ".join(f"{s}={v:.2f}" for s, v in metrics["greedy_accuracy"].items())
            print(f"pretrained model in {args.out} ({metrics['params']:,} parameters; loss.png: the loss curve)")
            print(f"greedy accuracy: {acc}")
        return 0
    from anchorft.studies.testbed.compare import compare_into

    if args.seeds:
        cfg.seeds = list(args.seeds)
    elif args.n_seeds is not None:
        if args.n_seeds < 1:
            raise ValueError(f"--n-seeds: must be >= 1, got {args.n_seeds}")
        cfg.seeds = list(range(args.n_seeds))
    # default: one worker per thread (each fine-tune then runs on one thread, pretraining on all of them)
    workers = args.workers if args.workers is not None else args.threads
    if workers < 1:
        raise ValueError(f"--workers: must be >= 1, got {workers}")
    if compare_into(cfg, args.out, args.methods, args.sweep, workers, cluster_from(args), args.overwrite) is None:
        return 0
    for folder in [*base_folders(args.out).values()] or [args.out]:  # one comparison per base, or the one
        print(f"wrote {existing_files(folder, 'report.md', 'tradeoff.png', 'results.json')}")
    return 0
