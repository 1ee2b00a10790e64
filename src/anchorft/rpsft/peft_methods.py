"""The PEFT methods of the methods table (`Method.peft`): LoRA and PEFT's orthogonal subspace fine-tuning (OSF).

- lora (Hu et al. 2021): W = W_0 + (alpha / r) B A on the adapted modules, A (r x n) random, B (m x r) zero at
  the start; only A and B train. The release's LoRA baseline: r = 32, alpha = 64, dropout 0.
- osf (PEFT's `OSFConfig`, orthogonal subspace fine-tuning): each adapted W_0 = U S V^T is split at
  `effective_rank`; the top singular directions are frozen, the rest (its own U_low S_low V_low) train with
  gradients projected orthogonal to the frozen subspaces. `effective_rank` is RPSFT's `anchor_rank`, so the two
  protect the same number of directions per matrix.

The trainer wraps the model with `peft_config_for(args)` (TRL's SFTTrainer calls `get_peft_model`). Once training
ends, `anchorft.rpsft.train.train` gathers the adapter's tensors whole from every engine (`gather_adapter`: the
factors, and OSF's frozen SVD parts) and merges them into the base weights on one process (`merge_adapter`), so
that what is saved and evaluated is a plain `save_pretrained` model of the base's architecture. The merge never
runs inside the engine: under ZeRO-3 partitions or FSDP2 shards PEFT's in-place `merge_and_unload` is not reliable,
and the engine's own state dict of a PEFT model is keyed `base_model.model.*` (a model folder written from it
loads as random weights). The update added to each adapted weight is written out here, from the tensors alone:

- lora: Delta = scaling B A (scaling = alpha / r, the value PEFT's layer uses in its forward), transposed for a
  `fan_in_fan_out` layer and for an embedding (whose weight is (vocabulary, hidden));
- osf: Delta = U_low diag(S_low) V_low - U_low,0 diag(S_low,0) V_low,0 (PEFT's `get_delta_weight`: the trained
  low part replaces the initial one; the frozen top part stays in W_0).

OSF under FSDP2. PEFT projects OSF's gradients by hooks on its U_low and V_low tensors, which `fully_shard`
replaces with new sharded parameters: the hooks no longer fire. `osf_project_grads_` applies the same projections
to the reduced gradients once per optimiser step (before clipping): the projections are linear and idempotent, so
projecting the accumulated, averaged gradient equals averaging the projected ones, and projecting twice changes
nothing.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from anchorft.rpsft.sharding import full_matrix, logical_shape, unwrap

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
    "osf_project_grads_",
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
    becomes the names of every nn.Linear and nn.Embedding of `model` but its output layer.

    A module whose weight is tied to another's (lm_head and embed_tokens under tie_word_embeddings) is refused in one
    line: its update merged into the shared tensor would change the other module too, so the saved model would
    compute something other than the trained one."""
    import re

    value = args.lora_target_modules
    if value == "all-linear" or model is None:
        if value == RELEASE_TARGETS:
            raise ValueError(f"lora_target_modules={RELEASE_TARGETS!r}: needs the model to list its modules")
        return value
    if value == RELEASE_TARGETS:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        names = [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding)) and m is not head]
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
    """(name, module) of the nn.Linear / nn.Embedding layers `targets` selects as PEFT does ('all-linear': every
    linear layer but the output layer; a list: the names; a string: a regex matched against whole names)."""
    import re

    if model is None:
        return []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))]
    if targets == "all-linear":
        return [(n, m) for n, m in layers if isinstance(m, nn.Linear) and m is not head]
    if isinstance(targets, str):
        return [(n, m) for n, m in layers if re.fullmatch(targets, n)]
    return [(n, m) for n, m in layers if n in set(targets)]


def _check_rank(rank: int, layers: list[tuple[str, nn.Module]], flag: str) -> None:
    """One line when `rank` exceeds the smaller side of every adapted matrix: no update B A can have that rank (a
    rank past some matrices only, as for GQA's k/v projections, is left to PEFT)."""
    if not layers:
        return
    largest = max(min(logical_shape(m.weight)) for _, m in layers)  # ZeRO-3 partitions: their whole shape
    if rank > largest:
        raise ValueError(
            f"{flag}={rank} exceeds the smaller side of every adapted matrix (at most {largest}): no update can have "
            f"that rank; use {flag} <= {largest}"
        )


def peft_config_for(args, model: nn.Module | None = None):
    """The PEFT config of `args.method` (a `RPSFTConfig`): a `LoraConfig` or an `OSFConfig`; None for a method
    without an adapter. `model` (the model to adapt) resolves RELEASE_TARGETS and checks tied weights."""
    kind = args.method_spec.peft
    if kind is None:
        return None
    try:
        from peft import LoraConfig, OSFConfig
    except ImportError as e:  # pragma: no cover - the dev and peft extras install it
        raise ImportError(f"method {args.method!r} needs peft: pip install 'anchorft[peft]'") from e
    targets = target_modules(args, model)
    if kind == "lora":
        _check_rank(args.lora_rank, _targeted(model, targets), "lora_rank")
        return LoraConfig(
            r=args.lora_rank,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=targets,
            bias="none",
            task_type="CAUSAL_LM",
        )
    return OSFConfig(effective_rank=args.anchor_rank, target_modules=targets, task_type="CAUSAL_LM")


def is_peft_model(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, PeftModel)


def merge_adapter_model(model: nn.Module) -> nn.Module:
    """The plain model with the active adapters merged into its weights (`merge_and_unload`); `model` itself when
    it holds no adapter."""
    if not is_peft_model(model):
        return model
    return model.merge_and_unload()


def tuner_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, layer) of every PEFT tuner layer, named as in the PEFT model's state dict (`base_model.model.*`)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [(n, m) for n, m in unwrap(model).named_modules() if isinstance(m, BaseTunerLayer)]


def osf_projection(layer: nn.Module, adapter: str, key: str, grad: torch.Tensor) -> torch.Tensor:
    """PEFT's OSF projection of the gradient of `key` ("U_low" (m x r) or "V_low" (r x n)), orthogonal to the
    frozen top subspace: G - U_hi U_hi^T G and G - G V_hi^T V_hi, written, where the factor is square, as
    U_0 U_0^T G and G V_0^T V_0 with the initial low factors (the complement's basis, PEFT stores no U_hi then)."""
    if key == "U_low":
        if adapter in layer._osf_U_high:
            hi = layer._osf_U_high[adapter].to(grad.dtype)
            return grad - hi @ (hi.mT @ grad)
        lo = layer._osf_U_low_init[adapter].to(grad.dtype)
        return lo @ (lo.mT @ grad)
    if adapter in layer._osf_V_high:
        hi = layer._osf_V_high[adapter].to(grad.dtype)
        return grad - (grad @ hi.mT) @ hi
    lo = layer._osf_V_low_init[adapter].to(grad.dtype)
    return (grad @ lo.mT) @ lo


@torch.no_grad()
def osf_project_grads_(model: nn.Module) -> None:
    """Project every OSF U_low / V_low gradient in place (`osf_projection`), also when it is an FSDP2 row shard:
    the shard is made whole (a collective: every rank walks the same layers in the same order), projected, and
    each rank keeps its rows."""
    from anchorft.rpsft.sharding import local_rows

    for _, layer in tuner_layers(model):
        for adapter, params in getattr(layer, "osf_svd_params", {}).items():
            for key in ("U_low", "V_low"):
                p = params[key]
                if p.grad is None:
                    continue
                _, g_loc, rows, _ = local_rows(p)
                whole = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                proj = osf_projection(layer, adapter, key, whole)
                g_loc.copy_(proj if rows is None else proj[rows])


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
    """Delta of one adapter on one layer (float32, the base weight's layout), from `state`; None when the layer
    holds no such adapter. Anything but plain LoRA and OSF is refused: its update is not written out here."""
    if adapter in getattr(layer, "lora_embedding_A", {}):  # an nn.Embedding: Delta = scaling (B A)^T
        a = state[f"{name}.lora_embedding_A.{adapter}"].float()  # (r, num_embeddings)
        b = state[f"{name}.lora_embedding_B.{adapter}"].float()  # (embedding_dim, r)
        return (b @ a).T * float(layer.scaling[adapter])
    if hasattr(layer, "lora_A"):
        if adapter not in layer.lora_A:
            return None
        if getattr(layer, "use_dora", {}).get(adapter) or getattr(layer, "lora_bias", {}).get(adapter):
            raise ValueError(f"{name}: DoRA and LoRA biases are not merged here (plain LoRA only)")
        a = state[f"{name}.lora_A.{adapter}.weight"].float()
        b = state[f"{name}.lora_B.{adapter}.weight"].float()
        delta = (b @ a) * float(layer.scaling[adapter])
        return delta.T if getattr(layer, "fan_in_fan_out", False) else delta
    if hasattr(layer, "osf_svd_params"):
        if adapter not in layer.osf_svd_params:
            return None
        u, s, v = (state[f"{name}.osf_svd_params.{adapter}.{k}"].float() for k in ("U_low", "S_low", "V_low"))
        u0, s0, v0 = (state[f"{name}._osf_{k}_low_init.{adapter}"].float() for k in ("U", "S", "V"))
        return (u * s) @ v - (u0 * s0) @ v0
    raise ValueError(f"{name}: a {type(layer).__name__} adapter is not merged here (LoRA and OSF only)")


def merge_adapter(
    base: nn.Module,
    peft_model: nn.Module | None,
    state: dict[str, torch.Tensor],
    layers: list[tuple[str, nn.Module]] | None = None,
) -> nn.Module:
    """`base` (a plain model holding the starting weights) with each adapted weight W_0 + Delta, Delta computed from
    `state` (`gather_adapter`) as the module docstring writes it; `peft_model` (the trained PEFT model, in any
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
    from safetensors.torch import save_file

    from anchorft.io import atomic_path, write_json

    with atomic_path(os.path.join(folder, "adapter_state.safetensors")) as tmp:
        save_file({k: v.contiguous() for k, v in state.items()}, tmp)
    configs = {name: cfg.to_dict() for name, cfg in unwrap(peft_model).peft_config.items()}
    write_json(os.path.join(folder, "adapter_config.json"), configs, default=str)
