"""Loading the model a run trains (`anchorft train`, `train()`, `RPSFTTrainer` given a path): the recipe's init kwargs,
trust_remote_code only when asked, float32 without a GPU, strict weights (`anchorft.eval.loading`)."""

from __future__ import annotations

import os

import torch
from transformers import PreTrainedModel

from anchorft.eval.loading import from_pretrained_strict
from anchorft.preflight import WEIGHT_FILES, check_model_folder  # here before; light, so checked before torch loads

__all__ = ["load_model", "check_model_folder", "WEIGHT_FILES"]


def load_model(spec: str | PreTrainedModel, args, field: str = "model") -> PreTrainedModel:
    """A causal LM from a local path or hub name (trust_remote_code only if `args.trust_remote_code`)."""
    if isinstance(spec, PreTrainedModel):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"{field} must be a PreTrainedModel, a local path or a hub name, got {type(spec).__name__}")
    check_model_folder(spec, field)
    kwargs = dict(args.model_init_kwargs or {})
    kwargs["trust_remote_code"] = bool(args.trust_remote_code)
    if not torch.cuda.is_available():
        kwargs["dtype"] = torch.float32
    return from_pretrained_strict(spec, **kwargs)  # missing or unexpected weights: a one-line ValueError
