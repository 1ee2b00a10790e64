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
import json
import sys
from dataclasses import fields
from pathlib import Path

from anchorft.analysis.config import AnalysisConfig
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, field_values, parse_named
from anchorft.preflight import resolve_model_folder
from anchorft.runs import run_claimed
from anchorft.studies.testbed.analysis import testbed_ood_fisher_file, testbed_prompt_files
from anchorft.studies.testbed.layout import first_seed_models


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
            print("anchorft analyze: error: --threads must be >= 1", file=sys.stderr)
            return 2
        import torch

        torch.set_num_threads(args.threads)
    from anchorft.analysis.run import run_analysis

    run = {k: v for k, v in vars(args).items() if k not in ("out", "threads", "overwrite", "device")}

    def work(claim) -> dict:
        tuned = parse_named(args.tuned, "--tuned")
        base = args.base
        if args.compare and (base is None or not tuned):
            models = Path(args.compare) / "models"
            if base is None and (models / "base").is_dir():
                base = str(models / "base")
            if not tuned and models.is_dir():
                found = {n: str(d) for n, d in first_seed_models(args.compare).items()}
                results = Path(args.compare) / "results.json"
                order = list(json.loads(results.read_text()).get("methods", {})) if results.is_file() else []
                tuned = {n: found[n] for n in order if n in found} | {n: p for n, p in found.items() if n not in order}
        if base is None:
            raise ValueError("--base is required (or --compare DIR with DIR/models/base)")

        base = resolve_model_folder(base, "--base")  # a folder, or a hub id's snapshot in the hub cache
        tuned = {n: resolve_model_folder(d, f"--tuned {n}") for n, d in tuned.items()}
        prompts = list(args.prompts)
        if args.testbed:
            folder = Path(args.out) / "testbed_prompts"
            tb_sets, tb_fisher = testbed_prompt_files(folder, seed=args.seed, compare_dir=args.compare)
            prompts += tb_sets
            if args.fisher_data is None:
                args.fisher_data = tb_fisher
            if args.fisher_ood_data is None:
                args.fisher_ood_data = testbed_ood_fisher_file(folder, seed=args.seed, compare_dir=args.compare)
        # every flag named as a field of the config; the models and prompts as resolved here
        cfg = field_values(args, AnalysisConfig, base=base, tuned=tuned, prompts=prompts)
        return run_analysis(AnalysisConfig(**cfg, streaming=not args.in_memory, plots=not args.no_plots))

    res = run_claimed(args.out, "analyze", run, work, overwrite=args.overwrite)  # a user error: by anchorft.cli
    if res is None:
        return 0
    print("\n".join(summary_lines(res, Path(args.out))))
    return 0


def summary_lines(res: dict, out: Path) -> list[str]:
    """A few lines a person reads: per model the top-k subspaces' mean turn and the weights' change (means over
    matrices); the numbers in full are in analysis.json."""
    lines = [f"top-{res['rank']} subspaces of each matrix against the base (means over matrices):"]
    width = max((len(m) for m in res["rotation"]), default=0)
    for m, r in res["rotation"].items():
        o = r["overall"]
        turn = (o["angle_u_mean_deg"] + o["angle_v_mean_deg"]) / 2
        lines.append(
            f"  {m:<{width}}  turned {turn:5.2f} deg (max {max(o['angle_u_max_deg'], o['angle_v_max_deg']):.2f}), "
            f"weights changed {100 * o['weight_rel_change']:.2f} %, "
            f"{100 * o['block_share_of_update']:.0f} % of the update inside the block"
        )
    parts = [p for p in ("drift", "fisher", "rank_sensitivity") if p in res]
    lines.append(f"also: {', '.join(parts) or 'rotation only'}; {len(res['figures'])} figures")
    lines.append(f"wrote {out / 'analysis.json'} (every number) and the figures in {out}")
    return lines
