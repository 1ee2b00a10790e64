"""Rotation of the dominant singular subspaces under fine-tuning (RPSFT paper, Sec. 2 and Fig. 1).

For a pretrained weight W_0 and its fine-tuned version W (both m x n), with U_0, V_0 and U, V their
top-k left and right singular vectors (from `anchorft.subspace.top_k_bases`), the principal
angles theta_1 <= ... <= theta_k between span(U_0) and span(U) satisfy cos theta_i = sigma_i(U_0^T U)
(Bjorck and Golub 1973). Small angles are computed from sines, sin theta_i = sigma_i((I - U_0 U_0^T) U),
as in Knyazev and Argentati (2002) and `scipy.linalg.subspace_angles`, because arccos loses precision
near 1.

Alongside the angles: the relative change of the top-k singular values, ||s - s_0|| / ||s_0|| (do the
values stay while the vectors rotate?), the relative change of the weight, ||W - W_0||_F / ||W_0||_F,
and the share of the update inside the pretrained top-k block, ||U_0^T (W - W_0) V_0||_F^2 /
||W - W_0||_F^2, which is what the RPSFT penalty (eq. 3) drives to zero.
"""

from __future__ import annotations

import math

import torch

from anchorft.subspace import reference_block, top_k_bases

__all__ = ["principal_angles", "vector_angles", "rotation_stats", "bases"]


def principal_angles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Principal angles (radians, ascending, float64) between the column spans of orthonormal a (m x p), b (m x q).

    Returns min(p, q) angles. cos theta = singular values of a^T b; sin theta = singular values of the
    part of the smaller basis outside the larger one; each angle is taken from whichever is better
    conditioned (arcsin where cos^2 >= 1/2).
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bases must be 2-D with the same number of rows, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.double(), b.double()
    if a.shape[1] < b.shape[1]:
        a, b = b, a  # a is the larger basis
    c = a.mT @ b  # (p, q)
    cos = torch.linalg.svdvals(c).clamp(-1.0, 1.0)  # descending -> angles ascending
    sin = torch.linalg.svdvals(b - a @ c).clamp(-1.0, 1.0).flip(0)  # ascending -> angles ascending
    return torch.where(cos.pow(2) >= 0.5, torch.arcsin(sin), torch.arccos(cos))


def vector_angles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angle between the i-th columns of a and b, arccos |<a_i, b_i>| in [0, pi/2] (sign-free, float64)."""
    dots = (a.double() * b.double()).sum(0).abs().clamp(max=1.0)
    return torch.arccos(dots)


def bases(w: torch.Tensor, k: int, svd: str = "exact", dtype: torch.dtype = torch.float64, generator=None):
    """Top-k (U, S, V) of w computed in `dtype` through `top_k_bases` (the project's single SVD entry point).

    The returned bases are compact copies, so the full SVD factors (as large as w) are freed on return.
    """
    m, n = w.shape
    if k > min(m, n):
        raise ValueError(f"rank k={k} exceeds min(m, n)={min(m, n)} of a {m} x {n} matrix")
    u, s, v = top_k_bases(w.to(dtype), k, svd=svd, generator=generator)
    return u.clone(memory_format=torch.contiguous_format), s.clone(), v.clone(memory_format=torch.contiguous_format)


def _update_energies(w0: torch.Tensor, w: torch.Tensor, u0, v0, dtype, rows: int = 4096) -> tuple[float, float]:
    """(||W - W_0||_F^2, ||U_0^T (W - W_0) V_0||_F^2), reading the difference in row chunks of `rows`.

    U_0^T dW V_0 = sum over row blocks c of U_0[c]^T dW[c] V_0 (`reference_block` of each block), so no
    full-size copy of the difference is made.
    """
    delta2 = 0.0
    blk = torch.zeros(u0.shape[1], v0.shape[1], dtype=dtype, device=u0.device)
    for i in range(0, w0.shape[0], rows):
        d = w[i : i + rows].to(dtype) - w0[i : i + rows].to(dtype)
        delta2 += d.pow(2).sum().item()
        blk += reference_block(d, u0[i : i + rows], v0)
    return delta2, blk.pow(2).sum().item()


def _norm(w: torch.Tensor, dtype: torch.dtype, rows: int = 4096) -> float:
    return math.sqrt(sum(w[i : i + rows].to(dtype).pow(2).sum().item() for i in range(0, w.shape[0], rows)))


def rotation_stats(
    w0: torch.Tensor,
    w: torch.Tensor,
    k: int,
    svd: str = "exact",
    dtype: torch.dtype = torch.float64,
    generator: torch.Generator | None = None,
    base_bases: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> dict:
    """Rotation of the top-k singular subspaces from w0 to w, as a dict of floats and per-index lists.

    Keys: angle_u_mean_deg / angle_u_max_deg / angle_v_*: principal angles of the left / right
    subspaces; overlap_u / overlap_v = ||U_0^T U||_F^2 / k (1 = same subspace); sv_rel_change;
    weight_rel_change; block_share_of_update; and per index i <= k: sv_ratio[i] = s_i / s0_i,
    vec_angle_u_deg[i] / vec_angle_v_deg[i] = angle between the i-th singular vectors.
    `base_bases` = bases(w0, k, ...) when already computed (the base is shared by several tuned models).
    """
    if w0.shape != w.shape:
        raise ValueError(f"weights differ in shape: {tuple(w0.shape)} vs {tuple(w.shape)}")
    u0, s0, v0 = base_bases if base_bases is not None else bases(w0, k, svd, dtype, generator)
    u1, s1, v1 = bases(w, k, svd, dtype, generator)
    au, av = principal_angles(u0, u1), principal_angles(v0, v1)
    delta2, block = _update_energies(w0, w, u0, v0, dtype)
    s0d, s1d = s0.double(), s1.double()
    deg = 180.0 / math.pi
    return {
        "angle_u_mean_deg": au.mean().item() * deg,
        "angle_u_max_deg": au.max().item() * deg,
        "angle_v_mean_deg": av.mean().item() * deg,
        "angle_v_max_deg": av.max().item() * deg,
        "overlap_u": (u0.double().mT @ u1.double()).pow(2).sum().item() / k,
        "overlap_v": (v0.double().mT @ v1.double()).pow(2).sum().item() / k,
        "sv_rel_change": ((s1d - s0d).norm() / s0d.norm()).item(),
        "weight_rel_change": math.sqrt(delta2) / max(_norm(w0, dtype), 1e-30),
        "block_share_of_update": block / delta2 if delta2 > 0 else 0.0,
        "sv_ratio": (s1d / s0d.clamp_min(1e-30)).tolist(),
        "vec_angle_u_deg": (vector_angles(u0, u1) * deg).tolist(),
        "vec_angle_v_deg": (vector_angles(v0, v1) * deg).tolist(),
    }
