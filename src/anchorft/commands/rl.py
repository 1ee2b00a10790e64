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
from dataclasses import dataclass, field, fields
from pathlib import Path

from anchorft.commands.flags import normalize_train_argv, short_or_all_help, trl_sections
from anchorft.dataclass_flags import field_help
from anchorft.dataclass_yaml import resolve_presets
from anchorft.errors import UsageError, check_keys, check_mapping_types
from anchorft.preflight import check_input_file, check_model_source
from anchorft.resources import config_path
from anchorft.rpsft.anchor_options import anchor_option_names
from anchorft.rpsft.estimate import format_memory_estimate, rl_memory_estimate
from anchorft.rpsft.prechecks import as_number, check_values, given_flags, pop_config, shadow_dataclass, source_fields
from anchorft.rpsft.recipes import NOT_HASHED, parse_with_config
from anchorft.runs import run_claimed


@dataclass
class RLScriptArguments:
    """The model, data and output of `anchorft rl` (parsed by TrlParser beside `DAPOConfig`)."""

    model: str | None = field(default=None, metadata={"help": "Local SFT checkpoint directory."})
    dataset: str | None = field(
        default=None, metadata={"help": "JSONL prompts with gold answers (required unless --estimate)."}
    )
    out: str | None = field(default=None, metadata={"help": "Output directory (required unless --estimate)."})
    limit: int | None = field(default=None, metadata={"help": "Use the first N prompts."})
    skip_bad: bool = field(default=False, metadata={"help": "Skip and count malformed dataset lines."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an output folder that holds another run."})
    estimate: bool = field(
        default=False,
        metadata={
            "help": "Print the memory estimate for --model (parameters counted from config.json, no weights "
            "loaded) on 1 and 8 GPUs, and exit."
        },
    )


def _estimate(model_dir: str, config) -> list[str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (Path(model_dir) / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there")
    cfg = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    colocate = config.vllm_requested != "false"  # the GPU node's choice, not this machine's
    return [format_memory_estimate(rl_memory_estimate(n, g, config.master_dtype, colocate)) for g in (1, 8)]


def _parser():
    """TrlParser over (RLScriptArguments, DAPOConfig): every field a flag, as --snake_case or --kebab-case."""
    from trl import TrlParser

    from anchorft.rpsft.dapo_config import DAPOConfig

    return TrlParser((RLScriptArguments, DAPOConfig), prog="anchorft rl")


# --output_dir (TrainingArguments' name, which `anchorft train` takes) is this command's --out
_OUT_ALIASES = {"--output_dir": "--out", "--output-dir": "--out"}


def parse(argv: list[str]):
    """(RLScriptArguments, DAPOConfig) from argv: TrlParser, with `--config` YAML read, its keys and value types
    checked (one-line errors naming the file), then set as the parser's defaults."""

    return parse_with_config(_parser(), normalize_train_argv(argv, _OUT_ALIASES), _load_config)


def read_config(path: str, dapo: type) -> tuple[str, dict]:
    """(file, mapping) of the `--config` YAML (`preset:` parents merged), its keys checked against
    RLScriptArguments and `dapo` (DAPOConfig, or a stand-in with its field names read before TRL is imported)."""

    path = str(config_path(path))  # a file, else a shipped config by name (rl/dapo)
    cfg = resolve_presets(path)
    script_keys = {f.name for f in fields(RLScriptArguments)}
    check_keys({k: v for k, v in cfg.items() if k not in script_keys}, dapo, path)
    return path, cfg


def _load_config(path: str) -> dict:
    """The `--config` YAML (`preset:` parents merged), its keys and value types checked against the dataclasses."""
    from anchorft.rpsft.dapo_config import DAPOConfig

    path, cfg = read_config(path, DAPOConfig)
    check_mapping_types(cfg, RLScriptArguments, path)
    check_mapping_types(cfg, DAPOConfig, path)
    return cfg


def precheck(argv: list[str]) -> None:
    """The command line (--out spellings applied) checked before TRL is imported (`anchorft.rpsft.prechecks`):
    the --config file found, read and its keys known; the flags known; learning_rate, max_steps and report_to
    valid. ValueError: the message TrlParser and DAPOConfig give."""

    argv, config = pop_config(list(argv))
    script = source_fields(__name__, "RLScriptArguments")
    dapo = source_fields("anchorft.rpsft.dapo_config", "DAPOConfig")
    values: dict = {}
    if config is not None and dapo is not None:
        values.update(read_config(config, shadow_dataclass("DAPOConfig", list(dapo.values())))[1])
    elif config is not None:
        config_path(config)
    if script is not None and dapo is not None:
        values.update(given_flags(argv, [*script.values(), *dapo.values()], "anchorft rl") or {})
    lr = as_number(values.get("learning_rate"), float)
    if lr is not None and lr <= 0:  # DAPOConfig checks the sign before the trainer arguments, in these words
        raise ValueError("need beta >= 0, learning_rate > 0, temperature > 0")
    check_values(values)


RL_COMMON = ("learning_rate", "lr_scheduler_type", "per_device_train_batch_size", "bf16", "seed", "logging_steps")


def short_help() -> str:
    """`anchorft rl --help`: the script's flags, DAPOConfig's own fields, the usual TRL ones; `--help-all` for the
    rest (the same layout as `anchorft train --help`)."""
    from trl import GRPOConfig

    from anchorft.rpsft.dapo_config import DAPOConfig

    lines = [
        "usage: anchorft rl --model DIR --dataset DATA.jsonl --out DIR [--config RL.yaml] [--field value ...]",
        "       anchorft rl --estimate --model DIR [--config configs/rl/dapo.yaml]",
        "",
        "Fields are accepted as --snake_case or --kebab-case; a YAML --config sets the same fields.",
        "",
        "run, data and model:",
        "  --config FILE\n      YAML with any field below (configs/rl/dapo.yaml: the release's scale)",
    ]
    lines += [field_help(f, default=False) for f in fields(RLScriptArguments)]
    anchor_last = lambda f: f.name in anchor_option_names()  # noqa: E731
    lines += trl_sections("DAPO and anchor (DAPOConfig):", DAPOConfig, GRPOConfig, anchor_last, RL_COMMON)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    argv = short_or_all_help(list(argv), short_help)
    if argv is None:
        return 0
    # a user error here and below (a bad YAML, key or value: DAPOConfig checks every field on construction): one
    # line, by anchorft.cli
    if "--help" not in argv:  # --help-all: TrlParser's own help
        precheck(normalize_train_argv(argv, _OUT_ALIASES))  # what needs no model, before TRL is imported
    script, config = parse(argv)
    if script.model is None or (not script.estimate and (script.dataset is None or script.out is None)):
        raise UsageError("--model, --dataset and --out are required (unless --estimate)")
    from anchorft.rpsft.rl import load_rl_dataset, run_rl

    if script.estimate:
        print("\n".join(_estimate(script.model, config)))
        return 0
    from anchorft.rpsft.train import check_launch

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
