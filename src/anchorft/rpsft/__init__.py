"""Rotation-preserving SFT (Jin et al., arXiv:2605.10973) for transformers and TRL.

Public API: `SubspaceAnchor`, `RPSFTConfig` and `RPSFTTrainer` (they run every fine-tuning method
of the methods table, `anchorft.rpsft.methods`, not only RPSFT), the losses of
`anchorft.rpsft.losses`, and the modules `anchorft.rpsft.train` (`train.train(args, model,
train_dataset, ...)`) and `anchorft.rpsft.estimate` (`estimate.estimate(config, rank, ...)`).
The anchor's maths lives one floor down, in `anchorft.subspace`.

The names are imported on first use (PEP 562), and so are submodules reached as attributes: the light modules
here (`recipes`, `arg_checks`) serve the command line's checks before torch and TRL are imported
(`anchorft.rpsft.prechecks`), and importing this package must not load them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters
    from anchorft.rpsft.config import RPSFTConfig
    from anchorft.rpsft.losses import dft_loss, iw_sft_loss, iw_sft_weights, nll_loss
    from anchorft.rpsft.trainer import RPSFTTrainer

_EXPORTS = {
    "SubspaceAnchor": "anchorft.rpsft.anchor",
    "select_parameters": "anchorft.rpsft.anchor",
    "RPSFTConfig": "anchorft.rpsft.config",
    "RPSFTTrainer": "anchorft.rpsft.trainer",
    "dft_loss": "anchorft.rpsft.losses",
    "iw_sft_loss": "anchorft.rpsft.losses",
    "iw_sft_weights": "anchorft.rpsft.losses",
    "nll_loss": "anchorft.rpsft.losses",
}

__all__ = [
    "RPSFTConfig",
    "RPSFTTrainer",
    "SubspaceAnchor",
    "dft_loss",
    "iw_sft_loss",
    "iw_sft_weights",
    "nll_loss",
    "select_parameters",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
