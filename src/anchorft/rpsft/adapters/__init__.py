"""The PEFT methods a row of the methods table names by `peft`, one small module each (`lora`, `osf`), registered
here by name as PEFT registers its tuners.

A method's module builds an `Adapter`: its PEFT config from the run's settings, the update it adds to each adapted
weight (written from the gathered tensors alone: `anchorft.rpsft.peft_methods.merge_adapter` merges it on one
process, whatever the engine), and what it cannot run with. Everything about adapters that no method changes
(target modules, gathering, merging, saving) stays in `anchorft.rpsft.peft_methods`. Adding a third method: its
module here (an `Adapter`, registered, and its import at the end of this file), its row in the methods table
(`anchorft.rpsft.methods`), its recipe YAML, its test (docs/architecture.md, "How to add").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anchorft.rpsft.sharding import unwrap

__all__ = ["Adapter", "ADAPTERS", "register", "get_adapter", "tuner_layers"]


@dataclass(frozen=True)
class Adapter:
    """One PEFT method.

    - `config(args, targets, layers)`: its PEFT config for a `RPSFTConfig`, `targets` as PEFT's target_modules and
      `layers` the (name, module) pairs they select (empty without a model), for checks;
    - `owns(layer)`: whether a PEFT tuner layer is this method's; `delta(layer, name, adapter, state)`: the update
      Delta (float32, the base weight's layout) this adapter adds to that layer's weight, from `state` (the gathered
      tensors, keyed as in the PEFT model's state dict), or None when the layer holds no such adapter;
    - `refuse(args)`: a one-line reason when a setting cannot be honoured (None: fine);
    - `zero3`: None when it runs under DeepSpeed ZeRO-3, else why not (one line);
    - `project_grads(model)`: work PEFT's own parameter hooks do, to redo on the reduced gradients under FSDP2,
      whose `fully_shard` replaces the parameters the hooks were registered on (None: nothing);
    - `prepare(model)`: work on the PEFT model once it is built, before any engine wraps or casts it (None:
      nothing)."""

    name: str
    config: Callable[..., Any]
    owns: Callable[[Any], bool]
    delta: Callable[..., Any]
    refuse: Callable[[Any], str | None] = lambda args: None
    zero3: str | None = None
    project_grads: Callable[[Any], None] | None = None
    prepare: Callable[[Any], None] | None = None


ADAPTERS: dict[str, Adapter] = {}


def register(adapter: Adapter) -> Adapter:
    """Add `adapter` to the registry under its name (a method's module calls it once, at import)."""
    ADAPTERS[adapter.name] = adapter
    return adapter


def get_adapter(name: str) -> Adapter:
    """The registered adapter `name`; ValueError listing the registered ones."""
    if name not in ADAPTERS:
        raise ValueError(f"unknown PEFT method {name!r}; registered: {sorted(ADAPTERS)}")
    return ADAPTERS[name]


def tuner_layers(model) -> list[tuple[str, Any]]:
    """(name, layer) of every PEFT tuner layer, named as in the PEFT model's state dict (`base_model.model.*`)."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # lazy: the peft extra

    return [(n, m) for n, m in unwrap(model).named_modules() if isinstance(m, BaseTunerLayer)]


from anchorft.rpsft.adapters import lora, osf  # noqa: E402, F401  (each registers itself)
