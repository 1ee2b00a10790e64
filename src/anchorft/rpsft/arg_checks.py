"""Checks of the trainer arguments `RPSFTConfig` and `DAPOConfig` share, made when the config is built: before any
model is loaded, a bad value is one line naming the field (torch's own error would come after the load, without
the flag's name)."""

from __future__ import annotations

import importlib.util
import math

__all__ = ["check_trainer_args", "REPORT_TO_MODULES"]

# report_to integrations -> the module transformers needs for them (and what to install)
REPORT_TO_MODULES = {
    "tensorboard": ("tensorboard", "pip install 'anchorft[tensorboard]' (or tensorboard)"),
    "wandb": ("wandb", "pip install wandb"),
    "mlflow": ("mlflow", "pip install mlflow"),
    "comet_ml": ("comet_ml", "pip install comet_ml"),
    "trackio": ("trackio", "pip install trackio"),
}


def check_trainer_args(args) -> None:
    """learning_rate finite and > 0; max_steps -1 (epochs) or >= 1; every `report_to` integration importable."""
    lr = args.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"learning_rate must be a finite number > 0, got {lr!r}")
    if args.max_steps == 0 or args.max_steps < -1:
        raise ValueError(f"max_steps must be >= 1 (or -1: num_train_epochs decides), got {args.max_steps!r}")
    report = args.report_to
    names = [report] if isinstance(report, str) else list(report or [])
    for name in names:
        if name in REPORT_TO_MODULES:
            module, how = REPORT_TO_MODULES[name]
            if importlib.util.find_spec(module) is None:
                raise ValueError(f"report_to={name!r}: {module} is not installed; {how}, or --report_to none")
