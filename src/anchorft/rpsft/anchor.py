"""`SubspaceAnchor`: the rotation-preserving penalty applied to every selected weight of a transformer.

Jin et al., "Rotation-Preserving Supervised Fine-Tuning" (arXiv:2605.10973), eq. 3:

    R(theta) = sum_{l in M} || U_{0,l}^T (W_l - W_{0,l}) V_{0,l} ||_F^2
             = sum_{l in M} || U_{0,l}^T W_l V_{0,l} - S_{ref,l} ||_F^2,      S_ref = U_0^T W_0 V_0,

with U_0 (m x k), V_0 (n x k) the top-k singular bases of the pretrained W_0. A matrix with
k >= min(m, n) falls back to the full L2 anchor ||W - W_0||_F^2 (then W_0 itself is stored); the SVD
branch keeps only U_0, V_0 and the k x k block: (m + n) k + k^2 numbers, no copy of W_0.

The per-matrix maths lives in `anchorft.subspace`; this module selects matrices, stores the
bases, applies the penalty and its closed-form gradient (also on row-sharded DTensor parameters, as
FSDP2 holds them) and saves / loads the anchor (safetensors + JSON). DeepSpeed ZeRO-3 parameters
(partitioned flat, outside the forward pass) are gathered one matrix at a time
(`deepspeed.zero.GatheredParameters`, read-only) wherever a whole matrix is needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from anchorft.io import new_file_mode
from anchorft.subspace import block_residual, reference_block, top_k_bases

__all__ = ["SubspaceAnchor", "AnchorEntry", "select_parameters", "weights_fingerprint"]

ANCHOR_FORMAT_VERSION = 1
_EXCLUDED = re.compile(r"(^|\.)(vision|visual|vision_tower|vision_model|image_encoder|cross_attn|cross_attention)\b")


@dataclass
class AnchorEntry:
    """One anchored matrix. SVD branch: u (m x k), v (n x k), s_ref (k x k). Fallback: w0 (m x n)."""

    name: str
    shape: tuple[int, int]
    rank: int
    fallback: bool
    u: torch.Tensor | None = None
    v: torch.Tensor | None = None
    s_ref: torch.Tensor | None = None
    w0: torch.Tensor | None = None
    aliases: tuple[str, ...] = ()
    svd_residual: float = 0.0

    @property
    def numel(self) -> int:
        """Numbers stored for this matrix: (m + n) k + k^2 (SVD branch) or m n (fallback)."""
        m, n = self.shape
        return m * n if self.fallback else (m + n) * self.rank + self.rank**2

    def tensors(self) -> dict[str, torch.Tensor]:
        keys = ("w0",) if self.fallback else ("u", "v", "s_ref")
        return {k: getattr(self, k) for k in keys}


def _unwrap(model: nn.Module) -> nn.Module:
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return model


def _named_matrices(model: nn.Module, include_embeddings: bool) -> list[tuple[str, nn.Parameter, str]]:
    """Every trainable 2-D weight of an nn.Linear / nn.Embedding module, once (tied weights counted once).

    Returns (parameter name, parameter, kind) with kind "linear" or "embedding"; the output embedding
    (lm_head) counts as an embedding. Vision and cross-attention modules are excluded.
    """
    model = _unwrap(model)
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    seen: set[int] = set()
    result = []
    for mod_name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.Embedding)) or _EXCLUDED.search(mod_name):
            continue
        p = module.weight
        if p is None or len(_shape(p)) != 2 or not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        kind = "embedding" if isinstance(module, nn.Embedding) or module is out_emb else "linear"
        result.append((f"{mod_name}.weight" if mod_name else "weight", p, kind))
    return result


def select_parameters(
    model: nn.Module, targets: str | Sequence[str] = "all-linear", include_embeddings: bool = True
) -> list[tuple[str, nn.Parameter]]:
    """The matrices an anchor covers, as (name, parameter); tied weights appear once.

    `targets`: "all-linear" (every linear weight, lm_head included when `include_embeddings`), a
    regular expression searched in the parameter names, or a list of names (a full parameter name, a
    module name, or a module's last name component such as "q_proj"). Raises ValueError, listing the
    names available, when nothing matches.
    """
    candidates = _named_matrices(model, include_embeddings)
    if isinstance(targets, str) and targets == "all-linear":
        chosen = [(n, p) for n, p, kind in candidates if kind == "linear" or include_embeddings]
    else:
        if isinstance(targets, str):
            try:
                pattern = re.compile(targets)
            except re.error as e:
                raise ValueError(f"anchor_targets: invalid regular expression {targets!r}: {e}") from None
            chosen = [(n, p) for n, p, _ in candidates if pattern.search(n)]
        elif isinstance(targets, Iterable):
            wanted = set(targets)
            chosen = []
            for n, p, _ in candidates:
                mod = n[: -len(".weight")] if n.endswith(".weight") else n
                if n in wanted or mod in wanted or mod.rsplit(".", 1)[-1] in wanted:
                    chosen.append((n, p))
        else:
            raise ValueError(f"anchor_targets must be 'all-linear', a regex or a list of names, got {targets!r}")
        if not include_embeddings:
            emb = {n for n, _, kind in candidates if kind == "embedding"}
            chosen = [(n, p) for n, p in chosen if n not in emb]
    if not chosen:
        names = [n for n, _, _ in candidates]
        leaves = sorted({n.rsplit(".", 2)[-2] if n.count(".") else n for n in names})
        raise ValueError(
            f"anchor_targets={targets!r} matches no trainable 2-D weight of {type(_unwrap(model)).__name__}. "
            f"Module names available: {leaves}; e.g. parameters {names[:6]}{' ...' if len(names) > 6 else ''}"
        )
    return chosen


def _is_zero3(p: torch.Tensor) -> bool:
    """True for a DeepSpeed ZeRO-3 parameter (its `.data` is an empty placeholder outside `_gathered`)."""
    return hasattr(p, "ds_id") and hasattr(p, "ds_shape")


def _shape(p: torch.Tensor) -> tuple[int, ...]:
    """The logical shape of a parameter, also when ZeRO-3 has partitioned it."""
    return tuple(p.ds_shape) if _is_zero3(p) else tuple(p.shape)


def _gathered(params: Sequence[torch.Tensor]):
    """Context in which ZeRO-3 parameters hold their whole matrix on every rank (read-only; a collective:
    every rank must enter it); a no-op for any other parameter."""
    z3 = [p for p in params if _is_zero3(p)]
    if not z3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(z3, modifier_rank=None)


def _full(p: torch.Tensor) -> torch.Tensor:
    """The whole matrix of a (possibly sharded DTensor or ZeRO-3 partitioned) parameter, detached."""
    if _is_zero3(p):
        with _gathered([p]):
            return p.detach().clone()
    p = p.detach()
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def weights_fingerprint(named: Sequence[tuple[str, torch.Tensor]]) -> str:
    """sha256 over names, shapes and a strided sample (<= 4096 values, rounded to bf16) of each matrix.

    Rounding to bf16 makes the fingerprint of a checkpoint the same whether it is loaded in fp32 or bf16;
    it still tells apart any two different pretrained models.
    """
    h = hashlib.sha256()
    for name, p in named:
        w = _full(p)
        flat = w.reshape(-1)
        stride = max(1, flat.numel() // 4096)
        sample = flat[::stride][:4096].to(torch.bfloat16).float().cpu().contiguous()
        h.update(f"{name}:{tuple(w.shape)};".encode())
        h.update(sample.numpy().tobytes())
    return h.hexdigest()


def _dist_info() -> tuple[bool, int]:
    ok = torch.distributed.is_available() and torch.distributed.is_initialized()
    return ok, (torch.distributed.get_world_size() if ok else 1)


def _local_rows(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, slice | None, object]:
    """(local weight, local grad, row slice of the full matrix or None if replicated, process group).

    Plain tensors and replicated DTensors are whole. A DTensor sharded on dim 0 (FSDP2's layout)
    gives its local rows, their offset and the mesh's group. Other layouts are rejected.
    """
    if not hasattr(p, "to_local"):
        return p.detach(), p.grad, None, None
    from torch.distributed.tensor import Replicate, Shard

    placements = tuple(p.placements)
    grad = p.grad.to_local() if p.grad is not None else None
    if all(isinstance(pl, Replicate) for pl in placements):
        return p.to_local().detach(), grad, None, None
    if p.device_mesh.ndim != 1 or not (len(placements) == 1 and isinstance(placements[0], Shard)):
        raise ValueError(f"anchor: unsupported DTensor layout {placements}; expected Shard(0) on a 1-D mesh (FSDP2)")
    if placements[0].dim != 0:
        raise ValueError(f"anchor: parameter sharded on dim {placements[0].dim}; only row sharding is supported")
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, placements)
    return p.to_local().detach(), grad, slice(offset[0], offset[0] + shape[0]), p.device_mesh.get_group()


class SubspaceAnchor:
    """Top-k singular subspaces of the pretrained weights, and the penalty that keeps them in place.

    Build with `SubspaceAnchor.from_model(model, rank=768, targets="all-linear", include_embeddings=True,
    svd="exact", dtype=torch.float32)`, or `SubspaceAnchor.load(path, model)`. Then
    `penalty(model)` (differentiable, fp32, without lambda), `add_penalty_grad_(model, scale)` (closed
    form, adds to `.grad`), `stats(model)`, `save(path)`.
    """

    def __init__(self, entries: list[AnchorEntry], meta: dict):
        self.entries = entries
        self.meta = dict(meta)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        rank: int = 768,
        targets: str | Sequence[str] = "all-linear",
        include_embeddings: bool = True,
        svd: str = "exact",
        dtype: torch.dtype = torch.float32,
        generator: torch.Generator | None = None,
        oversample: int = 10,
        n_iter: int = 4,
        progress: bool = False,
    ) -> SubspaceAnchor:
        """Compute U_k, V_k and S_ref = U_k^T W_0 V_k (in fp32 or better) for every selected matrix.

        Matrices with rank >= min(m, n) fall back to L2 (W_0 stored in `dtype`). Under
        torch.distributed every rank computes, then rank 0's bases are broadcast so all ranks agree
        bit for bit. `svd="randomized"` records per matrix the relative residual
        max(||W V - U S||, ||W^T U - V S||) / ||S|| (0 for an exact SVD) in `svd_residual`.
        """
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"anchor rank must be an integer >= 1, got {rank!r}")
        if svd not in ("exact", "randomized"):
            raise ValueError(f"anchor svd must be 'exact' or 'randomized', got {svd!r}")
        named = select_parameters(model, targets, include_embeddings)
        compute_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        entries = []
        iterator = named
        if progress:
            from tqdm.auto import tqdm

            iterator = tqdm(named, desc="anchor SVD", unit="matrix")
        all_named = dict(_unwrap(model).named_parameters(remove_duplicate=False))
        for name, p in iterator:
            aliases = tuple(n for n, q in all_named.items() if q is p and n != name)
            w0 = _full(p).to(compute_dtype)
            m, n = w0.shape
            if rank >= min(m, n):
                entries.append(AnchorEntry(name, (m, n), min(m, n), True, w0=w0.to(dtype).clone(), aliases=aliases))
                continue
            u, s, v = top_k_bases(w0, rank, svd=svd, oversample=oversample, n_iter=n_iter, generator=generator)
            s_ref = reference_block(w0, u, v)
            residual = 0.0
            if svd == "randomized":
                sn = s.norm().clamp_min(1e-30)
                r1 = (w0 @ v - u * s).norm() / sn
                r2 = (w0.mT @ u - v * s).norm() / sn
                residual = float(torch.maximum(r1, r2))
            entries.append(
                AnchorEntry(
                    name,
                    (m, n),
                    rank,
                    False,
                    u=u.to(dtype).contiguous(),
                    v=v.to(dtype).contiguous(),
                    s_ref=s_ref.to(dtype).contiguous(),
                    aliases=aliases,
                    svd_residual=residual,
                )
            )
        ok, world = _dist_info()
        if ok and world > 1:
            for e in entries:
                for t in e.tensors().values():
                    torch.distributed.broadcast(t, src=0)
        meta = {
            "rank": rank,
            "targets": targets if isinstance(targets, str) else list(targets),
            "include_embeddings": include_embeddings,
            "svd": svd,
            "dtype": str(dtype).removeprefix("torch."),
            "fingerprint": weights_fingerprint(named),
            "svd_residual_max": max((e.svd_residual for e in entries), default=0.0),
        }
        return cls(entries, meta)

    # ------------------------------------------------------------------ helpers
    @property
    def fingerprint(self) -> str:
        return self.meta["fingerprint"]

    def _params(self, model: nn.Module) -> list[torch.Tensor]:
        params = dict(_unwrap(model).named_parameters(remove_duplicate=False))
        missing = [e.name for e in self.entries if e.name not in params]
        if missing:
            raise ValueError(f"anchor: the model has no parameter(s) {missing[:5]}; was the anchor built for it?")
        return [params[e.name] for e in self.entries]

    def check_model(self, model: nn.Module, check_fingerprint: bool = True) -> None:
        """Raise ValueError unless `model` has the anchored matrices, with their shapes (and, when
        `check_fingerprint`, the pretrained weights this anchor was computed from)."""
        params = self._params(model)
        bad = [(e.name, e.shape, _shape(p)) for e, p in zip(self.entries, params) if _shape(p) != e.shape]
        if bad:
            raise ValueError(f"anchor: shape mismatch (name, anchor, model): {bad[:5]}")
        if check_fingerprint:
            fp = weights_fingerprint([(e.name, p) for e, p in zip(self.entries, params)])
            if fp != self.fingerprint:
                raise ValueError(
                    "anchor: fingerprint mismatch: the model's weights are not the pretrained weights this anchor "
                    f"was computed from (anchor {self.fingerprint[:12]}, model {fp[:12]})"
                )

    def to(self, device: torch.device | str | None = None, model: nn.Module | None = None) -> SubspaceAnchor:
        """Move the stored tensors to `device`, or each to its parameter's device when `model` is given."""
        devices = [p.device for p in self._params(model)] if model is not None else [device] * len(self.entries)
        for e, d in zip(self.entries, devices):
            if hasattr(d, "type") and d.type == "meta":
                continue
            for k, t in e.tensors().items():
                setattr(e, k, t.to(d))
        return self

    def _compute_dtype(self) -> torch.dtype:
        return torch.float64 if self.meta.get("dtype") == "float64" else torch.float32

    # ------------------------------------------------------------------ penalty
    def _blocks(self, model: nn.Module, differentiable: bool):
        """Per matrix the residual D (or W - W_0 on local rows for fallbacks), globally reduced.

        Returns a list of (entry, param, local weight, local grad, row slice, residual) and the
        per-matrix squared norms (a 1-D tensor, summed over shards).

        A DeepSpeed ZeRO-3 parameter is gathered (read-only) just for its own matrix's terms, one matrix
        at a time (peak: one whole matrix); the residual and its autograd graph keep no reference to the
        gathered weights (the matmul U^T W saves U^T, not W), so differentiating the result after the
        parameter is partitioned again gives d/dW, which DeepSpeed reduce-scatters like any gradient.
        The local weight returned for it is stale once gathered again; its local grad is None.
        """
        cd = self._compute_dtype()
        items, sq, reduce_group = [], [], None
        for e, p in zip(self.entries, self._params(model)):
            with _gathered([p]):
                if differentiable:
                    w_loc, g_loc, rows, group = (p, None, None, None) if not hasattr(p, "to_local") else (None,) * 4
                    if w_loc is None:
                        raise ValueError("anchor.penalty: use add_penalty_grad_ for sharded (DTensor) parameters")
                else:
                    w_loc, g_loc, rows, group = _local_rows(p)
                if group is not None:
                    reduce_group = group
                w = w_loc.to(cd)
                if e.fallback:
                    w0 = e.w0.to(cd) if rows is None else e.w0[rows].to(cd)
                    d = w - w0
                    partial = d.pow(2).sum()
                else:
                    u = e.u.to(cd) if rows is None else e.u[rows].to(cd)
                    v, s_ref = e.v.to(cd), e.s_ref.to(cd)
                    d = (u.mT @ w @ v) if rows is not None else block_residual(w, u, v, s_ref)
                    partial = None
            items.append([e, p, w_loc, g_loc, rows, d])
            sq.append(partial)
        if reduce_group is not None:
            # one all-reduce for every sharded partial: k x k blocks (SVD branch) and fallback sums of squares
            bufs = []
            for it, s in zip(items, sq):
                if it[4] is not None:
                    bufs.append(it[5].reshape(-1) if not it[0].fallback else s.reshape(1))
            flat = torch.cat(bufs)
            torch.distributed.all_reduce(flat, group=reduce_group)
            off = 0
            for i, it in enumerate(items):
                if it[4] is None:
                    continue
                if it[0].fallback:
                    sq[i] = flat[off]
                    off += 1
                else:
                    k = it[0].rank
                    it[5] = flat[off : off + k * k].reshape(k, k) - it[0].s_ref.to(cd)
                    off += k * k
        for i, it in enumerate(items):
            if sq[i] is None:
                sq[i] = it[5].pow(2).sum()
        return items, torch.stack(sq) if sq else torch.zeros(0)

    def penalty(self, model: nn.Module) -> torch.Tensor:
        """R = sum over matrices of ||U^T (W - W_0) V||_F^2 (no lambda), differentiable, in fp32."""
        return self.penalty_terms(model).sum()

    def penalty_terms(self, model: nn.Module) -> torch.Tensor:
        """The per-matrix terms ||U_l^T (W_l - W_0,l) V_l||_F^2 (1-D, in `self.entries` order), differentiable."""
        _, sq = self._blocks(model, differentiable=True)
        return sq

    def summarize(self, terms: torch.Tensor) -> dict[str, float]:
        """{"penalty": sum of `terms`, "drift_max": max_l sqrt(term_l) / ||S_ref,l||_F}."""
        return self._summary(terms.detach())

    @torch.no_grad()
    def add_penalty_grad_(self, model: nn.Module, scale: float) -> dict[str, float]:
        """Add scale * dR/dW = scale * 2 U (U^T W V - S_ref) V^T (or scale * 2 (W - W_0)) to each `.grad`.

        No autograd graph. Sharded (FSDP2 DTensor, Shard(0)) parameters: each rank forms its rows'
        partial block U_r^T W_r V, one all-reduce sums the k x k blocks, and each rank adds
        2 U_r D V^T to its own gradient shard. Returns {"penalty": R, "drift_max": max relative drift}.
        DeepSpeed ZeRO-3 parameters are refused (ValueError): use `penalty` in the loss.
        """
        z3 = [e.name for e, p in zip(self.entries, self._params(model)) if _is_zero3(p)]
        if z3:
            raise ValueError(
                f"anchor: {z3[0]} is a DeepSpeed ZeRO-3 parameter, whose gradient lives in the engine: add "
                "`penalty(model)` to the loss instead (RPSFTTrainer does: anchor_mode='autograd')"
            )
        items, sq = self._blocks(model, differentiable=False)
        cd = self._compute_dtype()
        for e, p, w_loc, g_loc, rows, d in items:
            if g_loc is None:
                if hasattr(p, "to_local"):
                    raise ValueError(f"anchor: sharded parameter {e.name} has no gradient yet")
                g_loc = p.grad = torch.zeros_like(w_loc)
            if e.fallback:
                g_loc.add_(d.to(g_loc.dtype), alpha=2.0 * scale)
                continue
            u = e.u.to(cd) if rows is None else e.u[rows].to(cd)
            ud, vt = u @ d, e.v.to(cd).mT
            if g_loc.dtype == cd:  # fused: grad += 2 scale (U D) V^T, no m x n temporary
                g_loc.addmm_(ud, vt, alpha=2.0 * scale)
            else:
                g_loc.add_((ud @ vt).to(g_loc.dtype), alpha=2.0 * scale)
        return self._summary(sq)

    def _summary(self, sq: torch.Tensor) -> dict[str, float]:
        rel = sq.sqrt() / self._ref_norms(sq.device)
        return {"penalty": float(sq.sum()), "drift_max": float(rel.max()) if rel.numel() else 0.0}

    def _ref_norms(self, device) -> torch.Tensor:
        if getattr(self, "_ref_norm_cache", None) is None or self._ref_norm_cache.device != device:
            norms = [(e.w0 if e.fallback else e.s_ref).float().norm() for e in self.entries]
            self._ref_norm_cache = torch.stack([n.to(device) for n in norms]).clamp_min(1e-30)
        return self._ref_norm_cache

    @torch.no_grad()
    def drift(self, model: nn.Module) -> dict[str, float]:
        """{"penalty": R, "drift_max": max_l ||D_l||_F / ||S_ref,l||_F} without touching gradients."""
        _, sq = self._blocks(model, differentiable=False)
        return self._summary(sq)

    def stats(self, model: nn.Module | None = None) -> list[dict]:
        """Per matrix: name, shape, rank, fallback, numbers and bytes stored, svd_residual, and with a model
        the current drift: penalty ||D||_F^2 and relative ||D||_F / ||S_ref||_F (||W_0||_F for fallbacks)."""
        sq = None
        if model is not None:
            with torch.no_grad():
                _, sq = self._blocks(model, differentiable=False)
        rows = []
        for i, e in enumerate(self.entries):
            elt = next(iter(e.tensors().values())).element_size()
            row = {
                "name": e.name,
                "shape": list(e.shape),
                "rank": e.rank,
                "fallback": e.fallback,
                "numel": e.numel,
                "bytes": e.numel * elt,
                "svd_residual": e.svd_residual,
                "aliases": list(e.aliases),
            }
            if sq is not None:
                ref = float((e.w0 if e.fallback else e.s_ref).float().norm())
                row["penalty"] = float(sq[i])
                row["drift"] = math.sqrt(float(sq[i])) / max(ref, 1e-30)
            rows.append(row)
        return rows

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write `path`/anchor.safetensors and `path`/anchor.json atomically (tmp file, then os.replace)."""
        os.makedirs(path, exist_ok=True)
        tensors = {}
        for e in self.entries:
            for k, t in e.tensors().items():
                tensors[f"{e.name}::{k}"] = t.detach().cpu().contiguous()
        meta = {
            "format_version": ANCHOR_FORMAT_VERSION,
            **self.meta,
            "matrices": [
                {
                    "name": e.name,
                    "shape": list(e.shape),
                    "rank": e.rank,
                    "fallback": e.fallback,
                    "aliases": list(e.aliases),
                    "svd_residual": e.svd_residual,
                }
                for e in self.entries
            ],
        }
        fd, tmp = tempfile.mkstemp(dir=path, suffix=".tmp")
        os.close(fd)
        os.chmod(tmp, new_file_mode())
        save_file(tensors, tmp, metadata={"format": "pt", "anchorft": "subspace-anchor"})
        os.replace(tmp, os.path.join(path, "anchor.safetensors"))
        fd, tmp = tempfile.mkstemp(dir=path, suffix=".tmp")
        os.chmod(tmp, new_file_mode())
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, os.path.join(path, "anchor.json"))

    @staticmethod
    def exists(path: str | os.PathLike) -> bool:
        return os.path.isfile(os.path.join(path, "anchor.json")) and os.path.isfile(
            os.path.join(path, "anchor.safetensors")
        )

    @classmethod
    def load(
        cls, path: str | os.PathLike, model: nn.Module | None = None, check_fingerprint: bool = True
    ) -> SubspaceAnchor:
        """Read an anchor written by `save`. With `model`, check names and shapes (and, if
        `check_fingerprint`, that the model holds the pretrained weights the anchor came from), then
        move each tensor to its parameter's device. Any mismatch is a ValueError."""
        if not cls.exists(path):
            raise FileNotFoundError(f"no anchor (anchor.json + anchor.safetensors) in {path}")
        with open(os.path.join(path, "anchor.json")) as f:
            meta = json.load(f)
        if meta.get("format_version") != ANCHOR_FORMAT_VERSION:
            raise ValueError(f"anchor in {path}: unsupported format_version {meta.get('format_version')}")
        tensors = load_file(os.path.join(path, "anchor.safetensors"))
        entries = []
        for mm in meta.pop("matrices"):
            name = mm["name"]
            e = AnchorEntry(
                name,
                tuple(mm["shape"]),
                mm["rank"],
                mm["fallback"],
                aliases=tuple(mm["aliases"]),
                svd_residual=mm["svd_residual"],
            )
            for k in ("w0",) if e.fallback else ("u", "v", "s_ref"):
                key = f"{name}::{k}"
                if key not in tensors:
                    raise ValueError(f"anchor in {path}: tensor {key} missing")
                setattr(e, k, tensors[key])
            entries.append(e)
        anchor = cls(entries, meta)
        if model is not None:
            anchor.check_model(model, check_fingerprint=check_fingerprint)
            anchor.to(model=model)
        return anchor

    def __repr__(self) -> str:
        nf = sum(e.fallback for e in self.entries)
        numel = sum(e.numel for e in self.entries)
        return (
            f"SubspaceAnchor(rank={self.meta.get('rank')}, matrices={len(self.entries)}, fallback={nf}, "
            f"numbers={numel:,}, svd={self.meta.get('svd')}, "
            f"svd_residual_max={self.meta.get('svd_residual_max', 0.0):.2e})"
        )
