"""`AdapterAnchor`: RPSFT's penalty on the effective update of a PEFT adapter (a `lora` run with `lora_anchor`).

An adapted module computes with W = W_0 + Delta, W_0 its frozen base weight and Delta the sum over its active
adapters of PEFT's `get_delta_weight` (for LoRA (alpha / r) B A, transposed back to the base weight's layout
when `fan_in_fan_out`). So W - W_0 = Delta exactly, and the penalties of `anchorft.subspace` (Jin et al.,
arXiv:2605.10973, eq. 3, and the subspace kind) apply to Delta itself, with U_0 (m x k), V_0 (n x k) the top-k
singular bases of W_0:

    block:     R = sum_l || U_0^T Delta_l V_0 ||_F^2
    subspace:  R = sum_l || U_0^T Delta_l ||_F^2 + || Delta_l V_0 ||_F^2 - || U_0^T Delta_l V_0 ||_F^2
    k >= min(m, n): R_l = || Delta_l ||_F^2 (the L2 anchor, as `SubspaceAnchor` falls back)

No W_0 and no S_ref are stored: Delta is available directly. Storage per matrix (m + n) k. Only the adapted
modules carry a term (every other weight is frozen, its update is 0); at the start B = 0, so R = 0.

The gradient with respect to the adapter's parameters is taken by autograd one matrix at a time
(`torch.autograd.grad`, so only one Delta is alive at once) and added to their `.grad` once per optimiser step,
after the step's last backward, as `SubspaceAnchor.add_penalty_grad_` does for full weights.

Sharded engines. The bases come from the whole base weight (`sharding.full_matrix`: gathered under ZeRO-3, made
whole from FSDP2's row shards, a collective every rank joins in the same module order). Under FSDP2 the adapter's
factors are row-sharded DTensors: Delta is formed by DTensor arithmetic and made whole (`full_tensor`, whose
backward hands each rank the rows of the gradient it owns), so every rank computes the same R_l and adds its own
rows of dR/dtheta. Under ZeRO-3 (autograd mode: the penalty joins the loss) a partitioned factor is whole only
inside `sharding.gathered`; R_l is then computed by `_Regathered`, which keeps no factor for the backward and
gathers them again there, as `subspace.l2_penalty` does for a weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from anchorft.rpsft.sharding import full_matrix, gathered, is_zero3, unwrap
from anchorft.subspace import rotation_penalty, top_k_bases

__all__ = ["AdapterAnchor", "AdapterEntry", "adapter_modules", "adapter_delta"]

KINDS = ("block", "subspace")


@dataclass
class AdapterEntry:
    """One adapted matrix: its module name, the base weight's shape, the rank, the bases (None for the L2 form)
    and ||S_ref||_F = sqrt(sum of the top-k sigma^2) (||W_0||_F for the L2 form), the scale of its drift."""

    name: str
    shape: tuple[int, int]
    rank: int
    u: torch.Tensor | None
    v: torch.Tensor | None
    ref_norm: float

    @property
    def full(self) -> bool:
        return self.u is None


def adapter_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every PEFT tuner layer with an adapter that has a `get_delta_weight`, in module order."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # lazy: loads transformers

    out = []
    for name, mod in unwrap(model).named_modules():
        if isinstance(mod, BaseTunerLayer) and hasattr(mod, "get_delta_weight") and _active(mod):
            out.append((name, mod))
    return out


def _active(mod: nn.Module) -> list[str]:
    """The active adapters this layer holds (PEFT lists every active adapter name on every layer)."""
    holders = [getattr(mod, attr) for attr in getattr(mod, "adapter_layer_names", ())]
    return [a for a in mod.active_adapters if any(a in h for h in holders if hasattr(h, "__contains__"))]


def adapter_delta(mod: nn.Module) -> torch.Tensor:
    """Delta = sum over the layer's active adapters of `get_delta_weight` (base weight layout), differentiable; a
    whole tensor also when the factors are FSDP2 shards (DTensors)."""
    if getattr(mod, "merged", False):
        raise ValueError("adapter anchor: the adapter is merged into the base weight; unmerge it first")
    terms = [mod.get_delta_weight(a) for a in _active(mod)]
    delta = torch.stack(terms).sum(0) if len(terms) > 1 else terms[0]
    return delta.full_tensor() if hasattr(delta, "full_tensor") else delta


def _trainable(mod: nn.Module) -> list[torch.Tensor]:
    return [p for p in mod.parameters() if p.requires_grad]


class _Regathered(torch.autograd.Function):
    """R_l = `fn()` for an adapter whose factors ZeRO-3 partitions. Called while they are gathered (so that autograd
    records their whole shapes); keeps no factor for the backward, where it gathers them again and differentiates
    `fn` by autograd. A ZeRO-3 parameter is partitioned again as soon as its gather ends, so a graph built through
    it would hold empty tensors by the time the engine's backward runs."""

    @staticmethod
    def forward(ctx, fn, params, *tensors):
        ctx.fn, ctx.params = fn, params
        return fn().detach()

    @staticmethod
    def backward(ctx, grad):
        with gathered(ctx.params), torch.enable_grad():
            grads = torch.autograd.grad(ctx.fn(), ctx.params, allow_unused=True)
        return (None, None, *(None if g is None else g * grad for g in grads))


class AdapterAnchor:
    """RPSFT's penalty (block or subspace kind) on the adapters' effective updates; see the module docstring."""

    def __init__(self, entries: list[AdapterEntry], kind: str = "block"):
        if kind not in KINDS:
            raise ValueError(f"anchor_kind must be one of {KINDS}, got {kind!r}")
        if not entries:
            raise ValueError("adapter anchor: the model has no active PEFT adapter")
        self.entries, self.kind = entries, kind

    @classmethod
    @torch.no_grad()
    def from_model(
        cls, model: nn.Module, rank: int, kind: str = "block", dtype: torch.dtype = torch.float32
    ) -> AdapterAnchor:
        """Top-`rank` bases (exact SVD, fp32) of every adapted module's frozen base weight, stored in `dtype`."""
        entries = []
        for name, mod in adapter_modules(model):
            w0 = full_matrix(mod.get_base_layer().weight).float()
            m, n = w0.shape
            if rank >= min(m, n):
                entries.append(AdapterEntry(name, (m, n), min(m, n), None, None, float(w0.norm())))
                continue
            u, s, v = top_k_bases(w0, rank)
            entries.append(AdapterEntry(name, (m, n), rank, u.to(dtype), v.to(dtype), float(s.norm())))
        return cls(entries, kind)

    def to(self, device: torch.device | str) -> AdapterAnchor:
        for e in self.entries:
            if not e.full:
                e.u, e.v = e.u.to(device), e.v.to(device)
        return self

    def _modules(self, model: nn.Module) -> list[nn.Module]:
        mods = dict(unwrap(model).named_modules())
        missing = [e.name for e in self.entries if e.name not in mods]
        if missing:
            raise ValueError(f"adapter anchor: modules {missing[:3]} not in the model")
        return [mods[e.name] for e in self.entries]

    def term(self, e: AdapterEntry, delta: torch.Tensor) -> torch.Tensor:
        """R_l of one matrix from its update Delta (differentiable)."""
        if e.full:
            return delta.float().pow(2).sum()
        d = delta.to(e.u.device, e.u.dtype)
        a = e.u.mT @ d  # U_0^T Delta (k x n)
        c = a @ e.v  # U_0^T Delta V_0 (k x k)
        if self.kind == "block":
            return c.pow(2).sum()
        return rotation_penalty(a, d @ e.v, c)

    def penalty_terms(self, model: nn.Module) -> torch.Tensor:
        """The per-matrix terms R_l (1-D, in `self.entries` order), differentiable in the adapters' parameters."""
        terms = []
        for e, mod in zip(self.entries, self._modules(model)):
            params = _trainable(mod)
            if any(is_zero3(p) for p in params):
                fn = lambda e=e, mod=mod: self.term(e, adapter_delta(mod))  # noqa: E731
                with gathered(params):
                    terms.append(_Regathered.apply(fn, params, *params))
            else:
                terms.append(self.term(e, adapter_delta(mod)))
        return torch.stack(terms)

    def penalty(self, model: nn.Module) -> torch.Tensor:
        return self.penalty_terms(model).sum()

    def summarize(self, terms: torch.Tensor) -> dict[str, float]:
        """{"penalty": sum R_l, "drift_max": max_l sqrt(R_l) / ||S_ref,l||_F}."""
        t = terms.detach().float()
        norms = torch.tensor([max(e.ref_norm, 1e-12) for e in self.entries])
        return {"penalty": float(t.sum()), "drift_max": float((t.clamp_min(0).sqrt().cpu() / norms).max())}

    def drift(self, model: nn.Module) -> dict[str, float]:
        with torch.no_grad():
            return self.summarize(self.penalty_terms(model))

    def add_penalty_grad_(self, model: nn.Module, scale: float) -> dict[str, float]:
        """Add scale * dR/dtheta to the `.grad` of each adapter parameter theta (autograd, one matrix at a time);
        returns `summarize` of the terms."""
        terms = []
        for e, mod in zip(self.entries, self._modules(model)):
            params = _trainable(mod)
            with torch.enable_grad():
                r = self.term(e, adapter_delta(mod))
                grads = torch.autograd.grad(r, params, allow_unused=True)
            for p, g in zip(params, grads):
                if g is None:
                    continue
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.add_(g.to(p.grad.dtype), alpha=scale)
            terms.append(r.detach())
        return self.summarize(torch.stack(terms))

    def __repr__(self) -> str:
        numel = sum(0 if e.full else (e.shape[0] + e.shape[1]) * e.rank for e in self.entries)
        nf = sum(e.full for e in self.entries)
        return f"AdapterAnchor(kind={self.kind}, matrices={len(self.entries)}, l2_form={nf}, numbers={numel:,})"
