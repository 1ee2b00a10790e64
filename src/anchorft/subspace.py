"""Pure maths of the rotation-preserving anchor (Jin et al., arXiv:2605.10973, Sec. 3).

Written once, at package level (it imports torch only), and shared: `anchorft.rpsft.anchor.SubspaceAnchor`
applies it to every weight of a transformer, the weak-to-strong simulator (`anchorft.w2s`) applies it
to the first-layer matrix of its two-layer network, and the geometry analysis takes its SVD from
`top_k_bases`. Notation follows the paper: W_0 (m x n) the pretrained weight, U_0 (m x k) and V_0 (n x k)
its top-k left and right singular vectors, S_ref = U_0^T W_0 V_0 (k x k; equal to
diag(sigma_1..sigma_k) for an exact SVD).

    R(W)   = || U_0^T (W - W_0) V_0 ||_F^2 = || U_0^T W V_0 - S_ref ||_F^2          (penalty, eq. 3)
    dR/dW  = 2 U_0 (U_0^T W V_0 - S_ref) V_0^T                                      (its gradient)

The block covers the column space of U_0 and the row space of V_0 only: for k = min(m, n) it is the whole
matrix, R(W) = || W - W_0 ||_F^2, only when W_0 is square and of full rank (`SubspaceAnchor` therefore
stores W_0 and uses the L2 penalty itself whenever k >= min(m, n)).
All functions accept leading batch dimensions (e.g. seeds) and compute in the dtype they receive.
"""

from __future__ import annotations

import torch

__all__ = ["top_k_bases", "reference_block", "block_residual", "subspace_penalty_grad"]


def top_k_bases(
    w0: torch.Tensor,
    k: int,
    svd: str = "exact",
    oversample: int = 10,
    n_iter: int = 4,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k singular triplets of W_0 (..., m, n): returns U_k (..., m, k), S_k (..., k), V_k (..., n, k).

    `svd="exact"` uses `torch.linalg.svd`; `svd="randomized"` uses the randomized range finder of
    Halko, Martinsson and Tropp (2011, Alg. 4.4) with `oversample` extra columns and `n_iter` power
    iterations, seeded by `generator` (deterministic for a given generator state).
    """
    if k < 1:
        raise ValueError(f"rank k must be >= 1, got {k}")
    m, n = w0.shape[-2], w0.shape[-1]
    k = min(k, m, n)
    if svd == "exact":
        u, s, vh = torch.linalg.svd(w0, full_matrices=False)
        return u[..., :k], s[..., :k], vh[..., :k, :].mT
    if svd != "randomized":
        raise ValueError(f"svd must be 'exact' or 'randomized', got {svd!r}")
    p = min(k + oversample, m, n)
    omega = torch.randn(*w0.shape[:-2], n, p, dtype=w0.dtype, device=w0.device, generator=generator)
    q, _ = torch.linalg.qr(w0 @ omega)  # (..., m, p): approximate range of W_0
    for _ in range(n_iter):  # power iterations sharpen the spectrum; QR each time for stability
        q, _ = torch.linalg.qr(w0.mT @ q)
        q, _ = torch.linalg.qr(w0 @ q)
    ub, s, vh = torch.linalg.svd(q.mT @ w0, full_matrices=False)  # small (p x n) problem
    return (q @ ub)[..., :k], s[..., :k], vh[..., :k, :].mT


def reference_block(w0: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """S_ref = U_0^T W_0 V_0 (..., k, k): the pretrained weight seen inside the top-k block."""
    return u.mT @ w0 @ v


def block_residual(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, s_ref: torch.Tensor) -> torch.Tensor:
    """D = U_0^T W V_0 - S_ref (..., k, k): the drift of W inside the pretrained top-k block."""
    return u.mT @ w.to(u.dtype) @ v - s_ref


def subspace_penalty_grad(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, s_ref: torch.Tensor) -> torch.Tensor:
    """dR/dW = 2 U_0 (U_0^T W V_0 - S_ref) V_0^T (..., m, n), in closed form: no autograd graph."""
    d = block_residual(w, u, v, s_ref)
    return 2.0 * (u @ d @ v.mT)
