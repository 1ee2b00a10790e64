"""OSF, PEFT's orthogonal subspace fine-tuning (`OSFConfig`): each adapted W_0 = U S V^T is split at
`effective_rank`; the top singular directions are frozen, the rest (its own U_low S_low V_low) train with gradients
projected orthogonal to the frozen subspaces. `effective_rank` is RPSFT's `anchor_rank`, so the two protect the
same number of directions per matrix.

Under FSDP2, PEFT projects OSF's gradients by hooks on its U_low and V_low tensors, which `fully_shard` replaces
with new sharded parameters: the hooks no longer fire. `project_grads_` applies the same projections to the
reduced gradients once per optimiser step (before clipping): the projections are linear and idempotent, so
projecting the accumulated, averaged gradient equals averaging the projected ones, and projecting twice changes
nothing."""

from __future__ import annotations

import logging
from functools import partial

from anchorft.rpsft.adapters import Adapter, register, tuner_layers
from anchorft.rpsft.sharding import local_rows, logical_shape

logger = logging.getLogger(__name__)


def config(args, targets, layers):
    """OSFConfig at `effective_rank = anchor_rank`. A matrix with anchor_rank >= min(m, n) has nothing below the
    frozen top to train: it is left out of the targets and stays W_0, the same function as PEFT's empty U_low /
    V_low, without those (0-element) parameters. They matter on a GPU: CUDA's SVD returns column-major factors, so
    an empty slice of them keeps a last stride != 1, and DeepSpeed's first broadcast (`p.data.view(torch.uint8)`)
    fails on it."""
    from peft import OSFConfig  # lazy: the peft extra

    k = args.anchor_rank
    whole = [n for n, m in layers if k >= min(logical_shape(m.weight))]
    if whole:
        kept = [n for n, _ in layers if n not in set(whole)]
        if not kept:
            raise ValueError(
                f"osf: anchor_rank={k} >= min(m, n) of every adapted matrix (e.g. {whole[0]}): OSF would train "
                "nothing; use a smaller anchor_rank"
            )
        logger.warning(
            "osf: anchor_rank %s >= min(m, n) for %s of %s matrices (e.g. %s): these stay frozen at W_0 (nothing "
            "below rank %s to train); a smaller anchor_rank trains them", k, len(whole), len(layers), whole[0], k,
        )  # fmt: skip
        targets = kept
    return OSFConfig(effective_rank=k, target_modules=targets, task_type="CAUSAL_LM")


def owns(layer) -> bool:
    return hasattr(layer, "osf_svd_params")


def delta(layer, name: str, adapter: str, state: dict):
    """Delta = U_low diag(S_low) V_low - U_low,0 diag(S_low,0) V_low,0 (PEFT's `get_delta_weight`: the trained
    low part replaces the initial one; the frozen top part stays in W_0)."""
    if adapter not in layer.osf_svd_params:
        return None
    u, s, v = (state[f"{name}.osf_svd_params.{adapter}.{k}"].float() for k in ("U_low", "S_low", "V_low"))
    u0, s0, v0 = (state[f"{name}._osf_{k}_low_init.{adapter}"].float() for k in ("U", "S", "V"))
    return (u * s) @ v - (u0 * s0) @ v0


def refuse(args) -> str | None:
    if args.lora_target_modules == "all-linear-embedding":
        return "lora_target_modules='all-linear-embedding': OSF adapts linear layers only"
    return None


def projection(layer, adapter: str, key: str, grad):
    """PEFT's OSF projection of the gradient of `key` ("U_low" (m x r) or "V_low" (r x n)), orthogonal to the
    frozen top subspace: G - U_hi U_hi^T G and G - G V_hi^T V_hi, written, where the factor is square, as
    U_0 U_0^T G and G V_0^T V_0 with the initial low factors (the complement's basis, PEFT stores no U_hi then).
    Computed in the bases' dtype (the one the adapter was built in), returned in the gradient's."""
    if key == "U_low":
        if adapter in layer._osf_U_high:
            hi = layer._osf_U_high[adapter]
            g = grad.to(hi.dtype)
            return (g - hi @ (hi.mT @ g)).to(grad.dtype)
        lo = layer._osf_U_low_init[adapter]
        g = grad.to(lo.dtype)
        return (lo @ (lo.mT @ g)).to(grad.dtype)
    if adapter in layer._osf_V_high:
        hi = layer._osf_V_high[adapter]
        g = grad.to(hi.dtype)
        return (g - (g @ hi.mT) @ hi).to(grad.dtype)
    lo = layer._osf_V_low_init[adapter]
    g = grad.to(lo.dtype)
    return ((g @ lo.mT) @ lo).to(grad.dtype)


def rehook(model) -> None:
    """Replace PEFT's projection hooks on every U_low / V_low by `projection`. PEFT's multiply the gradient by
    bases kept in the dtype the adapter was built in; an engine that casts the parameters alone afterwards
    (DeepSpeed's bf16 casts parameters and keeps buffers, PEFT's bases among them, in float32) hands them a bf16
    gradient, and torch refuses the mixed product. Same projection, computed in the bases' dtype."""
    for _, layer in tuner_layers(model):
        if not owns(layer):
            continue
        layer._detach_hooks()
        for adapter, params in layer.osf_svd_params.items():
            for key in ("U_low", "V_low"):
                hook = partial(projection, layer, adapter, key)
                layer.hook_handles.append(params[key].register_hook(hook))


def project_grads_(model) -> None:
    """Project every OSF U_low / V_low gradient in place (`projection`), also when it is an FSDP2 row shard: the
    shard is made whole (a collective: every rank walks the same layers in the same order), projected, and each
    rank keeps its rows."""
    import torch  # lazy, as the rest of the adapters' modules

    with torch.no_grad():
        for _, layer in tuner_layers(model):
            for adapter, params in getattr(layer, "osf_svd_params", {}).items():
                for key in ("U_low", "V_low"):
                    p = params[key]
                    if p.grad is None:
                        continue
                    _, g_loc, rows, _ = local_rows(p)
                    whole = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                    proj = projection(layer, adapter, key, whole)
                    g_loc.copy_(proj if rows is None else proj[rows])


OSF = register(
    Adapter(
        "osf", config, owns, delta, refuse=refuse, project_grads=project_grads_, prepare=rehook,
        zero3="OSF cannot run under ZeRO-3: it decomposes each weight when the adapter is created, and ZeRO-3's "
        "partitioned init leaves every rank an empty shard then; use ZeRO-2 (zero2.yaml)",
    )
)  # fmt: skip
