"""Rotation-preserving SFT (Jin et al., arXiv:2605.10973) for transformers and TRL.

Public API: `SubspaceAnchor`, `RPSFTConfig` and `RPSFTTrainer` (they run every fine-tuning method
of the methods table, `anchorft.rpsft.methods`, not only RPSFT), the losses of
`anchorft.rpsft.losses`, and the modules `anchorft.rpsft.train` (`train.train(args, model,
train_dataset, ...)`) and `anchorft.rpsft.estimate` (`estimate.estimate(config, rank, ...)`).
The anchor's maths lives one floor down, in `anchorft.subspace`.
"""

from __future__ import annotations

from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters
from anchorft.rpsft.config import RPSFTConfig
from anchorft.rpsft.losses import dft_loss, iw_sft_loss, iw_sft_weights, nll_loss
from anchorft.rpsft.trainer import RPSFTTrainer

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
