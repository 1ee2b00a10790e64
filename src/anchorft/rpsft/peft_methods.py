"""What every PEFT method of the methods table (`Method.peft`) shares: the modules an adapter targets, the
adapter's tensors gathered from any engine, merged into a plain model and saved. Each method's own part (its PEFT
config, the update it adds to a weight, what it cannot run with) is a small module of `anchorft.rpsft.adapters`:
LoRA (`adapters/lora.py`) and PEFT's orthogonal subspace fine-tuning (`adapters/osf.py`).

The trainer wraps the model with `peft_config_for(args)` (TRL's SFTTrainer calls `get_peft_model`). Once training
ends, `anchorft.rpsft.train.train` gathers the adapter's tensors whole from every engine (`gather_adapter`: the
factors, and OSF's frozen SVD parts) and merges them into the base weights on one process (`merge_adapter`, with
each method's `Adapter.delta`), so that what is saved and evaluated is a plain `save_pretrained` model of the base's
architecture. The merge never runs inside the engine: under ZeRO-3 partitions or FSDP2 shards PEFT's in-place
`merge_and_unload` is not reliable, and the engine's own state dict of a PEFT model is keyed `base_model.model.*` (a
model folder written from it loads as random weights).
"""

from __future__ import annotations

import os
import re

import torch
from safetensors.torch import save_file
from torch import nn

from anchorft.errors import MissingExtra
from anchorft.io import atomic_path, write_json
from anchorft.rpsft.adapters import ADAPTERS, get_adapter, tuner_layers
from anchorft.rpsft.anchor_plan import linear_types
from anchorft.rpsft.sharding import full_matrix, unwrap

__all__ = [
    "RELEASE_TARGETS",
    "peft_config_for",
    "target_modules",
    "merge_adapter_model",
    "is_peft_model",
    "gather_adapter",
    "merge_adapter",
    "save_adapter",
    "tuner_layers",
    "ADAPTER_DIR",
]

ADAPTER_DIR = "adapter"  # checkpoint-N/adapter/: the adapter's tensors, gathered whole (`save_adapter`)
# lora_target_modules value for the release's set as far as TRL can train it: the release's train.py
# (find_target_linear_names, nothing excluded for a text model) adapts every nn.Linear and nn.Embedding, lm_head
# included; TRL's SFTTrainer computes the log-probabilities from lm_head.weight directly and refuses an adapter
# there, so this set is every nn.Linear and nn.Embedding but the output layer (embed_tokens included)
RELEASE_TARGETS = "all-linear-embedding"


def target_modules(args, model: nn.Module | None = None) -> str | list[str]:
    """PEFT's target_modules for `args.lora_target_modules`: 'all-linear' and a regex pass through; RELEASE_TARGETS
    becomes the names of every linear layer (nn.Linear, GPT-2's Conv1D) and nn.Embedding of `model` but its output
    layer.

    A module whose weight is tied to another's (lm_head and embed_tokens under tie_word_embeddings) is refused in one
    line: its update merged into the shared tensor would change the other module too, so the saved model would
    compute something other than the trained one."""
    value = args.lora_target_modules
    if value == "all-linear" or model is None:
        if value == RELEASE_TARGETS:
            raise ValueError(f"lora_target_modules={RELEASE_TARGETS!r}: needs the model to list its modules")
        return value
    if value == RELEASE_TARGETS:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        kinds = (*linear_types(), nn.Embedding)
        names = [n for n, m in model.named_modules() if isinstance(m, kinds) and m is not head]
    else:
        names = [n for n, _ in model.named_modules() if n and re.fullmatch(value, n)]
    tied = _tied_modules(model)
    if bad := [n for n in names if n in tied]:
        raise ValueError(
            f"lora_target_modules={value!r}: {bad[0]} shares its weight with {tied[bad[0]]} (tie_word_embeddings), "
            "so its merged update would change both; exclude it (a regex) or untie the embeddings first"
        )
    return names if value == RELEASE_TARGETS else value


def _tied_modules(model: nn.Module) -> dict[str, str]:
    """{module name: the other module's name} for modules whose `weight` is the same tensor."""
    seen: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if not isinstance(w, torch.Tensor):
            continue
        if id(w) in seen:
            tied[name], tied[seen[id(w)]] = seen[id(w)], name
        else:
            seen[id(w)] = name
    return tied


def _targeted(model: nn.Module | None, targets: str | list[str]) -> list[tuple[str, nn.Module]]:
    """(name, module) of the linear (nn.Linear, Conv1D) and nn.Embedding layers `targets` selects as PEFT does
    ('all-linear': every linear layer but the output layer; a list: the names; a string: a regex matched against
    whole names)."""
    if model is None:
        return []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linear = linear_types()
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (*linear, nn.Embedding))]
    if targets == "all-linear":
        return [(n, m) for n, m in layers if isinstance(m, linear) and m is not head]
    if isinstance(targets, str):
        return [(n, m) for n, m in layers if re.fullmatch(targets, n)]
    return [(n, m) for n, m in layers if n in set(targets)]


def peft_config_for(args, model: nn.Module | None = None):
    """The PEFT config of `args.method` (a `RPSFTConfig`), built by its adapter (`anchorft.rpsft.adapters`); None
    for a method without an adapter. `model` (the model to adapt) resolves RELEASE_TARGETS and checks tied weights."""
    kind = args.method_spec.peft
    if kind is None:
        return None
    try:
        import peft  # noqa: F401
    except ImportError as e:  # pragma: no cover - the dev and peft extras install it
        raise MissingExtra(f"method {args.method!r} needs peft: pip install 'anchorft[peft]'") from e
    targets = target_modules(args, model)
    return get_adapter(kind).config(args, targets, _targeted(model, targets))


def is_peft_model(model: nn.Module) -> bool:
    try:
        from peft import PeftModel  # lazy: loads transformers
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, PeftModel)


def merge_adapter_model(model: nn.Module) -> nn.Module:
    """The plain model with the active adapters merged into its weights (`merge_and_unload`); `model` itself when
    it holds no adapter."""
    if not is_peft_model(model):
        return model
    return model.merge_and_unload()


def gather_adapter(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor of the adapters (LoRA's A and B; OSF's trainable U, S, V and its frozen initial and top parts),
    whole, detached and on the CPU, keyed as in the PEFT model's state dict.

    Under ZeRO-3 each parameter is gathered, under FSDP2 each DTensor made whole (`full_matrix`): a collective, so
    every rank calls it (the ranks walk the same modules in the same order) and every rank gets the result. The
    adapter is small (LoRA: r (m + n) numbers per matrix), so this costs little even for a large model."""
    out: dict[str, torch.Tensor] = {}
    for name, layer in tuner_layers(model):
        for attr in (*layer.adapter_layer_names, *layer.other_param_names):
            holder = getattr(layer, attr, None)
            if not isinstance(holder, nn.Module):  # ranks, scalings, dropout: not tensors
                continue
            for sub, t in [*holder.named_parameters(), *holder.named_buffers()]:
                out[f"{name}.{attr}.{sub}"] = full_matrix(t).detach().to("cpu", copy=True)
    return out


def _update(layer: nn.Module, name: str, adapter: str, state: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """Delta of one adapter on one layer (float32, the base weight's layout), from `state`, by the registered method
    that owns the layer (`Adapter.delta`); None when the layer holds no such adapter. A layer of another PEFT method
    is refused: its update is not written out here."""
    for method in ADAPTERS.values():
        if method.owns(layer):
            return method.delta(layer, name, adapter, state)
    raise ValueError(f"{name}: a {type(layer).__name__} adapter is not merged here (registered: {sorted(ADAPTERS)})")


def merge_adapter(
    base: nn.Module,
    peft_model: nn.Module | None,
    state: dict[str, torch.Tensor],
    layers: list[tuple[str, nn.Module]] | None = None,
) -> nn.Module:
    """`base` (a plain model holding the starting weights) with each adapted weight W_0 + Delta, Delta computed from
    `state` (`gather_adapter`) by the layer's method (`Adapter.delta`); `peft_model` (the trained PEFT model, in any
    engine), or its `layers` (`tuner_layers`, taken before an `unload`), supplies only what is not a tensor: which
    layers are adapted, the active adapters, LoRA's scaling. In place on `base`, on one process; returns it."""
    prefix = "base_model.model."
    weights = dict(base.named_parameters())
    layers = tuner_layers(peft_model) if layers is None else layers
    if not layers:
        raise ValueError("merge_adapter: the model holds no PEFT adapter")
    with torch.no_grad():
        for name, layer in layers:
            path = name[len(prefix) :] if name.startswith(prefix) else name
            key = f"{path}.weight"
            if key not in weights:
                raise ValueError(f"merge_adapter: the base model has no weight {key!r} (adapted layer {name})")
            deltas = [d for a in layer.active_adapters if (d := _update(layer, name, a, state)) is not None]
            if deltas:
                w = weights[key]
                w.add_(torch.stack(deltas).sum(0).to(w.device, w.dtype))
    return base


def save_adapter(folder: str, peft_model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Write the gathered adapter (`gather_adapter`) to `folder`: adapter_state.safetensors (keyed as in the PEFT
    model's state dict, OSF's frozen parts included, which PEFT's own adapter file leaves out) and the PEFT config
    (adapter_config.json). A checkpoint keeps it beside the engine's files, whose layout depends on the engine."""
    with atomic_path(os.path.join(folder, "adapter_state.safetensors")) as tmp:
        save_file({k: v.contiguous() for k, v in state.items()}, tmp)
    configs = {name: cfg.to_dict() for name, cfg in unwrap(peft_model).peft_config.items()}
    write_json(os.path.join(folder, "adapter_config.json"), configs, default=str)
