"""`anchorft toy verdict`: which way of fine-tuning keeps most, from one or more testbed comparisons.

Dispatched from `anchorft toy` (commands/toy.py) as the `verdict` subcommand: `main_verdict(argv)` takes the
arguments after `verdict`. The study is `anchorft.studies.testbed.verdict`.

anchorft toy verdict --from DIR [DIR ...] --runs RUN [RUN ...] --front RUN [RUN ...] --out DIR
                     [--pick GROUP=RUN,RUN ...] [--split reported|val] [--boot N] [--seed S] [--level 0.95]
                     [--method hull-bc|first] [--confirm ROW] [--sesoi POINTS]
anchorft toy verdict --from DIR [DIR ...] --power RUN=REFERENCE --out DIR [--bases 4 6 8] [--seeds 3 5] [--items N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings
from anchorft.io import write_json
from anchorft.runs import run_claimed
from anchorft.studies.testbed import verdict as study
from anchorft.studies.testbed.arguments import VerdictArguments
from anchorft.studies.testbed.report import parse_picks


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft toy verdict", description=" ".join(VerdictArguments.__doc__.split()))
    both_spellings(add_field_flags(p, VerdictArguments))
    return p


def main_verdict(argv: list[str]) -> int:
    args = VerdictArguments(**vars(_parser().parse_args(argv)))  # a mistake: one line, by anchorft.cli
    picks = parse_picks(args.pick)

    run = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite")}  # the claim: as before
    run["sources"] = [str(Path(s).resolve()) for s in args.sources]

    def work(claim) -> dict:
        if args.power is not None:
            name, ref = args.power.split("=", 1)
            table = study.power_table(args.sources, name, ref, args.bases, args.seeds, args.items, level=args.level)
            write_json(Path(args.out) / "power.json", table, indent=1)
            return table
        return study.run_verdict(
            args.sources, args.runs or [], args.front, args.out, args.split, args.boot, args.seed, args.level,
            args.also, picks, args.method, args.confirm, args.sesoi,
        )  # fmt: skip

    result = run_claimed(args.out, "toy verdict", run, work, overwrite=args.overwrite)
    if result is None:
        return 0
    if args.power is not None:
        print(json.dumps(result, indent=1))
    else:
        print(study.verdict_markdown(result), end="")
    return 0
