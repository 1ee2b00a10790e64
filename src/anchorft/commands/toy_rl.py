"""`anchorft toy rl`: the RL column of a finished testbed comparison (DAPO, then the same evaluation).

Dispatched from `anchorft toy` (commands/toy.py) as the `rl` subcommand: `main_rl(argv)` takes the
arguments after `rl`. Its settings' flags are the fields of `RLStageSettings` (`--lr` and `--skills` also
spell `--learning_rate` and `--prompt_skills`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, field_values
from anchorft.runs import check_output_dir, existing_files, run_claimed
from anchorft.studies.testbed.arguments import RLArguments
from anchorft.studies.testbed.rl_stage_config import RLStageSettings


def _parser() -> argparse.ArgumentParser:
    p = add_field_flags(
        FlagParser(prog="anchorft toy rl", description=" ".join(RLArguments.__doc__.split())), RLArguments
    )
    add_field_flags(p, RLStageSettings, aliases={"learning_rate": ("--lr",), "prompt_skills": ("--skills",)})
    add_executor_flags(p)
    both_spellings(p)
    return p


def main_rl(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads: must be >= 1, got {args.threads}")
    settings = RLStageSettings(**field_values(args, RLStageSettings))
    settings.prompt_skills = tuple(settings.prompt_skills)
    settings.check_values()  # before torch loads (seconds); validate() below adds DAPOConfig's checks
    cluster = cluster_from(args)
    out = Path(args.out) if args.out else Path(args.compare) / "rl"
    check_output_dir(out)
    if not (Path(args.compare) / "results.json").is_file():  # before torch loads; run_rl_stage checks the rest
        raise ValueError(f"--compare: {Path(args.compare) / 'results.json'} missing (run `anchorft toy compare --out "
                         f"{args.compare}` first)")  # fmt: skip
    import torch  # lazy: loads torch

    if args.threads is None:  # the command's thread policy (anchorft.threads), at most 4, as `anchorft toy`'s
        args.threads = max(1, min(4, torch.get_num_threads()))
    torch.set_num_threads(args.threads)
    from anchorft.studies.testbed.rl_stage import run_rl_stage  # lazy: loads TRL

    settings.validate()

    run = {"compare": str(Path(args.compare).resolve()), "methods": args.methods, "settings": vars(settings)}

    def rl_stage(claim) -> bool:
        run_rl_stage(
            args.compare, args.out, methods=args.methods, settings=settings, resume=claim.resume, cluster=cluster
        )
        return True

    if run_claimed(out, "toy rl", run, rl_stage, overwrite=args.overwrite) is None:
        return 0
    print(f"wrote {existing_files(out, 'report.md', 'results.json', 'reward_curve.png')}")
    return 0
