"""Statistics of the weak-to-strong sweeps: censored medians, threshold crossings, log-log fits, config hashes.

A censored value (a seed that did not reach a threshold within its budget) is None and counts as +inf.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anchorft.runs import config_hash

__all__ = ["digest", "median_censored", "crossing", "loglog_slope", "fit_loglog", "mean_std"]


def digest(obj: Any, length: int = 16) -> str:
    """SHA-256 (`length` hex digits) of `obj` as JSON with sorted keys and JSON's default separators: the key of
    W2S configs and cached sweep points (`runs.config_hash` with those separators)."""
    return config_hash(obj, length, separators=(", ", ": "))


def median_censored(values: list[float | None]) -> float | None:
    """Median with censored entries (None = did not reach the threshold, i.e. +inf); None if the median is censored."""
    v = sorted(math.inf if x is None else float(x) for x in values)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return None if math.isinf(med) else med


def crossing(xs: list[float], ys: list[float], level: float, above: bool = True) -> float | None:
    """The first x at which y reaches `level` (y >= level; y < level if not `above`), by linear interpolation
    between neighbouring points (xs sorted increasing); xs[0] if y starts there; None if it never does
    (censored)."""
    for k, (x, y) in enumerate(zip(xs, ys)):
        if y >= level if above else y < level:
            if k == 0:
                return float(x)
            x0, y0 = xs[k - 1], ys[k - 1]
            return float(x0 + (level - y0) * (x - x0) / (y - y0))
    return None


def loglog_slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def fit_loglog(
    x: list[float], per_seed: list[list[float | None]], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> dict:
    """Least-squares slope of log(median samples) against log(x) over the uncensored points, with a percentile
    bootstrap interval (seeds resampled with replacement within each point; resamples whose median is censored
    leave that point out). Returns slope, intercept, ci, n_points, censored (indices)."""
    x = np.asarray(x, dtype=float)
    meds = [median_censored(v) for v in per_seed]
    ok = [i for i, m in enumerate(meds) if m is not None]
    censored = [i for i, m in enumerate(meds) if m is None]
    if len(ok) < 2:
        return {"slope": None, "intercept": None, "ci": [None, None], "n_points": len(ok), "censored": censored}
    slope, icpt = np.polyfit(np.log(x[ok]), np.log([meds[i] for i in ok]), 1)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        xs, ys = [], []
        for i in range(len(x)):
            vals = per_seed[i]
            m = median_censored([vals[j] for j in rng.integers(0, len(vals), len(vals))])
            if m is not None:
                xs.append(math.log(x[i]))
                ys.append(math.log(m))
        if len(set(xs)) >= 2:
            boots.append(np.polyfit(xs, ys, 1)[0])
    a = (1.0 - level) / 2
    ci = [float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a))] if boots else [None, None]
    return {"slope": float(slope), "intercept": float(icpt), "ci": ci, "n_points": len(ok), "censored": censored}


def mean_std(values: list[float]) -> dict:
    """Mean and sample standard deviation (ddof=1; None for one value)."""
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else None}
