"""Weight access for the analyses: one matrix at a time, from safetensors or from memory.

A checkpoint directory holds `config.json` and either `model.safetensors` or a sharded set indexed by
`model.safetensors.index.json` (the layout `save_pretrained` writes). `SafetensorsWeights` reads the
headers only (names, shapes) when it opens, and `get(name)` reads that one tensor with
`safetensors.safe_open`, so an analysis that asks for one matrix at a time holds one matrix (per
checkpoint) in memory, not the model. `InMemoryWeights` gives the same interface over tensors already
loaded (a `state_dict` or a model's parameters); both paths must give identical numbers (tested).

Names and grouping: `matrix_type` maps a parameter name to q/k/v/o/gate/up/down/embed/lm_head (the last
module name otherwise) and `layer_index` extracts the decoder layer number (None for embed/lm_head).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import torch
from safetensors import safe_open

# layer_index is re-exported (the analysis groups by it); _EXCLUDED: the modules the anchor never covers
from anchorft.rpsft.anchor_plan import _EXCLUDED, layer_index

__all__ = [
    "WeightSource",
    "SafetensorsWeights",
    "InMemoryWeights",
    "CheckpointError",
    "open_checkpoint",
    "read_config",
    "matrix_type",
    "layer_index",
    "analysed_matrices",
    "check_compatible",
    "ARCH_FIELDS",
]

TYPE_ORDER = ["q", "k", "v", "o", "gate", "up", "down", "embed", "lm_head"]
# module name -> type: q_proj -> q, ..., down_proj -> down; the embeddings (Llama's and GPT-2's) and the head
_TYPES = {f"{t}_proj": t for t in TYPE_ORDER[:7]} | {"embed_tokens": "embed", "wte": "embed", "lm_head": "lm_head"}
# Fields of config.json that define the architecture; a difference here is reported by name.
ARCH_FIELDS = (
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or incompatible with the base (the message names what)."""


class WeightSource(Protocol):
    def names(self) -> list[str]: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def get(self, name: str) -> torch.Tensor: ...


def matrix_type(name: str) -> str:
    """q/k/v/o/gate/up/down/embed/lm_head for the usual decoder names; otherwise the module's own name."""
    parts = name.split(".")
    for p in reversed(parts[:-1] if parts[-1] in ("weight", "bias") else parts):
        if p in _TYPES:
            return _TYPES[p]
    return parts[-2] if len(parts) >= 2 else parts[0]


def read_config(path: str | os.PathLike, role: str) -> dict:
    """config.json of a checkpoint directory; `role` (e.g. "base", "tuned 'sft'") names it in errors."""
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"{role} checkpoint not found: {d} is not a directory")
    cfg = d / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{role} checkpoint {d} has no config.json")
    return json.loads(cfg.read_text())


class SafetensorsWeights:
    """Streams tensors from `model.safetensors` or from the shards of `model.safetensors.index.json`."""

    def __init__(self, path: str | os.PathLike, role: str = "checkpoint") -> None:
        self.path = Path(path)
        single, index = self.path / "model.safetensors", self.path / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif single.is_file():
            files = ["model.safetensors"]
        else:
            raise CheckpointError(
                f"{role} checkpoint {self.path} has no model.safetensors or model.safetensors.index.json "
                "(pickled .bin checkpoints are not loaded)"
            )
        self._file: dict[str, Path] = {}
        self._shape: dict[str, tuple[int, ...]] = {}
        for fname in files:
            f_path = self.path / fname
            if not f_path.is_file():
                raise CheckpointError(f"{role} checkpoint {self.path}: shard {fname} named in the index is missing")
            with safe_open(str(f_path), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    self._file[key] = f_path
                    self._shape[key] = tuple(f.get_slice(key).get_shape())

    def names(self) -> list[str]:
        return list(self._file)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shape[name]

    def get(self, name: str) -> torch.Tensor:
        """Reads one tensor (a copy; the file is closed again, so nothing of it stays mapped)."""
        with safe_open(str(self._file[name]), framework="pt") as f:
            return f.get_tensor(name)


class InMemoryWeights:
    """The same interface over tensors already in memory (e.g. `dict(model.named_parameters())`)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._t = {k: v.detach() for k, v in tensors.items()}

    @classmethod
    def from_model(cls, model: torch.nn.Module) -> InMemoryWeights:
        """Parameters of a loaded model; tied weights appear once, as `save_pretrained` writes them."""
        return cls(dict(model.named_parameters()))

    def names(self) -> list[str]:
        return list(self._t)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._t[name].shape)

    def get(self, name: str) -> torch.Tensor:
        return self._t[name]


def open_checkpoint(path: str | os.PathLike, role: str = "checkpoint") -> tuple[dict, SafetensorsWeights]:
    """config.json and a streaming weight source of a checkpoint directory (clear error if missing)."""
    return read_config(path, role), SafetensorsWeights(path, role)


def analysed_matrices(source: WeightSource) -> list[str]:
    """Every 2-D weight, as the anchor selects them (vision, cross-attention, multi-modal projector ones left out)."""
    out = [name for name in source.names() if len(source.shape(name)) == 2 and not _EXCLUDED.search(name)]
    return sorted(out, key=_sort_key)


def _sort_key(name: str) -> tuple:
    li = layer_index(name)
    t = matrix_type(name)
    return (
        -1 if t == "embed" else (10**9 if li is None else li),
        TYPE_ORDER.index(t) if t in TYPE_ORDER else 99,
        name,
    )


def check_compatible(base_cfg: dict, base: WeightSource, other_cfg: dict, other: WeightSource, role: str) -> list[str]:
    """Raises CheckpointError naming the first config field, matrix or shape where `other` differs from base.

    Returns the list of matrices to analyse (those of the base)."""
    for field in ARCH_FIELDS:
        if base_cfg.get(field) != other_cfg.get(field):
            raise CheckpointError(
                f"{role} has a different architecture from base: config field {field!r} is "
                f"{other_cfg.get(field)!r} there and {base_cfg.get(field)!r} in base"
            )
    mats = analysed_matrices(base)
    other_names = set(other.names())
    for name in mats:
        if name not in other_names:
            raise CheckpointError(f"{role} has no weight {name!r}, which base has")
        if tuple(other.shape(name)) != tuple(base.shape(name)):
            raise CheckpointError(
                f"{role} weight {name!r} has shape {tuple(other.shape(name))}, base has {tuple(base.shape(name))}"
            )
    if extra := set(analysed_matrices(other)) - set(mats):
        raise CheckpointError(f"{role} has weights that base lacks, e.g. {sorted(extra)[0]!r}")
    return mats
