"""`anchorft toy pretrain`, `compare`, `report` and `interpolate` (WiSE-FT): the embedded testbed; `toy bench`
writes its held-out math items as benchmark files for `anchorft eval`; `toy pack` / `unpack` a study's record."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.commands.toy_rl import main_rl
from anchorft.dataclass_flags import FlagParser, both_spellings, subcommand
from anchorft.dataclass_yaml import resolve_presets
from anchorft.resources import configs_dir
from anchorft.runs import check_output_dir, existing_files
from anchorft.studies.testbed import arguments as a
from anchorft.studies.testbed import record
from anchorft.studies.testbed import report as testbed_report  # module.function: a test may stand in for one
from anchorft.studies.testbed.layout import base_folders
from anchorft.toy.bench import bench_into


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft toy", description="Embedded testbed: a tiny pretrained Llama.")
    sub = p.add_subparsers(dest="cmd", required=True)
    subs = [subcommand(sub, "pretrain", a.PretrainArguments), subcommand(sub, "compare", a.CompareArguments)]
    subs += [subcommand(sub, "report", a.ReportArguments), subcommand(sub, "interpolate", a.InterpolateArguments)]
    subs += [subcommand(sub, "bench", a.BenchArguments, help="the testbed's held-out math items as benchmark files "
                        "for `anchorft eval --bench` (CPU)")]  # fmt: skip
    subs += [subcommand(sub, "pack", a.PackArguments), subcommand(sub, "unpack", a.UnpackArguments)]
    for sp in subs[1], subs[3]:
        add_executor_flags(sp)
    for sp in subs:  # the global option is accepted after the subcommand too
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
    if extra and args.cmd not in ("rl", "verdict"):  # before torch loads
        _parser().error(f"unrecognized arguments: {' '.join(extra)}")
    if args.cmd == "verdict":
        from anchorft.commands.toy_verdict import main_verdict  # lazy: loads scipy (a second; no torch)

        return main_verdict(extra)  # statistics on saved grades
    # the values and the output folder, before torch loads (seconds)
    counts = {"--threads": args.threads, **{f"--{k.replace('_', '-')}": getattr(args, k, None)
                                             for k in ("n_seeds", "workers", "steps")}}  # fmt: skip
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"{flag}: must be >= 1, got {value}")
    if args.cmd in ("pretrain", "compare", "interpolate", "bench") and not extra:
        check_output_dir(args.out)
    if args.cmd == "bench":
        if (paths := bench_into(args.out, args.skills, args.items, args.seed, args.overwrite)) is not None:
            print(f"toy bench: {args.items} items per file in {', '.join(map(str, paths))}")
        return 0
    if args.cmd == "pack":
        paths = record.pack_study(args.source, args.out, args.bases)
        print(f"toy pack: {len(paths)} record(s) in {args.out}: {', '.join(p.name for p in paths)}")
        return 0
    if args.cmd == "unpack":
        print(f"toy unpack: {record.unpack_study(args.source, args.out)} files written under {args.out}")
        return 0
    if args.cmd == "report":
        merged = testbed_report.report_into(args.sources, args.out, args.front, args.pick, args.overwrite)
        print(f"report: {Path(args.out) / 'report.md'}  ({len(merged['methods'])} runs from {len(args.sources)} "
              "comparisons)")  # fmt: skip
        return 0
    if args.cmd == "rl":  # its own flags and checks (commands/toy_rl.py) before torch loads
        return main_rl([*(["--threads", str(args.threads)] if args.threads is not None else []), *extra])
    # the branches above need no torch (files and statistics); those below do
    if args.threads is None:  # the command's thread policy (anchorft.threads), at most 4
        import torch  # lazy: loads torch (seconds)

        args.threads = max(1, min(4, torch.get_num_threads()))
    import torch  # lazy: each branch below loads it (pretraining, fine-tuning, interpolating)

    torch.set_num_threads(args.threads)
    if args.cmd == "interpolate":
        from anchorft.studies.testbed.interpolate import interpolate_into  # lazy: loads torch

        cluster = cluster_from(args, local_only={"--workers": args.workers})
        workers = args.workers or 1
        if (
            res := interpolate_into(args.compare, args.runs, args.alphas, args.out, args.overwrite, cluster, workers)
        ) is not None:
            print(f"interpolate: {len(res['methods'])} runs in {Path(args.out) / 'results.json'}")
        return 0
    from anchorft.studies.testbed.compare_config import load_config  # lazy: loads torch

    cfg = load_config(args.preset)
    if args.cmd == "pretrain":
        from anchorft.toy.pretrain import pretrain_claimed  # lazy: loads torch

        overrides = {k: v for k, v in (("steps", args.steps), ("seed", args.seed)) if v is not None}
        metrics = pretrain_claimed(dataclasses.replace(cfg.pretrain, **overrides), args.out, args.no_cache,
                                   args.overwrite)  # fmt: skip
        if metrics is not None:
            acc = ", ".join(f"{s}={v:.2f}" for s, v in metrics["greedy_accuracy"].items())
            print(f"pretrained model in {args.out} ({metrics['params']:,} parameters; loss.png: the loss curve)")
            print(f"greedy accuracy: {acc}")
        return 0
    from anchorft.studies.testbed.compare import compare_into  # lazy: loads torch

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
    cluster = cluster_from(args, local_only={"--workers": args.workers})
    if compare_into(cfg, args.out, args.methods, args.sweep, workers, cluster, args.overwrite) is None:
        return 0
    for folder in [*base_folders(args.out).values()] or [args.out]:  # one comparison per base, or the one
        print(f"wrote {existing_files(folder, 'report.md', 'tradeoff.png', 'results.json')}")
    return 0
