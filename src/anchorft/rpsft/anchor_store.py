"""The anchor as stored: `AnchorEntry` (one matrix's bases, computed from W_0 by `AnchorEntry.from_weight`), the
files (safetensors + JSON) and the fingerprint of the pretrained weights an anchor was computed from.

`path`/anchor.safetensors holds each entry's tensors under "<name>::<u | v | s_ref | w0>"; `path`/anchor.json the
anchor's settings (`SubspaceAnchor.meta`), "format_version" and one record per matrix ("matrices": name, shape,
rank, fallback, aliases, svd_residual, weight, rest). Both are written atomically through `anchorft.io`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file

from anchorft.io import atomic_path, write_text
from anchorft.rpsft.anchor_plan import anchor_numbers
from anchorft.rpsft.sharding import Part, full_matrix
from anchorft.subspace import reference_block, top_k_bases

__all__ = ["AnchorEntry", "save_anchor", "load_anchor", "anchor_exists", "weights_fingerprint"]

ANCHOR_FORMAT_VERSION = 1
_RECORD = ("name", "shape", "rank", "fallback", "aliases", "svd_residual", "weight", "rest")  # anchor.json, in order


@dataclass
class AnchorEntry:
    """One anchored matrix. SVD branch: u (m x k), v (n x k), s_ref (k x k) (and w0 when `rest` > 0). Fallback:
    w0 (m x n), or, when its parameter is sharded, only the part whose weights this rank holds (`w0_part`, see
    `anchorft.rpsft.sharding.held_part`; `w0_norm` keeps ||W_0||_F). `weight` multiplies its penalty term (a map's
    lambda over the global lambda); `rest` weights the L2 on the complement of the protected part
    (anchor_lambda_rest over the global lambda)."""

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
    weight: float = 1.0
    rest: float = 0.0
    w0_part: Part | None = None
    w0_norm: float | None = None

    @property
    def numel(self) -> int:
        """Numbers stored for this matrix: (m + n) k + k^2 (SVD branch; + m n with W_0 for `rest`) or m n."""
        return anchor_numbers(*self.shape, self.rank, rest=self.w0 is not None)  # a fallback's rank is min(m, n)

    @classmethod
    def from_weight(cls, name: str, w0: torch.Tensor, k: int, dtype: torch.dtype, *, aliases: tuple[str, ...] = (),
                    weight: float = 1.0, rest: float = 0.0, **svd_kwargs) -> AnchorEntry:  # fmt: skip
        """The entry of the pretrained W_0 (m x n, in the compute dtype) at rank k >= 1, stored in `dtype`: the L2
        fallback (W_0) for k >= min(m, n), else U_k, V_k (`top_k_bases(w0, k, **svd_kwargs)`) and
        S_ref = U_k^T W_0 V_k, plus W_0 when `rest` > 0. A randomized SVD records
        max(||W V - U S||, ||W^T U - V S||) / ||S|| in `svd_residual`."""
        m, n = w0.shape
        if k >= min(m, n):
            return cls(name, (m, n), min(m, n), True, w0=w0.to(dtype).clone(), aliases=aliases, weight=weight)
        u, s, v = top_k_bases(w0, k, **svd_kwargs)
        s_ref = reference_block(w0, u, v)
        residual = 0.0
        if svd_kwargs.get("svd") == "randomized":
            sn = s.norm().clamp_min(1e-30)
            r1 = (w0 @ v - u * s).norm() / sn
            r2 = (w0.mT @ u - v * s).norm() / sn
            residual = float(torch.maximum(r1, r2))
        u, v, s_ref = (t.to(dtype).contiguous() for t in (u, v, s_ref))
        w0_kept = w0.to(dtype).clone() if rest > 0 else None
        return cls(name, (m, n), k, False, u, v, s_ref, w0_kept, aliases, residual, weight, rest)

    def tensors(self) -> dict[str, torch.Tensor]:
        keys = ("w0",) if self.fallback else ("u", "v", "s_ref") + (("w0",) if self.w0 is not None else ())
        return {k: getattr(self, k) for k in keys}


def weights_fingerprint(named: Sequence[tuple[str, torch.Tensor]]) -> str:
    """sha256 over names, shapes and a strided sample (<= 4096 values, rounded to bf16) of each matrix.

    Rounding to bf16 makes the fingerprint of a checkpoint the same whether it is loaded in fp32 or bf16;
    it still tells apart any two different pretrained models.
    """
    h = hashlib.sha256()
    for name, p in named:
        w = full_matrix(p)
        flat = w.reshape(-1)
        stride = max(1, flat.numel() // 4096)
        sample = flat[::stride][:4096].to(torch.bfloat16).float().cpu().contiguous()
        h.update(f"{name}:{tuple(w.shape)};".encode())
        h.update(sample.numpy().tobytes())
    return h.hexdigest()


def save_anchor(path: str | os.PathLike, entries: Sequence[AnchorEntry], meta: dict) -> None:
    """Write `path`/anchor.safetensors (the entries' tensors) and `path`/anchor.json (`meta` and the entries'
    records), each atomically."""
    tensors = {f"{e.name}::{k}": t.detach().cpu().contiguous() for e in entries for k, t in e.tensors().items()}
    records = [{k: getattr(e, k) for k in _RECORD} for e in entries]  # tuples are written as JSON lists
    meta = {"format_version": ANCHOR_FORMAT_VERSION, **meta, "matrices": records}
    with atomic_path(os.path.join(path, "anchor.safetensors")) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt", "anchorft": "subspace-anchor"})
    write_text(os.path.join(path, "anchor.json"), json.dumps(meta, indent=1))


def anchor_exists(path: str | os.PathLike) -> bool:
    """True when `path` holds both files of a saved anchor."""
    return all(os.path.isfile(os.path.join(path, f)) for f in ("anchor.json", "anchor.safetensors"))


def load_anchor(path: str | os.PathLike) -> tuple[list[AnchorEntry], dict]:
    """(entries, meta) of an anchor written by `save_anchor`; FileNotFoundError without one, ValueError for an
    unknown format version or a missing tensor."""
    if not anchor_exists(path):
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
            name, tuple(mm["shape"]), mm["rank"], mm["fallback"], aliases=tuple(mm["aliases"]),
            svd_residual=mm["svd_residual"], weight=float(mm.get("weight", 1.0)), rest=float(mm.get("rest", 0.0)),
        )  # fmt: skip
        keys = ("w0",) if e.fallback else ("u", "v", "s_ref") + (("w0",) if e.rest > 0 else ())
        for k in keys:
            key = f"{name}::{k}"
            if key not in tensors:
                raise ValueError(f"anchor in {path}: tensor {key} missing")
            setattr(e, k, tensors[key])
        entries.append(e)
    return entries, meta
