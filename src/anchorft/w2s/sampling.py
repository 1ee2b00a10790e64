"""Input samplers, batched over seeds, with one explicit torch.Generator per seed.

Each seed draws its own noise for a chunk of steps at once, so that a batched run over seeds and a loop over
single seeds consume the same random streams. Shapes: (chunk, S, batch, dim).

- isotropic: x ~ N(0, I_d);
- generative (dense): x ~ N(0, B B^T + (1 - lambda)(I - B B^T)), drawn as x = (sqrt(1 - lambda)(I - P) + P) g,
  g ~ N(0, I_d), P = B B^T; its covariance is P + (1 - lambda)(I - P);
- generative at lambda = 1 (reduced): z ~ N(0, I_s), x = B z; only s-dim Gaussians are drawn and the
  dynamics never forms x (work O(s N) per sample).
"""

from __future__ import annotations

import torch

__all__ = ["make_generators", "gaussian_chunk", "isotropic", "generative_dense", "generative_reduced"]


def make_generators(seeds: list[int], stream: int, device: torch.device) -> list[torch.Generator]:
    """One generator per seed; `stream` separates independent uses (W2S, SFT, weak training) of one seed."""
    return [torch.Generator(device=device).manual_seed(int(s) * 1_000_003 + 7919 * int(stream)) for s in seeds]


def gaussian_chunk(
    gens: list[torch.Generator],
    chunk: int,
    batch: int,
    dim: int,
    dtype: torch.dtype,
    device: torch.device,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Standard Gaussians (chunk, S, batch, dim), seed i drawn from gens[i].

    With `out` (S, >= chunk, batch, dim), the draws are written into out[:, :chunk] (no new memory, the same numbers)
    and a (chunk, S, batch, dim) view of it is returned.
    """
    if out is None:
        return torch.stack(
            [torch.randn((chunk, batch, dim), generator=g, dtype=dtype, device=device) for g in gens], 1
        )
    if out.shape[0] != len(gens) or out.shape[1] < chunk or tuple(out.shape[2:]) != (batch, dim):
        raise ValueError(f"out must have shape ({len(gens)}, >= {chunk}, {batch}, {dim}), got {tuple(out.shape)}")
    for i, g in enumerate(gens):
        torch.randn((chunk, batch, dim), generator=g, dtype=out.dtype, device=out.device, out=out[i, :chunk])
    return out[:, :chunk].transpose(0, 1)


def isotropic(
    gens: list[torch.Generator], chunk: int, batch: int, d: int, dtype, device, out: torch.Tensor | None = None
) -> torch.Tensor:
    """x ~ N(0, I_d): (chunk, S, batch, d) (into `out`, see gaussian_chunk)."""
    return gaussian_chunk(gens, chunk, batch, d, dtype, device, out)


def generative_dense(
    gens: list[torch.Generator], basis: torch.Tensor, lam: float, chunk: int, batch: int
) -> torch.Tensor:
    """x ~ N(0, B B^T + (1 - lam)(I - B B^T)) with basis B (S, d, s): (chunk, S, batch, d)."""
    d = basis.shape[-2]
    g = gaussian_chunk(gens, chunk, batch, d, basis.dtype, basis.device)
    alpha = (1.0 - lam) ** 0.5
    pg = (g @ basis) @ basis.mT  # P g
    return alpha * g + (1.0 - alpha) * pg


def generative_reduced(
    gens: list[torch.Generator], s: int, chunk: int, batch: int, dtype, device, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Coordinates z ~ N(0, I_s) of x = B z at lambda = 1: (chunk, S, batch, s) (into `out`, see gaussian_chunk)."""
    return gaussian_chunk(gens, chunk, batch, s, dtype, device, out)
