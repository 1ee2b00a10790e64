"""Test risks on the target task r*_kappa and the performance gap recovered (docs/w2s.md, "PGR").

PGR = (risk_weak - risk_w2s) / (risk_weak - risk_ceiling) (Burns et al. 2023, "Weak-to-strong generalization"):
0 when the strong model is no better than its weak teacher, 1 when it matches the ceiling, the strong model
trained on the true labels under the same input distribution and budget (mode "ceiling").

Risk of a predictor g on r*_kappa(x) = pi_kappa sigma*_kappa(theta_kappa^T x): the second layer of the strong model
is fixed (it is not learnt in the paper's model), so its raw output has an arbitrary scale. We therefore measure
every predictor (weak model, strong models) after the least-squares affine readout alpha g + beta fitted on one
fresh sample, and report the mean squared error on a second, independent fresh sample divided by the variance
of r*_kappa there: 0 is perfect, 1 is no better than a constant. The strong model's predictor for task kappa is
its kappa group, g(x) = sum_{j in group kappa} a_j sigma(w_j^T x); beside it, "MODE@link" reads the same first
layer out through the task's link, sum_j a_j sigma*_kappa(w_j^T x): with sigma = h2 + h4 and sigma* = h4 the
model as it is cannot go below risk 1/2 even at perfect alignment (its h2 part is unexplained variance), while
the first layer read through the link can reach 0, like the weak model (activation h4). Risks are measured on
x ~ N(0, I_d) and, beside it, on the generative distribution; standard errors are over test samples (and, for
the PGR's denominator, the larger of the paired per-sample and the between-seed standard error).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from anchorft.w2s.config import W2SConfig
from anchorft.w2s.hermite import get_activation
from anchorft.w2s.labels import draw_inputs, in_coords, weak_output
from anchorft.w2s.problem import Problem

__all__ = ["pgr", "readout_errors", "risk_report", "RISK_STREAMS"]

RISK_STREAMS = {"fit": 21, "test": 22}


def pgr(risk_weak: float, risk_strong: float, risk_ceiling: float) -> float:
    """Performance gap recovered (Burns et al. 2023): (risk_weak - risk_strong) / (risk_weak - risk_ceiling)."""
    den = risk_weak - risk_ceiling
    if den == 0:
        raise ZeroDivisionError("PGR undefined: the weak model's risk equals the ceiling's")
    return (risk_weak - risk_strong) / den


def readout_errors(g_fit: np.ndarray, t_fit: np.ndarray, g_test: np.ndarray, t_test: np.ndarray) -> np.ndarray:
    """Per-sample squared errors on the test sample of the affine readout alpha g + beta fitted by least squares
    on the fit sample, divided by the test targets' variance (their mean is the risk)."""
    a = np.stack([g_fit, np.ones_like(g_fit)], 1)
    coef, *_ = np.linalg.lstsq(a, t_fit, rcond=None)
    err = (coef[0] * g_test + coef[1] - t_test) ** 2
    return err / t_test.var()


def _outputs(
    config: W2SConfig, problem: Problem, xb: tuple[torch.Tensor, torch.Tensor | None], weights: dict[str, torch.Tensor]
) -> dict:
    """Predictor outputs (S, n), float64 NumPy, on inputs (x, basis) (see labels.generative_inputs): the weak model and
    each strong model's kappa group (own activation, and through the link); "_target" = r*_kappa."""
    x, basis = xb
    act = get_activation(config.activation)
    sel = problem.groups == 0
    a = problem.a[sel]
    link = get_activation(config.link)
    out = {"weak": weak_output(x, in_coords(problem.weak_u, basis), config.weak_activation, config.weak_bound)}
    for mode, w in weights.items():
        u = x @ in_coords(w[:, sel], basis).mT
        out[mode] = act.value(u) @ a
        out[f"{mode}@link"] = link.value(u) @ a
    z = (x @ in_coords(problem.thetas[:, :1], basis).mT).squeeze(-1)
    out["_target"] = config.pi[0] * link.value(z)
    return {k: v.double().cpu().numpy() for k, v in out.items()}


def _paired(e1: np.ndarray, e2: np.ndarray) -> tuple[float, float]:
    """Mean of e1 - e2 (S, n) (per-sample errors on the same inputs) over seeds and samples, and its standard error:
    the larger of the paired per-sample error and the between-seed error."""
    diff = e1 - e2
    n_seeds, n = diff.shape
    sample_se = math.sqrt(np.sum(diff.var(1, ddof=1) / n)) / n_seeds
    seed_se = float(diff.mean(1).std(ddof=1) / math.sqrt(n_seeds)) if n_seeds > 1 else 0.0
    return float(diff.mean()), max(sample_se, seed_se)


def risk_report(config: W2SConfig, problem: Problem, weights: dict[str, torch.Tensor]) -> dict:
    """Risks (mean over seeds, per seed, standard errors) of the weak model and of each strong model in `weights`
    (mode -> final first layer (S, N, d)) on "isotropic" and "generative" inputs, and the PGR of every strong mode
    against "ceiling" where the ceiling is present and its denominator exceeds three standard errors. Each predictor's
    gain over the weak model (risk_weak - risk, paired on the same inputs; `gain_over_weak`, `_se`) and whether it
    exceeds three standard errors (`surpasses_teacher`)."""
    report: dict = {
        "definition": "MSE of the affine readout (fitted on a separate fresh sample) / Var(r*_kappa)",
        "n_samples_per_seed": config.risk_samples,
    }
    for dist in ("isotropic", "generative"):
        n = config.risk_samples
        fit, test = (
            _outputs(config, problem, draw_inputs(config, problem, dist == "generative", n, RISK_STREAMS[p]), weights)
            for p in ("fit", "test")
        )
        errs = {}
        for name in ("weak", *weights, *(f"{m}@link" for m in weights)):
            errs[name] = np.stack(
                [
                    readout_errors(f, fit["_target"][i], t, test["_target"][i])
                    for i, (f, t) in enumerate(zip(fit[name], test[name]))
                ]
            )  # (S, n)
        entry: dict = {"risk": {}, "risk_se": {}, "risk_per_seed": {}, "pgr": {}}
        for name, e in errs.items():
            per_seed = e.mean(1)
            entry["risk"][name] = float(per_seed.mean())
            entry["risk_per_seed"][name] = [float(v) for v in per_seed]
            entry["risk_se"][name] = float(math.sqrt(np.sum(e.var(1, ddof=1) / n)) / len(per_seed))
        # the strong models against their teacher, paired on the same test inputs: gain = risk_weak - risk_mode
        entry["gain_over_weak"], entry["gain_over_weak_se"], entry["surpasses_teacher"] = {}, {}, {}
        for name in errs:
            if name == "weak":
                continue
            gain, gain_se = _paired(errs["weak"], errs[name])
            entry["gain_over_weak"][name], entry["gain_over_weak_se"][name] = gain, gain_se
            entry["surpasses_teacher"][name] = bool(gain > 3.0 * gain_se)
        entry["pgr_denominator"], entry["pgr_denominator_se"] = {}, {}
        for suffix in ("", "@link"):
            ceil = f"ceiling{suffix}"
            if ceil not in errs:
                continue
            den, den_se = _paired(errs["weak"], errs[ceil])
            entry["pgr_denominator"][ceil], entry["pgr_denominator_se"][ceil] = den, den_se
            for mode in weights:
                name = f"{mode}{suffix}"
                if mode == "ceiling":
                    continue
                ok = den > 3.0 * den_se
                entry["pgr"][name] = (
                    pgr(entry["risk"]["weak"], entry["risk"][name], entry["risk"][ceil]) if ok else None
                )
        report[dist] = entry
    return report
