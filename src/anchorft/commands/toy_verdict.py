"""`anchorft toy verdict`: which way of fine-tuning keeps most, from one or more testbed comparisons.

Dispatched from `anchorft toy` (commands/toy.py) as the `verdict` subcommand: `main_verdict(argv)` takes the
arguments after `verdict`. The study is `anchorft.studies.testbed.verdict`.

anchorft toy verdict --from DIR [DIR ...] --runs RUN [RUN ...] --front RUN [RUN ...] --out DIR
                     [--pick GROUP=RUN,RUN ...] [--split reported|val] [--boot N] [--seed S] [--level 0.95]
anchorft toy verdict --from DIR [DIR ...] --power RUN=REFERENCE --out DIR [--bases 4 6 8] [--seeds 3 5] [--items N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from anchorft.dataclass_flags import FlagParser, both_spellings
from anchorft.io import write_json
from anchorft.runs import run_claimed
from anchorft.studies.testbed.report import parse_picks


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(
        prog="anchorft toy verdict",
        description="Each run's excess ID gain over the front of others, with paired bootstrap intervals per base "
        "and a Hartung-Knapp pooled interval over bases; or (--power) a pilot's variance components and the effect "
        "each design detects.",
    )
    p.add_argument(
        "--from", dest="sources", nargs="+", required=True,
        help="comparison folders (results.json and runs/*/scored_items.json), or studies over several bases "
        "(their base-seedB folders)",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="output folder (verdict.json and verdict.md, or power.json)")
    p.add_argument(
        "--with", dest="also", nargs="+", default=[], metavar="SUBDIR",
        help="folders inside each comparison whose runs are judged too, e.g. its WiSE-FT interpolation "
        "(toy interpolate --out COMPARISON/wise)",
    )  # fmt: skip
    p.add_argument("--runs", nargs="+", default=None, help="the runs judged")
    p.add_argument(
        "--pick", action="append", default=[], metavar="GROUP=RUN,RUN",
        help="an option judged with its knob picked on each base's validation items (the run of the largest excess "
        "over the front there), scored on the reported items; repeatable",
    )  # fmt: skip
    p.add_argument("--front", nargs="+", default=None, help="the runs whose upper hull (with the base) is the front")
    p.add_argument(
        "--split", choices=["reported", "val"], default="reported",
        help="the items scored: the reported ones, or the validation ones (for picking knobs before looking)",
    )  # fmt: skip
    p.add_argument("--boot", type=int, default=2000, help="bootstrap replicates per base (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--power", default=None, metavar="RUN=REFERENCE", help="the power calculation of a pilot instead")
    p.add_argument("--bases", type=int, nargs="+", default=[4, 6, 8], help="--power: numbers of bases to size")
    p.add_argument("--seeds", type=int, nargs="+", default=[3, 5], help="--power: fine-tuning seeds per base")
    p.add_argument("--items", type=int, default=None, help="--power: ID items per model (default: the pilot's)")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    both_spellings(p)
    return p


def main_verdict(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.boot < 2:
        raise ValueError(f"--boot: need >= 2 replicates, got {args.boot}")
    if not 0 < args.level < 1:
        raise ValueError(f"--level: must be in (0, 1), got {args.level}")
    if args.power is None and not ((args.runs or args.pick) and args.front):
        raise ValueError("--runs (or --pick) and --front are needed (or --power RUN=REFERENCE)")
    picks = parse_picks(args.pick)
    if args.items is not None and args.items < 1 or min(args.bases) < 2 or min(args.seeds) < 1:
        raise ValueError("--items must be >= 1, --bases >= 2 and --seeds >= 1")
    if args.power is not None and "=" not in args.power:
        raise ValueError(f"--power: expected RUN=REFERENCE, got {args.power!r}")

    from anchorft.studies.testbed import verdict as study

    run = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite")}
    run["sources"] = [str(Path(s).resolve()) for s in args.sources]

    def work(claim) -> dict:
        if args.power is not None:
            name, ref = args.power.split("=", 1)
            table = study.power_table(args.sources, name, ref, args.bases, args.seeds, args.items, level=args.level)
            write_json(Path(args.out) / "power.json", table, indent=1)
            return table
        return study.run_verdict(
            args.sources, args.runs or [], args.front, args.out, args.split, args.boot, args.seed, args.level,
            args.also, picks,
        )  # fmt: skip

    result = run_claimed(args.out, "toy verdict", run, work, overwrite=args.overwrite)
    if result is None:
        return 0
    if args.power is not None:
        print(json.dumps(result, indent=1))
    else:
        print(study.verdict_markdown(result), end="")
    return 0
