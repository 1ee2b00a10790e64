"""`anchorft toy rl`: the RL column of a finished testbed comparison (DAPO, then the same evaluation).

Dispatched from `anchorft toy` (commands/toy.py) as the `rl` subcommand: `main_rl(argv)` takes the
arguments after `rl`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from anchorft.commands.flags import both_spellings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anchorft toy rl",
        description="DAPO from the fine-tuned models of `anchorft toy compare`, evaluated before and after RL.",
    )
    p.add_argument("--compare", required=True, help="the comparison's output directory (results.json, models/)")
    p.add_argument("--out", default=None, help="output directory (default: COMPARE/rl)")
    p.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="run names, RUN-seedS for fine-tuning seed S of RUN (default: sft and the paper-rank rpsft runs)",
    )
    p.add_argument("--steps", type=int, default=60, help="DAPO optimiser steps (default 60)")
    p.add_argument("--lr", type=float, default=3e-4, help="learning rate (default 3e-4)")
    p.add_argument("--prompts-per-step", type=int, default=8, help="prompts a step, x 8 generations (default 8)")
    p.add_argument(
        "--skills",
        nargs="+",
        default=None,
        help="ID math skills for the RL prompts (math_easy, math_hard, math_word; default: the comparison's id_skill)",
    )
    p.add_argument("--n-prompts", type=int, default=512, help="training-split prompts (default 512)")
    p.add_argument("--seed", type=int, default=0, help="DAPO seed (sampling, data order)")
    p.add_argument("--no-save-models", action="store_true", help="do not keep the RL models (OUT/NAME/model)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument(
        "--anchor-method", default="none", choices=("none", "rpsft", "l2"),
        help="weight anchor during DAPO, W_0 = each starting (SFT) model (default none)",
    )  # fmt: skip
    p.add_argument("--anchor-rank", type=int, default=24, help="rank k of the rpsft anchor (default 24)")
    p.add_argument("--anchor-lambda", type=float, default=1.0, help="lambda of the anchor (default 1)")
    p.add_argument("--anchor-kind", default="block", choices=("block", "subspace"), help="anchor kind (default block)")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    both_spellings(p)
    return p


def main_rl(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.threads < 1:
        raise ValueError(f"--threads: must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    from anchorft.toy.rl_stage import RLStageSettings, run_rl_stage

    settings = RLStageSettings(
        steps=args.steps,
        learning_rate=args.lr,
        prompts_per_step=args.prompts_per_step,
        prompt_skills=tuple(args.skills or ()),
        n_prompts=args.n_prompts,
        seed=args.seed,
        save_models=not args.no_save_models,
        anchor_method=args.anchor_method,
        anchor_rank=args.anchor_rank,
        anchor_lambda=args.anchor_lambda,
        anchor_kind=args.anchor_kind,
    )
    settings.validate()
    from anchorft.runs import claim_output, existing_files, finish, reused

    out = Path(args.out) if args.out else Path(args.compare) / "rl"
    run = {"compare": str(Path(args.compare).resolve()), "methods": args.methods, "settings": vars(settings)}
    claim = claim_output(out, "toy rl", run, overwrite=args.overwrite)
    if claim.complete:
        print(reused(claim))
        return 0
    run_rl_stage(args.compare, args.out, methods=args.methods, settings=settings)
    finish(claim)
    print(f"wrote {existing_files(out, 'report.md', 'results.json', 'reward_curve.png')}")
    return 0
