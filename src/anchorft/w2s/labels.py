"""The W2S label model: what the strong model is trained on (docs/w2s.md, "Labels: what the strong
model is trained on").

W2S labels are y = T(clip(f_weak(x))) - m, with

- f_weak(x) = mean_j sigma_w(u_j^T x), the weak model; with `weak_bound` = b > 0 its output is bounded,
  f_weak -> b tanh(f_weak / b), so that T(y) = y exp(y) has finite moments without a clip;
- T the label transformation (`transform`: zexp, identity), clip(., -clip, clip) when clip > 0;
- m the centring (`label_center`): 0 ("none") or the labels' mean on the generative distribution ("mean"),
  estimated per seed from `center_samples` inputs drawn from their own random stream (independent of training);
- `weak_norm`: "planted" keeps the planted weak neurons u_j = b theta_kappa + sqrt(1 - b^2) xi_j with xi_j random
  in R^d (their norm inside V_kappa, ||B^T u_j||, is below 1: about 0.956 at d = 1024, s = 128, b = 0.95); "unit"
  moves xi_j's direction into V_kappa (xi_j -> P xi_j / ||P xi_j||, P = B B^T), keeping each neuron's alignment
  with theta_kappa, so that ||B^T u_j|| = 1 and u_j^T x ~ N(0, 1) on the generative distribution at lambda = 1.

The labels' measured Hermite coefficients along theta_kappa (`anchorft.w2s.hermite.measured_coefficients`,
c_n = E[y He_n(z)] / n!, z = theta_kappa^T x) are what the dynamics sees; `label_report` gives them with
standard errors, per mode.
"""

from __future__ import annotations

import numpy as np
import torch

from anchorft import stop
from anchorft.w2s.config import W2SConfig
from anchorft.w2s.hermite import get_activation, measured_coefficients
from anchorft.w2s.problem import Problem
from anchorft.w2s.sampling import generative_dense, generative_reduced, isotropic, make_generators

__all__ = [
    "CENTER_STREAM",
    "REPORT_STREAM",
    "weak_output",
    "transform_labels",
    "w2s_labels",
    "unit_weak_in_subspace",
    "generative_inputs",
    "draw_inputs",
    "in_coords",
    "label_mean",
    "label_report",
]

CENTER_STREAM = 11  # random streams of make_generators, apart from the training streams (1-3)
REPORT_STREAM = 12
N_HERMITE = 6


def weak_output(x: torch.Tensor, weak_first: torch.Tensor, activation: str, bound: float = 0.0) -> torch.Tensor:
    """f_weak(x) = mean_j sigma_w(u_j^T x) for x (..., S, b, dim), U (S, M, dim); with bound > 0,
    b tanh(f_weak / b) (bounded in (-b, b), about f_weak where |f_weak| << b)."""
    f = get_activation(activation).value(x @ weak_first.mT).mean(-1)
    return bound * torch.tanh(f / bound) if bound > 0 else f


def transform_labels(f: torch.Tensor, transform: str, clip: float) -> torch.Tensor:
    """T(clip(f, -clip, clip)) (no clip when clip <= 0); T is "zexp" (y exp(y)) or "identity"."""
    if clip > 0:
        f = f.clamp(-clip, clip)
    if transform == "zexp":
        return f * torch.exp(f)
    if transform == "identity":
        return f
    raise ValueError(f"unknown transform {transform!r}")


def unit_weak_in_subspace(weak_u: torch.Tensor, theta0: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Weak neurons with unit norm inside V_kappa and the same alignment: u = a theta + sqrt(1 - a^2) xi with
    a = u^T theta, xi -> P xi / ||P xi|| (P = B B^T). weak_u (S, M, d), theta0 (S, d), basis (S, d, s)."""
    a = (weak_u @ theta0.unsqueeze(-1)).squeeze(-1)  # (S, M)
    xi = weak_u - a.unsqueeze(-1) * theta0.unsqueeze(1)
    pxi = (xi @ basis) @ basis.mT
    pxi = pxi - (pxi @ theta0.unsqueeze(-1)) * theta0.unsqueeze(1)  # theta0 is in V_kappa: stays orthogonal
    norm = pxi.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    rest = torch.sqrt((1.0 - a * a).clamp_min(0.0)).unsqueeze(-1)
    return a.unsqueeze(-1) * theta0.unsqueeze(1) + rest * pxi / norm


def generative_inputs(
    config: W2SConfig, problem: Problem, n: int, stream: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """n inputs per seed from the generative distribution, from random stream `stream`: (x, None) with x (S, n, d),
    or at lambda = 1 (z, B) with coordinates z (S, n, s) of x = B z (a first layer W acts as z (W B)^T: `in_coords`).
    """
    dev, dtype = problem.w0.device, problem.w0.dtype
    gens = make_generators(problem.seeds, stream, dev)
    b0 = problem.bases[:, 0]
    if config.lambda_kappa == 1.0:
        return generative_reduced(gens, config.s, 1, n, dtype, dev)[0], b0  # (S, n, s)
    return generative_dense(gens, b0, config.lambda_kappa, 1, n)[0], None


def draw_inputs(
    config: W2SConfig, problem: Problem, generative: bool, n: int, stream: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """n inputs per seed from random stream `stream`: `generative_inputs`, or isotropic (x, None), x (S, n, d)."""
    if generative:
        return generative_inputs(config, problem, n, stream)
    gens = make_generators(problem.seeds, stream, problem.w0.device)
    return isotropic(gens, 1, n, config.d, problem.w0.dtype, problem.w0.device)[0], None


def in_coords(first_layer: torch.Tensor, basis: torch.Tensor | None) -> torch.Tensor:
    """A first layer (S, M, d) in the coordinates of `generative_inputs` (W B when the inputs are x = B z)."""
    return first_layer if basis is None else first_layer @ basis


def w2s_labels(config: W2SConfig, x: torch.Tensor, weak_first: torch.Tensor) -> torch.Tensor:
    """The uncentred W2S labels T(clip(f_weak(x))) (bounded weak output when weak_bound > 0), weak first layer
    `weak_first` in the coordinates of x; the simulator subtracts its centre (label_mean) from these."""
    f = weak_output(x, weak_first, config.weak_activation, config.weak_bound)
    return transform_labels(f, config.transform, config.clip)


def _raw_w2s_labels(config: W2SConfig, problem: Problem, x: torch.Tensor, basis: torch.Tensor | None) -> torch.Tensor:
    return w2s_labels(config, x, in_coords(problem.weak_u, basis))


def label_mean(config: W2SConfig, problem: Problem) -> torch.Tensor:
    """Per seed (S,): the mean of T(clip(f_weak)) on `center_samples` generative inputs from CENTER_STREAM
    (independent of the training inputs); drawn in blocks of 8192."""
    total = torch.zeros(problem.n_seeds, dtype=torch.float64, device=problem.w0.device)
    done, block = 0, 8192
    while done < config.center_samples:
        stop.check()  # a safe point per block (anchorft.stop)
        n = min(block, config.center_samples - done)
        x, basis = generative_inputs(config, problem, n, CENTER_STREAM * 1000 + done // block)
        total += _raw_w2s_labels(config, problem, x, basis).double().sum(-1)
        done += n
    return (total / config.center_samples).to(problem.w0.dtype)


def _mode_samples(
    config: W2SConfig, problem: Problem, mode: str, n: int, center: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, y) per seed (S, n): z = theta_kappa^T x and the labels the mode trains on."""
    x, basis = draw_inputs(config, problem, mode in ("w2s", "ceiling"), n, REPORT_STREAM)
    z = (x @ in_coords(problem.thetas[:, :1], basis).mT).squeeze(-1)  # theta_kappa^T x
    if mode == "w2s":
        y = _raw_w2s_labels(config, problem, x, basis)
        if center is not None:
            y = y - center.unsqueeze(-1)
    else:
        y = config.pi[0] * get_activation(config.link).value(z)
    return z, y


def label_report(config: W2SConfig, problem: Problem, mode: str, center: torch.Tensor | None = None) -> dict:
    """The `labels` entry of a mode in metrics.json, on `label_samples` fresh inputs per seed of the mode's input
    distribution (generative for w2s and ceiling, isotropic for sft): mean and variance (ddof=1) of the labels,
    and their Hermite coefficients c_n = E[y He_n(z)] / n! along z = theta_kappa^T x, n = 0..6, with standard
    errors, pooled over seeds (the coefficients do not depend on the seed's geometry) and per seed."""
    z, y = _mode_samples(config, problem, mode, config.label_samples, center)
    zn, yn = z.double().cpu().numpy(), y.double().cpu().numpy()
    c, se = measured_coefficients(zn, yn, N_HERMITE)
    per_seed = [measured_coefficients(zn[i], yn[i], N_HERMITE)[0] for i in range(zn.shape[0])]
    return {
        "normalisation": "c_n = E[y He_n(z)] / n!, z = theta_kappa^T x",
        "n_samples_per_seed": config.label_samples,
        "center": None if center is None else [float(v) for v in center.cpu()],
        "mean": float(yn.mean()),
        "mean_se": float(yn.std(ddof=1) / np.sqrt(yn.size)),
        "var": float(yn.var(ddof=1)),
        "hermite": [float(v) for v in c],
        "hermite_se": [float(v) for v in se],
        "hermite_per_seed": [[float(v) for v in row] for row in per_seed],
    }
