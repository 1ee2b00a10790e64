"""`anchorft data`: prepare fine-tuning data.

anchorft data openr1-math --out data/openr1-math-4k [--size 4000] [--seed 0] [--limit N]
                          [--source open-r1/OpenR1-Math-220k | PATH.jsonl | PATH.parquet | DIR]
"""

from __future__ import annotations

import argparse
import json
import sys

from anchorft.commands.flags import both_spellings
from anchorft.errors import report


def _parser() -> argparse.ArgumentParser:
    from anchorft.data.openr1 import FORMATS, HUB_NAME

    p = argparse.ArgumentParser(prog="anchorft data", description="Prepare fine-tuning data.")
    sub = p.add_subparsers(dest="dataset", required=True)
    o = sub.add_parser(
        "openr1-math",
        help="OpenR1-Math -> verified traces in the RPSFT paper's conversational format",
        description="Keep rows whose trace's last \\boxed{} verifies (math-verify) against `answer`; a seeded "
        "subset of --size rows; write DIR/train.jsonl, config.json, metrics.json, lengths.png.",
    )
    o.add_argument("--out", required=True, help="output folder")
    o.add_argument("--source", default=HUB_NAME, help=f"hub dataset name or local .jsonl/.parquet/folder ({HUB_NAME})")
    o.add_argument("--subset", default="default", help="hub config name (default: %(default)s)")
    o.add_argument("--split", default="train")
    o.add_argument("--size", type=int, default=4000, help="examples to keep (paper: about 4k)")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--limit", type=int, default=None, help="read only the first N source rows")
    o.add_argument("--format", dest="fmt", choices=FORMATS, default="prompt-completion")
    o.add_argument("--no-progress", action="store_true")
    o.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from anchorft.data.openr1 import prepare_openr1_math
    from anchorft.preflight import check_input_file
    from anchorft.runs import claim_output, finish, reused

    if args.source.lower().endswith(".jsonl"):
        check_input_file(args.source, "--source")
    run = {k: v for k, v in vars(args).items() if k not in ("out", "no_progress", "overwrite")}
    claim = claim_output(args.out, "data openr1-math", run, overwrite=args.overwrite)
    if claim.complete:
        print(reused(claim))
        return 0
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
        return report("anchorft data", err)
    finish(claim)
    print(json.dumps(metrics, indent=2))
    if metrics["short_by"]:
        print(f"warning: only {metrics['kept']} of {args.size} requested examples verified", file=sys.stderr)
    return 0
