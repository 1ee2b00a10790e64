"""`anchorft analyze`: geometry of forgetting (rotation, hidden-state drift, Fisher overlap, rank sensitivity).

Example:
    anchorft analyze --base runs/cmp/models/base --tuned sft=runs/cmp/models/sft \
        --tuned rpsft=runs/cmp/models/rpsft --out runs/cmp/analysis --rank 16 \
        --prompts id.jsonl --prompts ood.jsonl --fisher-data train.jsonl --compare runs/cmp
With --compare DIR and no --base / --tuned, the models are taken from DIR/models/ (base in DIR/models/base;
the first seed of each run: DIR/models/NAME, not NAME-seedS).
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from anchorft.analysis.config import AnalysisConfig, AnalyzeArguments
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, parse_named
from anchorft.errors import UsageError
from anchorft.preflight import check_input_file, check_model_source
from anchorft.runs import check_output_dir
from anchorft.studies.testbed.analysis import analysis_summary, analyze_into


def _parser() -> argparse.ArgumentParser:
    p = add_field_flags(FlagParser(prog="anchorft analyze", description=__doc__.split("\n")[0]), AnalyzeArguments)
    # the other options: AnalysisConfig's fields (those AnalyzeArguments' stand for left out)
    own = {f.name for f in fields(AnalyzeArguments)} | {"streaming", "plots"}
    add_field_flags(p, AnalysisConfig, tuple(f.name for f in fields(AnalysisConfig) if f.name not in own))
    both_spellings(p)
    return p


def _check_inputs(args: argparse.Namespace) -> None:
    """The models, files and folders named, checked before torch loads (seconds): one line naming the flag."""
    tuned = parse_named(args.tuned, "--tuned")
    if args.compare is not None and not Path(args.compare).is_dir():
        raise UsageError(f"--compare: {args.compare} is not a folder (a `toy compare` output folder)")
    if args.base is None and args.compare is None:
        raise UsageError("--base is required (or --compare DIR with DIR/models/base)")
    check_model_source(args.base, "--base")
    for name, spec in tuned.items():
        check_model_source(spec, f"--tuned {name}")
    for path in args.prompts:
        check_input_file(path, "--prompts")
    check_input_file(args.fisher_data, "--fisher-data")
    check_input_file(args.fisher_ood_data, "--fisher-ood-data")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError("--threads must be >= 1")
        import torch  # lazy: loads torch (seconds); a mistake above is reported first

        torch.set_num_threads(args.threads)
    _check_inputs(args)  # the command line's own mistakes before torch loads
    check_output_dir(args.out)
    run = {k: v for k, v in vars(args).items() if k not in ("out", "threads", "overwrite", "device")}
    res = analyze_into(args.out, run, args.overwrite)  # a user error: one line, by anchorft.cli
    if res is not None:
        print("\n".join(analysis_summary(res, Path(args.out))))
    return 0
