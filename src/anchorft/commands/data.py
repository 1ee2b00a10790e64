"""`anchorft data`: prepare fine-tuning data.

anchorft data openr1-math --out data/train_openr1_4k [--source wh-zhu/train_openr1_4k | PATH] [--limit N]
    the paper's release set, converted as the release converts it (every row, in order; the default)
anchorft data openr1-math --sampler verified --out data/openr1-math-4k [--size 4000] [--seed 0] [--limit N]
                          [--source open-r1/OpenR1-Math-220k | PATH.jsonl | PATH.parquet | DIR]
    our own seeded subset of OpenR1-Math-220k, each trace checked by math-verify
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    from anchorft.data.openr1 import FORMATS, HUB_NAME
    from anchorft.data.release import RELEASE_HUB_NAME

    p = argparse.ArgumentParser(prog="anchorft data", description="Prepare fine-tuning data.")
    sub = p.add_subparsers(dest="dataset", required=True)
    o = sub.add_parser(
        "openr1-math",
        help="OpenR1-Math traces in the RPSFT paper's conversational format",
        description=f"--sampler release (default): every row of {RELEASE_HUB_NAME} (or --source in its schema), "
        "converted as the paper's release converts it. --sampler verified: a seeded subset of --size rows of "
        f"{HUB_NAME} whose trace's last \\boxed{{}} verifies (math-verify) against `answer`. Both write "
        "DIR/train.jsonl, config.json, metrics.json, lengths.png.",
    )
    o.add_argument("--out", required=True, help="output folder")
    o.add_argument("--sampler", choices=("release", "verified"), default="release")
    o.add_argument(
        "--source",
        default=None,
        help=f"hub dataset name or local .jsonl/.parquet/folder (default: {RELEASE_HUB_NAME} for the release "
        f"sampler, {HUB_NAME} for the verified one)",
    )
    o.add_argument("--subset", default="default", help="hub config name (default: %(default)s)")
    o.add_argument("--split", default="train")
    o.add_argument("--size", type=int, default=4000, help="verified sampler: examples to keep (paper: about 4k)")
    o.add_argument("--seed", type=int, default=0, help="verified sampler: order in which rows are visited")
    o.add_argument("--limit", type=int, default=None, help="read only the first N source rows")
    o.add_argument("--format", dest="fmt", choices=FORMATS, default="prompt-completion")
    o.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from anchorft.data.openr1 import HUB_NAME, prepare_openr1_math
    from anchorft.data.release import RELEASE_HUB_NAME, prepare_release_set

    if args.sampler == "release":
        try:
            metrics = prepare_release_set(
                args.out, source=args.source or RELEASE_HUB_NAME, limit=args.limit, fmt=args.fmt, split=args.split
            )
        except ValueError as err:
            print(f"anchorft data: error: {err}", file=sys.stderr)
            return 2
        print(json.dumps(metrics, indent=2))
        return 0
    args.source = args.source or HUB_NAME
    try:
        metrics = prepare_openr1_math(
            args.out,
            source=args.source,
            size=args.size,
            seed=args.seed,
            limit=args.limit,
            fmt=args.fmt,
            subset=args.subset,
            split=args.split,
            progress=not args.no_progress,
        )
    except ValueError as err:
        print(f"anchorft data: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2))
    if metrics["short_by"]:
        print(f"warning: only {metrics['kept']} of {args.size} requested examples verified", file=sys.stderr)
    return 0
