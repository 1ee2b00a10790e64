"""Pure maths of the rotation-preserving anchor (Jin et al., arXiv:2605.10973, Sec. 3).

Written once, at package level (it imports torch only), and shared: `anchorft.rpsft.anchor.SubspaceAnchor`
applies it to every weight of a transformer, the weak-to-strong simulator (`anchorft.w2s`) applies it
to the first-layer matrix of its two-layer network, and the geometry analysis takes its SVD from
`top_k_bases`. Notation follows the paper: W_0 (m x n) the pretrained weight, U_0 (m x k) and V_0 (n x k)
its top-k left and right singular vectors, S_ref = U_0^T W_0 V_0 (k x k; equal to
diag(sigma_1..sigma_k) for an exact SVD).

    R(W)   = || U_0^T (W - W_0) V_0 ||_F^2 = || U_0^T W V_0 - S_ref ||_F^2          (penalty, eq. 3)
    dR/dW  = 2 U_0 (U_0^T W V_0 - S_ref) V_0^T                                      (its gradient)

Rotation-bounding variant ("subspace" kind): with D = W - W_0, P_U = U_0 U_0^T, P_V = V_0 V_0^T,

    R_sub(W) = ||U_0^T D||_F^2 + ||D V_0||_F^2 - ||U_0^T D V_0||_F^2 = ||D||_F^2 - ||(I - P_U) D (I - P_V)||_F^2
    dR_sub/dW = 2 (P_U D + D P_V - P_U D P_V)

the drift seen by the whole top-k column and row spaces (the k x k block and both off-diagonal blocks, the
block counted once). Without W_0: U_0^T W_0 = S_ref V_0^T and W_0 V_0 = U_0 S_ref for an exact SVD (up to the
recorded SVD residual for a randomized one), so it needs the same U_0, V_0, S_ref as the block penalty.

The block covers the column space of U_0 and the row space of V_0 only: for k = min(m, n) it is the whole
matrix, R(W) = || W - W_0 ||_F^2, only when W_0 is square and of full rank (`SubspaceAnchor` therefore
stores W_0 and uses the L2 penalty itself whenever k >= min(m, n)).
All functions accept leading batch dimensions (e.g. seeds) and compute in the dtype they receive.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

__all__ = [
    "l2_residual",
    "l2_penalty",
    "top_k_bases",
    "reference_block",
    "block_residual",
    "subspace_penalty_grad",
    "rotation_residuals",
    "rotation_penalty",
    "energy_rank",
    "cumulative_block_energy",
]


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
    # the sketch is drawn where the generator lives, then moved: a CPU generator works for CUDA weights and gives
    # the same sketch on every device
    gen_device = generator.device if generator is not None else w0.device
    omega = torch.randn(*w0.shape[:-2], n, p, dtype=w0.dtype, device=gen_device, generator=generator).to(w0.device)
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
    return 2.0 * (u @ block_residual(w, u, v, s_ref) @ v.mT)


def l2_residual(w: torch.Tensor, w0: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """D = W - W_0 in `dtype` (a fresh tensor, the only one made: W cast or copied once, W_0 subtracted in place,
    whatever dtype each is stored in)."""
    d = w.detach().to(dtype, copy=True)
    return d.sub_(w0.detach())


class _L2Penalty(torch.autograd.Function):
    """||W - W_0||_F^2 whose backward recomputes D = W - W_0 (see `l2_penalty`)."""

    @staticmethod
    def forward(ctx, w, w0, dtype, regather):
        ctx.dtype, ctx.regather = dtype, regather
        ctx.save_for_backward(w, w0)  # the weight and W_0 themselves: no new tensor is kept
        return l2_residual(w, w0, dtype).square_().sum()

    @staticmethod
    def backward(ctx, grad):
        with ctx.regather() if ctx.regather is not None else contextlib.nullcontext():
            w, w0 = ctx.saved_tensors  # unpacked while whole
            d = l2_residual(w, w0, ctx.dtype)
        d.mul_(2.0 * grad.to(ctx.dtype))
        return (d if d.dtype == w.dtype else d.to(w.dtype)), None, None, None


def l2_penalty(
    w: torch.Tensor,
    w0: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    regather: Callable[[], AbstractContextManager] | None = None,
) -> torch.Tensor:
    """R = ||W - W_0||_F^2 (a scalar in `dtype`, summed over every element), differentiable in W:
    dR/dW = 2 (W - W_0), cast to W's dtype.

    Unlike autograd of `(w - w0).pow(2).sum()`, which keeps D = W - W_0 (one matrix in `dtype`) from the forward to
    the backward, this keeps only references to W and W_0 and recomputes D in the backward: the forward and the
    backward each make one transient matrix. `regather`, if given, is entered around that recomputation, for a
    weight that is whole only inside it (a DeepSpeed ZeRO-3 parameter, partitioned again after the forward)."""
    return _L2Penalty.apply(w, w0, dtype, regather)


def rotation_residuals(
    w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, s_ref: torch.Tensor, w0: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A, B, C) = (U_0^T D (k x n), D V_0 (m x k), U_0^T D V_0 (k x k)) for D = W - W_0.

    With `w0` they are formed from D itself; without it, from U_0^T W_0 = S_ref V_0^T and W_0 V_0 = U_0 S_ref
    (exact for an exact SVD, whose S_ref is diag(sigma))."""
    w = w.to(u.dtype)
    if w0 is not None:
        d = w - w0.to(u.dtype)
        a, b = u.mT @ d, d @ v
    else:
        a, b = u.mT @ w - s_ref @ v.mT, w @ v - u @ s_ref
    return a, b, a @ v


def rotation_penalty(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """R_sub = ||U_0^T D||_F^2 + ||D V_0||_F^2 - ||U_0^T D V_0||_F^2 from `rotation_residuals`' (A, B, C)."""
    dims = (-2, -1)
    return a.pow(2).sum(dim=dims) + b.pow(2).sum(dim=dims) - c.pow(2).sum(dim=dims)


def energy_rank(s: torch.Tensor, fraction: float) -> int:
    """The smallest k whose top-k squared singular values hold `fraction` of sum_i sigma_i^2 = ||W_0||_F^2.

    `s`: all min(m, n) singular values (descending). fraction 0 gives 0 (nothing anchored); fraction 1 gives
    min(m, n) (the whole matrix, whatever the numerical rank)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"energy fraction must be in [0, 1], got {fraction}")
    if fraction == 0.0:
        return 0
    if fraction == 1.0:
        return int(s.shape[-1])
    cum = torch.cumsum(s.to(torch.float64).pow(2), dim=-1)
    return int(torch.searchsorted(cum, fraction * cum[-1]).item()) + 1


def cumulative_block_energy(g: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """e (r,) with e[k - 1] = ||U[:, :k]^T G V[:, :k]||_F^2 for k = 1..r (nested blocks, one product U^T G V)."""
    a2 = (u.mT @ g.to(u.dtype) @ v).pow(2)
    r = a2.shape[-1]
    # block k adds row k-1 (columns < k) and column k-1 (rows <= k-1)
    rows = torch.stack([a2[i, : i + 1].sum() + a2[:i, i].sum() for i in range(r)])
    return torch.cumsum(rows, dim=0)
