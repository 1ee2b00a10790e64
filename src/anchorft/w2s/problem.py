"""Geometry, strong-model initialisation and the planted weak model, built per seed (docs/w2s.md, "Model").

Task 0 is the target kappa. For S seeds everything is stacked on a leading seed axis:

- V_kappa: a random s-dim subspace (orthonormal basis B_0, d x s), theta_0 uniform on its unit sphere;
- task k >= 1: theta_k = rho theta_0 + sqrt(1 - rho^2) u_k with u_k orthogonal to V_kappa, and
  V_k = span(theta_k, s - 1 directions orthogonal to V_kappa and to the other V_j); rho = 0 gives V_k
  orthogonal to V_kappa (needs n_tasks * s <= d);
- strong model: N_k neurons per task; target neurons uniform on the unit sphere of V_kappa (alignment
  ~ s^{-1/2}), non-target neurons w = a theta_k + sqrt(1 - a^2) v, v a random unit vector of V_k orthogonal to
  theta_k (a = pretrained_alignment); fixed second layer a_j = c pi_k / N_k;
- planted weak model: u_j = b theta_0 + sqrt(1 - b^2) xi_j, xi_j random unit vectors orthogonal to theta_0 in R^d.

Construction is in float64 NumPy with `np.random.default_rng([seed, 0])` (explicit per seed), then cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from anchorft.w2s.config import W2SConfig

__all__ = ["Problem", "build_problem", "seeds_of"]


@dataclass
class Problem:
    """Per-seed geometry and initial weights (leading axis: seed)."""

    seeds: list[int]
    thetas: torch.Tensor  # (S, K, d) unit directions theta_k
    bases: torch.Tensor  # (S, K, d, s) orthonormal bases of V_k
    w0: torch.Tensor  # (S, N, d) initial strong first layer (unit rows)
    groups: torch.Tensor  # (N,) task index of each strong neuron
    a: torch.Tensor  # (N,) fixed second layer c pi_k / N_k
    weak_u: torch.Tensor  # (S, M, d) weak model first layer (unit rows)

    @property
    def n_seeds(self) -> int:
        return self.thetas.shape[0]


def seeds_of(config: W2SConfig) -> list[int]:
    return [config.seed + i for i in range(config.n_seeds)]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _one_seed(config: W2SConfig, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0])
    d, s, K = config.d, config.s, config.n_tasks
    q, _ = np.linalg.qr(rng.standard_normal((d, K * s)))  # K*s orthonormal directions
    b0 = q[:, :s]
    theta0 = b0 @ _unit(rng.standard_normal(s))
    thetas, bases = [theta0], [b0]
    for k in range(1, K):
        u = q[:, k * s]
        th = config.rho * theta0 + np.sqrt(1.0 - config.rho**2) * u
        thetas.append(th)
        bases.append(np.concatenate([th[:, None], q[:, k * s + 1 : (k + 1) * s]], axis=1))
    ws = [_unit(rng.standard_normal((config.group_sizes[0], s))) @ b0.T]
    for k in range(1, K):
        n = config.group_sizes[k]
        rest = bases[k][:, 1:]  # orthonormal, orthogonal to theta_k
        v = _unit(rng.standard_normal((n, s - 1))) @ rest.T if s > 1 else np.zeros((n, d))
        al = config.pretrained_alignment
        ws.append(al * thetas[k][None, :] + np.sqrt(1.0 - al**2) * v)
    xi = rng.standard_normal((config.weak_neurons, d))
    xi = _unit(xi - np.outer(xi @ theta0, theta0))
    b = config.weak_alignment
    weak = b * theta0[None, :] + np.sqrt(1.0 - b**2) * xi
    return {
        "thetas": np.stack(thetas),
        "bases": np.stack(bases),
        "w0": _unit(np.concatenate(ws)),
        "weak_u": _unit(weak),
    }


def build_problem(config: W2SConfig, device: str | torch.device | None = None) -> Problem:
    """Build the problem for seeds config.seed .. config.seed + n_seeds - 1, on `device` in config.dtype."""
    device = torch.device(device or config.device)
    dtype = getattr(torch, config.dtype)
    seeds = seeds_of(config)
    parts = [_one_seed(config, s) for s in seeds]

    def stack(key: str) -> torch.Tensor:
        return torch.from_numpy(np.stack([p[key] for p in parts])).to(device=device, dtype=dtype)

    groups = torch.cat([torch.full((n,), k, dtype=torch.long) for k, n in enumerate(config.group_sizes)])
    a = torch.tensor(
        [config.c * config.pi[k] / config.group_sizes[k] for k in groups.tolist()], dtype=dtype, device=device
    )
    return Problem(
        seeds=seeds,
        thetas=stack("thetas"),
        bases=stack("bases"),
        w0=stack("w0"),
        groups=groups.to(device),
        a=a,
        weak_u=stack("weak_u"),
    )
