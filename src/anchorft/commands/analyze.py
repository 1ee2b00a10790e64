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

from anchorft.analysis.config import AnalysisConfig
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings
from anchorft.studies.testbed.analysis import analysis_summary, analyze_into


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft analyze", description=__doc__.split("\n")[0])
    p.add_argument("--base", help="base (pretrained) checkpoint: a directory (config.json + safetensors) or a hub id")
    p.add_argument("--tuned", action="append", default=[], metavar="NAME=DIR", help="a fine-tuned checkpoint")
    p.add_argument("--out", required=True, help="output directory (analysis.json, config.json, PNGs)")
    p.add_argument("--prompts", action="append", default=[], metavar="FILE.jsonl", help="evaluation set for drift")
    p.add_argument(
        "--testbed",
        action="store_true",
        help="add the testbed's per-skill ID/OOD eval sets for drift (and its ID train items as Fisher data)",
    )
    # the other options: AnalysisConfig's fields, with their defaults, choices and help
    own = ("base", "tuned", "out", "prompts", "streaming", "plots")  # the flags above and below
    add_field_flags(p, AnalysisConfig, tuple(f.name for f in fields(AnalysisConfig) if f.name not in own))
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is much faster on a shared, busy machine)")
    p.add_argument("--in-memory", action="store_true", help="load whole models instead of streaming (same numbers)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError("--threads must be >= 1")
        import torch  # lazy: loads torch (seconds); a mistake above is reported first

        torch.set_num_threads(args.threads)
    run = {k: v for k, v in vars(args).items() if k not in ("out", "threads", "overwrite", "device")}
    res = analyze_into(args.out, run, args.overwrite)  # a user error: one line, by anchorft.cli
    if res is not None:
        print("\n".join(analysis_summary(res, Path(args.out))))
    return 0
