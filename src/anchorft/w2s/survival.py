"""Censored log-normal regression of hitting times (a parametric survival model; docs/w2s-scaling.md).

A scaling point x (s or d) gives, per seed, the samples T_i until the target alignment reaches a threshold, or
only the knowledge T_i > c_i when the run hit its budget c_i (right-censored). The model is

    log T_i = alpha + beta log x_i + sigma eps_i,   eps_i ~ N(0, 1)   (log-normal accelerated failure time),

fitted by maximum likelihood with each censored seed contributing log P(T_i > c_i) = log Phi_bar((log c_i -
mu_i) / sigma) (`scipy.stats.norm.logsf`) instead of being dropped or replaced by its budget. The interval on the
slope beta is the profile-likelihood interval {beta : 2 (l_max - l_prof(beta)) <= chi2_1(level)}, which stays
valid when many points are censored (a Wald interval from the curvature does not).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

__all__ = ["censored_lognormal_loglik", "censored_lognormal_grad", "fit_censored_lognormal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _sigma(log_sigma: float) -> float:
    """exp(log sigma), inf past the float range instead of math.exp's OverflowError: an optimiser's trial step to a
    huge log sigma then scores as the limit (z = 0, log-likelihood -n_observed log sigma) and is stepped back from."""
    with np.errstate(over="ignore"):
        return float(np.exp(log_sigma))


def censored_lognormal_loglik(params: np.ndarray, log_x: np.ndarray, log_t: np.ndarray, observed: np.ndarray) -> float:
    """Log-likelihood of (alpha, beta, log sigma): sum over observed of log N(log t; mu, sigma^2) (density of
    log T) and over censored of log P(log T > log t), mu = alpha + beta log x."""
    alpha, beta, log_sigma = params
    sigma = _sigma(log_sigma)
    zs = (log_t - alpha - beta * log_x) / sigma
    zo, zc = zs[observed], zs[~observed]
    return float(np.sum(-0.5 * zo * zo - _HALF_LOG_2PI - log_sigma) + np.sum(special.log_ndtr(-zc)))


def censored_lognormal_grad(
    params: np.ndarray, log_x: np.ndarray, log_t: np.ndarray, observed: np.ndarray
) -> np.ndarray:
    """Gradient of `censored_lognormal_loglik` in (alpha, beta, log sigma). With z = (log t - mu) / sigma:
    observed terms give dl/dmu = z / sigma, dl/dlog sigma = z^2 - 1; censored ones, with the hazard
    h = phi(z) / Phi_bar(z), give dl/dmu = h / sigma, dl/dlog sigma = h z."""
    alpha, beta, log_sigma = params
    sigma = _sigma(log_sigma)
    zs = (log_t - alpha - beta * log_x) / sigma
    h = np.exp(-0.5 * zs * zs - _HALF_LOG_2PI - special.log_ndtr(-zs))
    dmu = np.where(observed, zs, h) / sigma
    dls = np.where(observed, zs * zs - 1.0, h * zs)
    return np.array([dmu.sum(), (dmu * log_x).sum(), dls.sum()])


def _prepare(
    x: list[float], per_seed: list[list[float | None]], budgets: list[float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lx, lt, obs = [], [], []
    if not (len(x) == len(per_seed) == len(budgets)):
        raise ValueError("x, per_seed and budgets need one entry per point")
    for xi, vals, c in zip(x, per_seed, budgets):
        if xi <= 0 or c <= 0:
            raise ValueError(f"x and budgets must be positive, got x={xi}, budget={c}")
        for v in vals:
            if v is not None and v <= 0:
                raise ValueError(f"hitting times must be positive, got {v}")
            lx.append(math.log(xi))
            lt.append(math.log(c if v is None else v))
            obs.append(v is not None)
    return np.array(lx), np.array(lt), np.array(obs, dtype=bool)


def fit_censored_lognormal(
    x: list[float], per_seed: list[list[float | None]], budgets: list[float], level: float = 0.95
) -> dict:
    """Maximum-likelihood slope of log T against log x with right-censored seeds (None = did not reach the
    threshold within `budgets[i]` samples). Returns slope, intercept, sigma, ci (profile likelihood at `level`;
    an end is None where the likelihood stays within the cut out to |beta| = 20), n_observed, n_censored,
    loglik. With fewer than two observed times, or observed times at one x only, the slope is None."""
    if not (0.0 < level < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level}")
    lx, lt, obs = _prepare(x, per_seed, budgets)
    out = {
        "slope": None,
        "intercept": None,
        "sigma": None,
        "ci": [None, None],
        "level": level,
        "n_observed": int(obs.sum()),
        "n_censored": int((~obs).sum()),
        "loglik": None,
        "method": "censored log-normal, profile likelihood",
    }
    if obs.sum() < 2 or np.ptp(lx[obs]) == 0:
        return out

    def nll(p: np.ndarray) -> float:
        return -censored_lognormal_loglik(p, lx, lt, obs)

    def nll_grad(p: np.ndarray) -> np.ndarray:
        return -censored_lognormal_grad(p, lx, lt, obs)

    b0, a0 = np.polyfit(lx[obs], lt[obs], 1)
    s0 = max(float(np.std(lt[obs] - a0 - b0 * lx[obs])), 0.1)
    best = optimize.minimize(
        nll, np.array([a0, b0, math.log(s0)]), jac=nll_grad, method="BFGS", options={"gtol": 1e-8}
    )
    alpha, beta, log_sigma = best.x
    lmax = -best.fun
    cut = stats.chi2.ppf(level, 1) / 2.0

    def profile(b: float) -> float:
        """l_max - l_prof(b) - cut: negative inside the interval."""
        f = lambda q: nll(np.array([q[0], b, q[1]]))  # noqa: E731
        g = lambda q: nll_grad(np.array([q[0], b, q[1]]))[[0, 2]]  # noqa: E731
        q0 = np.array([alpha + (beta - b) * lx.mean(), log_sigma])
        r = optimize.minimize(f, q0, jac=g, method="BFGS", options={"gtol": 1e-9})
        return lmax + r.fun - cut

    ci: list[float | None] = []
    for direction in (-1.0, 1.0):
        step, edge = 0.05, None
        b = beta
        while abs(b - beta) < 20.0:
            nb = b + direction * step
            if profile(nb) > 0:
                edge = optimize.brentq(profile, min(b, nb), max(b, nb), xtol=1e-6)
                break
            b, step = nb, step * 1.5
        ci.append(edge)
    out.update(slope=float(beta), intercept=float(alpha), sigma=float(math.exp(log_sigma)), ci=ci, loglik=float(lmax))
    return out
