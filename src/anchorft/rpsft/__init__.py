"""Rotation-preserving SFT (Jin et al., arXiv:2605.10973) for transformers and TRL.

Public API (imported lazily, so that `anchorft.rpsft.subspace` stays light for the w2s simulator):
`SubspaceAnchor`, `RPSFTConfig`, `RPSFTTrainer`, the losses of `anchorft.rpsft.losses`, and the
modules `anchorft.rpsft.train` (`train.train(args, model, train_dataset, ...)`) and
`anchorft.rpsft.estimate` (`estimate.estimate(config, rank, ...)`).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "SubspaceAnchor": "anchorft.rpsft.anchor",
    "select_parameters": "anchorft.rpsft.anchor",
    "RPSFTConfig": "anchorft.rpsft.config",
    "RPSFTTrainer": "anchorft.rpsft.trainer",
    "nll_loss": "anchorft.rpsft.losses",
    "dft_loss": "anchorft.rpsft.losses",
    "iw_sft_loss": "anchorft.rpsft.losses",
    "iw_sft_weights": "anchorft.rpsft.losses",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        return getattr(module, name)
    raise AttributeError(f"module 'anchorft.rpsft' has no attribute {name!r}")
