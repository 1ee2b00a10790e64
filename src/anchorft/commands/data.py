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

from anchorft.data import openr1, release  # called as module.function: a test may stand in for one
from anchorft.data.arguments import BenchmarksArguments, DapoArguments, OpenR1Arguments
from anchorft.data.benchmarks import fetch_benchmarks
from anchorft.data.prepare import prepare_into
from anchorft.dataclass_flags import FlagParser, both_spellings, subcommand
from anchorft.errors import UsageError, one_line


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft data", description="Prepare fine-tuning data.")
    sub = p.add_subparsers(dest="dataset", required=True)
    subcommand(
        sub, "openr1-math", OpenR1Arguments, help="OpenR1-Math traces in the RPSFT paper's conversational format"
    )
    subcommand(
        sub,
        "dapo-math",
        DapoArguments,
        help="DAPO-Math-17k (the release's RL data) -> RL prompts with gold answers for `anchorft rl`",
    )
    subcommand(
        sub,
        "benchmarks",
        BenchmarksArguments,
        help="the paper's evaluation files (id/, ood/), fetched from its release and checked by SHA-256",
    )
    both_spellings(p)  # fmt: skip
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
    from anchorft.eval.benchmarks import benchmarks_dir  # lazy: loads torch

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
