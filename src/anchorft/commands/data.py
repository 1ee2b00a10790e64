"""`anchorft data`: prepare fine-tuning data.

anchorft data openr1-math --out data/train_openr1_4k [--source wh-zhu/train_openr1_4k | PATH] [--limit N]
    the paper's release set, converted as the release converts it (every row, in order; the default)
anchorft data openr1-math --sampler verified --out data/openr1-math-4k [--size 4000] [--seed 0] [--limit N]
                          [--source open-r1/OpenR1-Math-220k | PATH.jsonl | PATH.parquet | DIR]
    our own seeded subset of OpenR1-Math-220k, each trace checked by math-verify
anchorft data dapo-math --out data/dapo [--source wh-zhu/dapo | PATH.jsonl | PATH.parquet] [--prompt-style boxed]
anchorft data benchmarks [--out DIR] [--from DIR] [--include gpqa]
    the paper's evaluation files from its public release at a pinned commit, each checked by SHA-256
    (default --out: $ANCHORFT_BENCHMARKS, else the user's data folder, where `anchorft eval suite` looks)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from anchorft.data import dapo, openr1, release  # called as module.function: a test may stand in for one
from anchorft.data.benchmarks import OPTIONAL, RELEASE_COMMIT, RELEASE_REPO, fetch_benchmarks
from anchorft.data.prepare import prepare_into
from anchorft.dataclass_flags import FlagParser, both_spellings, keyword_defaults
from anchorft.errors import UsageError, one_line


def _parser() -> argparse.ArgumentParser:
    od = keyword_defaults(openr1.prepare_openr1_math)  # the release sampler's split and format are the same

    p = FlagParser(prog="anchorft data", description="Prepare fine-tuning data.")
    sub = p.add_subparsers(dest="dataset", required=True)
    o = sub.add_parser(
        "openr1-math",
        help="OpenR1-Math traces in the RPSFT paper's conversational format",
        description=f"--sampler release (default): every row of {release.RELEASE_HUB_NAME} (or --source in its "
        "schema), converted as the paper's release converts it. --sampler verified: a seeded subset of --size rows of "
        f"{openr1.HUB_NAME} whose trace's last \\boxed{{}} verifies (math-verify) against `answer`. Both write "
        "DIR/train.jsonl, config.json, metrics.json, lengths.png.",
    )
    o.add_argument("--out", required=True, help="output folder")
    o.add_argument("--sampler", choices=("release", "verified"), default="release")
    o.add_argument(
        "--source",
        default=None,
        help=f"hub dataset name or local .jsonl/.parquet/folder (default: {release.RELEASE_HUB_NAME} for the release "
        f"sampler, {openr1.HUB_NAME} for the verified one)",
    )
    o.add_argument("--subset", default=od["subset"], help="hub config name (default: %(default)s)")
    o.add_argument("--split", default=od["split"])
    o.add_argument("--size", type=int, default=od["size"], help="verified sampler: examples to keep (paper: about 4k)")
    o.add_argument("--seed", type=int, default=od["seed"], help="verified sampler: order in which rows are visited")
    o.add_argument("--limit", type=int, default=None, help="read only the first N source rows")
    o.add_argument("--format", dest="fmt", choices=openr1.FORMATS, default=od["fmt"])
    o.add_argument("--no-progress", action="store_true")
    o.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")

    dd = keyword_defaults(dapo.prepare_dapo_math)

    d = sub.add_parser(
        "dapo-math",
        help="DAPO-Math-17k (the release's RL data) -> RL prompts with gold answers for `anchorft rl`",
        description="Write DIR/train.jsonl (the paper's benchmark format: prompt messages, "
        "reward_model.ground_truth), config.json, metrics.json; duplicated problems are dropped and counted.",
    )
    d.add_argument("--out", required=True, help="output folder")
    d.add_argument(
        "--source", default=dd["source"], help="hub dataset name or local .jsonl/.parquet/folder (%(default)s)"
    )
    d.add_argument("--split", default=dd["split"])
    d.add_argument("--limit", type=int, default=None, help="read only the first N source rows")
    d.add_argument(
        "--prompt-style",
        dest="prompt_style",
        choices=["boxed", "original"],
        default=dd["prompt_style"],
        help="boxed: the boxed system prompt + the bare problem (default); original: the row's messages",
    )
    d.add_argument("--keep-duplicates", dest="dedupe", action="store_false")
    d.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    from anchorft.eval.benchmarks import benchmarks_dir

    b = sub.add_parser(
        "benchmarks",
        help="the paper's evaluation files (id/, ood/), fetched from its release and checked by SHA-256",
        description=f"Fetch evaluation/data/ of github.com/{RELEASE_REPO} at commit {RELEASE_COMMIT[:12]} (or copy "
        "it from --from), checking every file's SHA-256 against the pinned one; a mismatch is refused. GPQA only "
        "with --include gpqa (its authors ask that its items not be redistributed in plain text).",
    )
    b.add_argument("--out", default=None, help=f"output folder (default: {benchmarks_dir()})")
    b.add_argument("--from", dest="source", metavar="DIR", help="copy a folder on disk (evaluation/data/ or a clone)")
    b.add_argument("--include", nargs="+", default=[], choices=sorted(OPTIONAL), help="optional sets, by name")
    b.add_argument("--overwrite", action="store_true", help="replace files whose SHA-256 differs")
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.dataset == "benchmarks":
        return _benchmarks(args)

    if args.dataset == "openr1-math" and args.source is None:
        args.source = release.RELEASE_HUB_NAME if args.sampler == "release" else openr1.HUB_NAME
    run = {k: v for k, v in vars(args).items() if k not in ("out", "no_progress", "overwrite")}
    progress = not getattr(args, "no_progress", False)  # dapo-math has no progress bar to turn off
    metrics = prepare_into(args.out, run, args.overwrite, progress=progress)  # errors: by anchorft.cli
    if metrics is None:
        return 0
    print(json.dumps(metrics, indent=2))
    if metrics.get("short_by"):
        print(f"warning: only {metrics['kept']} of {args.size} requested examples verified", file=sys.stderr)
    return 0


def _benchmarks(args: argparse.Namespace) -> int:
    from anchorft.eval.benchmarks import benchmarks_dir

    out = args.out or str(benchmarks_dir())
    print(f"anchorft data benchmarks: writing to {out}", flush=True)
    try:
        files = fetch_benchmarks(out, source=args.source, include=args.include, overwrite=args.overwrite,
                                 log=lambda line: print(line, flush=True))  # fmt: skip
    except OSError as err:  # a download or a write that failed: the user's network or disk, reported in one line
        raise UsageError(one_line(err)) from err
    print(f"{len(files)} files in {out}, each SHA-256 equal to the release's")
    if args.out and Path(out).resolve() != benchmarks_dir().resolve():
        print(f"point `anchorft eval suite` at them with --bench-dir {out} or ANCHORFT_BENCHMARKS={out}")
    return 0
