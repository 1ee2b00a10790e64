"""`anchorft rl`: DAPO (TRL GRPOTrainer) from an SFT checkpoint, reward = math-verify correctness.

  anchorft rl --model DIR --dataset FILE.jsonl --out DIR [--config configs/rl/dapo.yaml] [--steps N ...]

The dataset is JSONL in the paper's benchmark format (prompt messages, reward_model.ground_truth)
or {"prompt": str | messages, "answer": str}. Settings: `DAPOConfig` (TRL's GRPOConfig counted in RL steps,
`anchorft.rpsft.dapo_config`) through TrlParser, as `anchorft train` reads `RPSFTConfig`: its defaults are the
paper's DAPO values, a YAML `--config` sets fields, and the flags (any field, as --snake_case or --kebab-case)
override both.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields

from anchorft.commands.flags import as_field, normalize_train_argv, short_or_all_help, source_sections, trl_sections
from anchorft.dataclass_flags import field_help
from anchorft.errors import UsageError
from anchorft.preflight import check_input_file, check_model_source
from anchorft.rpsft import prechecks  # module.function: a test may turn a check off
from anchorft.rpsft.anchor_options import anchor_option_names
from anchorft.rpsft.estimate import rl_memory_lines
from anchorft.rpsft.prechecks import source_fields
from anchorft.rpsft.recipes import NOT_HASHED
from anchorft.runs import check_output_dir, run_claimed

# --output_dir (TrainingArguments' name, which `anchorft train` takes) is this command's --out
_OUT_ALIASES = {"--output_dir": "--out", "--output-dir": "--out"}


def parse(argv: list[str]):
    """(RLScriptArguments, DAPOConfig) from the command line (`--output_dir` read as `--out`)."""
    from anchorft.rpsft.dapo_config import parse_rl_argv  # lazy: TRL (seconds)

    return parse_rl_argv(normalize_train_argv(argv, _OUT_ALIASES))


RL_COMMON = ("learning_rate", "lr_scheduler_type", "per_device_train_batch_size", "bf16", "seed", "logging_steps")


def short_help() -> str:
    """`anchorft rl --help`: the script's flags, DAPOConfig's own fields, the usual TRL ones; `--help-all` for the
    rest (the same layout as `anchorft train --help`)."""
    lines = [
        "usage: anchorft rl --model DIR --dataset DATA.jsonl --out DIR [--config RL.yaml] [--field value ...]",
        "       anchorft rl --estimate --model DIR [--config configs/rl/dapo.yaml]",
        "",
        "Fields are accepted as --snake_case or --kebab-case; a YAML --config sets the same fields.",
        "",
        "run, data and model:",
        "  --config FILE\n      YAML with any field below (configs/rl/dapo.yaml: the release's scale)",
    ]
    anchor_last = lambda f: f.name in anchor_option_names()  # noqa: E731
    title = "DAPO and anchor (DAPOConfig):"
    read = [source_fields("anchorft.rpsft.dapo_config", n) for n in ("RLScriptArguments", "DAPOConfig")]
    sections = source_sections(title, read[1], "GRPOConfig", anchor_last, RL_COMMON) if all(read) else None
    if sections is not None:  # from the configs' source and the shipped TRL table: TRL is not imported
        return "\n".join([*lines, *(field_help(as_field(f), default=False) for f in read[0].values()), *sections])
    from trl import GRPOConfig  # lazy: loads TRL

    from anchorft.rpsft.dapo_config import DAPOConfig, RLScriptArguments  # lazy: loads torch

    lines += [field_help(f, default=False) for f in fields(RLScriptArguments)]
    lines += trl_sections(title, DAPOConfig, GRPOConfig, anchor_last, RL_COMMON)
    return "\n".join(lines)


def _check_inputs(given: dict) -> None:
    """The script's arguments (the flags and the --config's) checked as below, before TRL loads: the three a run
    needs, the data file, the model, the output folder."""
    estimate = given.get("estimate") not in (None, False, "false", "False")
    if given.get("model") is None or (not estimate and (given.get("dataset") is None or given.get("out") is None)):
        raise UsageError("--model, --dataset and --out are required (unless --estimate)")
    if estimate:
        return
    check_input_file(given["dataset"], "--dataset", jsonl=given.get("skip_bad") in (None, False, "false", "False"))
    check_model_source(given["model"], "--model")
    check_output_dir(given["out"])


def main(argv: list[str]) -> int:
    argv = short_or_all_help(list(argv), short_help)
    if argv is None:
        return 0
    # a user error here and below (a bad YAML, key or value: DAPOConfig checks every field on construction): one
    # line, by anchorft.cli
    if "--help" not in argv:  # --help-all: TrlParser's own help
        given = prechecks.check_rl_argv(normalize_train_argv(argv, _OUT_ALIASES))  # what needs no model, before TRL
        if given is not None:  # None: the flags are left to TrlParser
            _check_inputs(given)
    script, config = parse(argv)
    if script.model is None or (not script.estimate and (script.dataset is None or script.out is None)):
        raise UsageError("--model, --dataset and --out are required (unless --estimate)")
    from anchorft.rpsft.rl import load_rl_dataset, run_rl  # lazy: loads torch

    if script.estimate:
        print("\n".join(rl_memory_lines(script.model, config)))
        return 0
    from anchorft.rpsft.train import check_launch  # lazy: loads torch

    check_launch(config, config.anchor_spec is not None, f"--anchor_method {config.anchor_method}")
    check_input_file(script.dataset, "--dataset", jsonl=not script.skip_bad)
    check_model_source(script.model, "--model")
    run = {"model": script.model, "dataset": script.dataset, "limit": script.limit}
    # every field that can change the result (the anchor's, TRL's sampling and loss ones), not only the summary
    run["settings"] = {k: v for k, v in config.to_dict().items() if k not in NOT_HASHED}

    def run_in(claim) -> dict:
        if int(os.environ.get("RANK", "0")) == 0:  # before loading, which takes minutes for a large model
            print(f"anchorft rl: {config.anchor_method} anchor, {script.model} on {script.dataset} -> "
                  f"{script.out}", flush=True)  # fmt: skip
        data = load_rl_dataset(script.dataset, skip_bad=script.skip_bad, limit=script.limit)
        return run_rl(script.model, data, script.out, config)

    metrics = run_claimed(script.out, "rl", run, run_in, overwrite=script.overwrite)
    if metrics is None:
        return 0
    print(json.dumps({k: metrics[k] for k in ("reward_first", "reward_last")} | {"out": script.out}))
    return 0
