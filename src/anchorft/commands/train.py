"""`anchorft train`: fine-tune with RPSFT or a baseline; `anchorft train --estimate`: anchor cost on paper.

anchorft train --config configs/rpsft/example-tiny.yaml [--any_RPSFTConfig_field value ...]
anchorft train --model_name_or_path PATH --dataset PATH.jsonl --output_dir runs/x --method rpsft
anchorft train --estimate --model_config configs/models/llama-3.1-8b-instruct.json --anchor_rank 768
anchorft train --config configs/rpsft/qwen2.5-3b-instruct/rpsft.yaml --dry-run   (two steps on a tiny stand-in)

Recipes in configs/rpsft/ name their parents with `preset:`; the merged recipe becomes TrlParser's defaults, and
the flags win (anchorft.rpsft.recipes); `--dry-run` runs a recipe on a stand-in model (anchorft.rpsft.stand_in).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Sequence

import yaml

from anchorft import stop
from anchorft.commands.flags import normalize_train_argv, short_help, short_or_all_help
from anchorft.dataclass_flags import (
    FlagParser,
    add_field_flags,
    both_spellings,
    field_values,
    keyword_defaults,
    pop_flag,
)
from anchorft.dataclass_yaml import parse_overrides
from anchorft.errors import UsageError
from anchorft.eval.loading import load_tokenizer
from anchorft.resources import config_path
from anchorft.rpsft import prechecks  # module.function: a test may turn a check off
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.estimate_report import ANCHOR_FLAGS, EstimateInputs, estimate_flags, estimate_report
from anchorft.rpsft.recipes import parse_with_config, trainer_mapping
from anchorft.rpsft.stand_in import check_recipe_data, dry_run, dry_run_summary
from anchorft.runs import finish


def _estimate(argv: list[str]) -> int:
    why = f"anchor memory and FLOPs, no weights (--anchor_rank: the recipe's, else {AnchorOptions.anchor_rank})"
    p = FlagParser(prog="anchorft train --estimate", description=why)
    p.add_argument("--estimate", action="store_true")
    names, shown = estimate_flags()
    add_field_flags(p, EstimateInputs, names, defaults=shown)
    # the anchor's own flags, from AnchorOptions (each: the flag, else the recipe's, else AnchorOptions'); rules,
    # maps, layers, budgets and targets other than all-linear are resolved on the weights: --model_config a folder
    add_field_flags(p, AnchorOptions, ANCHOR_FLAGS, defaults=dict.fromkeys(ANCHOR_FLAGS))
    both_spellings(p)
    a = p.parse_args(argv)
    inputs = EstimateInputs(**field_values(a, EstimateInputs), anchor={n: getattr(a, n) for n in ANCHOR_FLAGS})
    print(estimate_report(inputs), end="")  # a bad recipe, config.json, rule, map or model folder: by anchorft.cli
    return 0


def dry_run_main(argv: Sequence[str]) -> int:
    """`anchorft train --config X.yaml --dry-run [--dry_run_steps N] [--output_dir D] [--field value ...]`.

    Any other `--field value` pair overrides the recipe (validated like the recipe's own keys)."""

    p = FlagParser(prog="anchorft train --dry-run")
    p.add_argument("--config", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--dry_run_steps", "--dry-run-steps", type=int, default=keyword_defaults(dry_run)["steps"])
    p.add_argument("--output_dir", default=None, help="default: a fresh temporary folder")
    p.add_argument("--dataset", default=None, help="train on the first rows of this local dataset instead")
    p.add_argument("--model_config", default=None, help="the real config.json (default: the recipe's)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (a tiny model: 1 is fastest)")
    p.add_argument(
        "--no-data-check", dest="data_check", action="store_false",
        help="do not require the recipe's dataset to exist (check the recipe alone, before preparing the data)",
    )  # fmt: skip
    both_spellings(p)
    ns, rest = p.parse_known_args(list(argv))
    overrides = {k: yaml.safe_load(v) for k, v in parse_overrides(rest).items()}  # recipe values, as YAML reads them
    if ns.data_check and ns.dataset is None:
        check_recipe_data(ns.config, overrides)  # a user error here and below: one line, by anchorft.cli
    out = ns.output_dir or tempfile.mkdtemp(prefix="anchorft-dry-run-")
    import torch  # lazy: loads torch

    torch.set_num_threads(ns.threads)
    s = dry_run(ns.config, out, steps=ns.dry_run_steps, overrides=overrides, dataset=ns.dataset,
                model_config=ns.model_config)  # fmt: skip
    print(dry_run_summary(s, out))
    if not s["same_branches_as_real"]:
        print(f"note: SVD/fallback branch differs from full size for {s['branch_mismatches']}", file=sys.stderr)
    return 0


def _parse_train_argv(argv: list[str]):
    """(ScriptArguments, RPSFTConfig) from argv: the `--config` recipe (parents merged, validated) as defaults."""
    from trl import TrlParser  # lazy: loads TRL

    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch

    parser = TrlParser((ScriptArguments, RPSFTConfig), prog="anchorft train")
    return parse_with_config(parser, argv, trainer_mapping)


def _missing(values: dict) -> list[str]:
    """The script arguments a fine-tune needs that `values` leaves unset."""
    return [n for n in ("model_name_or_path", "dataset") if values.get(n) is None]


def main(argv: list[str]) -> int:
    if "--estimate" in argv and ("-h" in argv or "--help" in argv):  # its own flags (--stage, --gpus, --seq_len)
        return _estimate(["--estimate", "--help"])
    argv = short_or_all_help(normalize_train_argv(list(argv)), short_help)
    if argv is None:
        return 0

    mode = next((m for m in ("--dry-run", "--estimate") if m in argv), None)
    if mode is not None and prechecks.config_given(argv) is not None:  # a missing recipe before torch and TRL load
        config_path(prechecks.config_given(argv))  # a user error here and below: one line, by anchorft.cli
    if mode == "--dry-run":
        return dry_run_main(argv)
    if mode == "--estimate":
        return _estimate(argv)
    argv, overwrite = pop_flag(argv, "--overwrite")
    # what needs no model, checked before TRL is imported (seconds); --help-all is TrlParser's own help
    given = prechecks.check_train_argv(argv) if "--help" not in argv else None
    if given is not None and _missing(given):
        raise UsageError(f"missing --{' --'.join(_missing(given))}")
    if given is not None:
        prechecks.check_train_inputs(given)  # the data, model and output folder, before TRL too
    script, args = _parse_train_argv(argv)
    if _missing(dataclasses.asdict(script)):
        raise UsageError(f"missing --{' --'.join(_missing(dataclasses.asdict(script)))}")
    from anchorft.rpsft.train import check_train_inputs, claim_training_run, run_artifacts, train  # lazy: torch

    check_train_inputs(script, args)  # everything the user named, before a model is loaded
    asked = args.resume_from_checkpoint
    claim, complete = claim_training_run(script, args, overwrite)
    if complete:
        print(f"anchorft train: {args.output_dir} already holds this finished run (same config); --overwrite to redo")
        return 0

    tok = None
    if script.tokenizer_name_or_path:
        tok = load_tokenizer(script.tokenizer_name_or_path, trust_remote_code=bool(args.trust_remote_code))
    if int(os.environ.get("RANK", "0")) == 0:  # before loading, which takes minutes for a large model
        print(f"anchorft train: {args.method} on {script.model_name_or_path} -> {args.output_dir}", flush=True)
        if args.resume_from_checkpoint not in (None, False, "false", "False"):
            found = "the same run, unfinished, is in the folder: " if asked is None else ""
            print(f"anchorft train: {found}resuming from {args.resume_from_checkpoint}", flush=True)
    model, fisher = script.model_name_or_path, None
    if args.anchored and str(args.anchor_rank_rule or "").startswith("fisher"):
        from anchorft.analysis.fisher import anchor_fisher_inputs  # lazy: loads torch

        model, tok, fisher = anchor_fisher_inputs(args, script.model_name_or_path, script.dataset, tok)
    trainer = train(args, model, script.dataset, tokenizer=tok, eval_dataset=script.eval_dataset, anchor_fisher=fisher)
    trainer.save_model(args.output_dir)  # on every rank: Trainer saves from the main process (gathers under FSDP)

    stop.check(agree=True)  # a signal during the save: every rank stops (marked interrupted), none finishes
    if trainer.is_world_process_zero():
        if claim is not None:
            finish(claim)
        print(f"done: {trainer.state.global_step} steps; in {args.output_dir}: {run_artifacts(trainer)}")
    return 0
