"""Loading the model a run trains (`anchorft train`, `train()`, `RPSFTTrainer` given a path): the recipe's init kwargs,
trust_remote_code only when asked, float32 without a GPU, strict weights (`anchorft.eval.loading`)."""

from __future__ import annotations

import os

import torch
from transformers import PreTrainedModel

from anchorft.eval.loading import from_pretrained_strict

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


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_model_folder(spec: str | os.PathLike, field: str = "model") -> None:
    """One-line ValueError for a local model folder that holds no weights (checked before anything is loaded).

    A hub name (no such local folder) is left to `from_pretrained`."""
    path = os.fspath(spec)
    if not os.path.isdir(path):
        return
    names = set(os.listdir(path))
    if not names & set(WEIGHT_FILES) and not any(n.endswith(".safetensors") for n in names):
        has = "config.json only" if "config.json" in names else f"{len(names)} file(s), no config.json"
        raise ValueError(
            f"{field}: {path} holds no weights ({has}; expected one of {list(WEIGHT_FILES)}); "
            "pass the folder a model was saved to, or a hub name"
        )
