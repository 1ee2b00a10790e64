"""Checks of the trainer arguments `RPSFTConfig` and `DAPOConfig` share, made when the config is built: before any
model is loaded, a bad value is one line naming the field (torch's own error would come after the load, without
the flag's name)."""

from __future__ import annotations

import importlib.util
import math

from anchorft.errors import close_hint

__all__ = ["check_trainer_args", "check_rpsft_numbers", "REPORT_TO_MODULES", "REPORT_TO_NAMES"]

# the names transformers accepts in report_to (transformers.integrations.integration_utils.INTEGRATION_TO_CALLBACK's
# keys, plus "all" and "none"), written here because reading them loads transformers (seconds);
# tests/rpsft/test_arg_checks.py compares them with the installed transformers
REPORT_TO_NAMES = ("all", "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "kubeflow",
                   "mlflow", "neptune", "none", "swanlab", "tensorboard", "trackio", "wandb")  # fmt: skip

# report_to integrations -> the module transformers needs for them (and what to install)
REPORT_TO_MODULES = {
    "tensorboard": ("tensorboard", "pip install 'anchorft[tensorboard]' (or tensorboard)"),
    "wandb": ("wandb", "pip install wandb"),
    "mlflow": ("mlflow", "pip install mlflow"),
    "comet_ml": ("comet_ml", "pip install comet_ml"),
    "trackio": ("trackio", "pip install trackio"),
}


def check_trainer_args(args) -> None:
    """learning_rate finite and > 0; max_steps -1 (epochs) or >= 1; every `report_to` name one transformers knows
    (did-you-mean otherwise) and its integration importable."""
    lr = args.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"learning_rate must be a finite number > 0, got {lr!r}")
    if args.max_steps == 0 or args.max_steps < -1:
        raise ValueError(f"max_steps must be >= 1 (or -1: num_train_epochs decides), got {args.max_steps!r}")
    report = args.report_to
    names = [report] if isinstance(report, str) else list(report or [])
    for name in names:
        if name not in REPORT_TO_NAMES:
            hint = close_hint(name, REPORT_TO_NAMES) or f" (one of {', '.join(REPORT_TO_NAMES)})"
            raise ValueError(f"report_to={name!r}: not an integration transformers knows{hint}")
        if name in REPORT_TO_MODULES:
            module, how = REPORT_TO_MODULES[name]
            if importlib.util.find_spec(module) is None:
                raise ValueError(f"report_to={name!r}: {module} is not installed; {how}, or --report_to none")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_rpsft_numbers(args) -> None:
    """RPSFTConfig's own numbers (any object with these attributes): anchor_every and lora_rank integers >= 1,
    lora_alpha > 0, lora_dropout in [0, 1). No torch: also checked before it loads (`prechecks.check_values`)."""
    if not _is_int(args.anchor_every) or args.anchor_every < 1:
        raise ValueError(f"anchor_every must be an integer >= 1, got {args.anchor_every!r}")
    if not _is_int(args.lora_rank) or args.lora_rank < 1:
        raise ValueError(f"lora_rank must be an integer >= 1, got {args.lora_rank!r}")
    if isinstance(args.lora_alpha, bool) or not isinstance(args.lora_alpha, (int, float)) or not args.lora_alpha > 0:
        raise ValueError(f"lora_alpha must be > 0, got {args.lora_alpha!r}")
    dropout = args.lora_dropout
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"lora_dropout must be in [0, 1), got {dropout!r}")
