"""Statistics of the weak-to-strong sweeps: censored medians, threshold crossings, log-log fits, config hashes,
Student-t intervals of a mean (and of a ratio per seed), and a bisection for a sign change.

A censored value (a seed that did not reach a threshold within its budget) is None and counts as +inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from anchorft.runs import config_hash

__all__ = ["digest", "median_censored", "crossing", "loglog_slope", "fit_loglog", "mean_std", "mean_t_interval"]
__all__ += ["ratio_summary", "sign_changes", "bisect_sign_change"]


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


def mean_t_interval(values: list[float], level: float = 0.95) -> dict:
    """Mean of `values`, its sample standard deviation (ddof=1) and the two-sided Student-t interval of the mean
    at `level` (n - 1 degrees of freedom); std and interval None with fewer than two values."""
    from scipy.stats import t  # lazy: loads scipy

    a = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"n": int(a.size), "level": level, "method": "student-t", "mean": None, "std": None}
    out["ci"] = [None, None]
    if a.size:
        out["mean"] = float(a.mean())
    if a.size > 1:
        sd = float(a.std(ddof=1))
        half = float(t.ppf(0.5 + level / 2, a.size - 1)) * sd / math.sqrt(a.size)
        out.update(std=sd, ci=[out["mean"] - half, out["mean"] + half])
    return out


def ratio_summary(num: list[float | None], den: list[float | None], level: float = 0.95) -> dict:
    """Per pair, num / den (None where either is None or den is 0), and over the defined ratios their mean with
    its Student-t interval (`mean_t_interval`); `left_out` counts the undefined ones."""
    ratios = [None if a is None or not b else float(a) / float(b) for a, b in zip(num, den)]
    defined = [r for r in ratios if r is not None]
    return {"per_seed": ratios, **mean_t_interval(defined, level), "left_out": len(ratios) - len(defined)}


def sign_changes(values: list[float]) -> list[int]:
    """Indices k where the sign of values[k] and values[k + 1] differ (a value >= 0 counts as positive)."""
    return [k for k in range(len(values) - 1) if (values[k] >= 0) != (values[k + 1] >= 0)]


def bisect_sign_change(f: Callable[[float], float], lo: float, hi: float, tol: float) -> dict:
    """Bisect [lo, hi] for a sign change of f (a value >= 0 counts as positive) until hi - lo <= tol.

    f is evaluated at both ends first: if their signs agree there is nothing to bisect (`bracketed` False).
    Otherwise each step evaluates the midpoint and keeps the half whose ends differ in sign, so the returned
    [lo, hi] has f's sign checked on both sides. Returns lo, hi, f_lo, f_hi, the estimate (lo + hi) / 2 (None
    when not bracketed) and every evaluation [x, f(x)] in order."""
    if not tol > 0 or not hi > lo:
        raise ValueError(f"bisect_sign_change: needs lo < hi and tol > 0, got {lo!r}, {hi!r}, {tol!r}")
    f_lo, f_hi = float(f(lo)), float(f(hi))
    evals = [[lo, f_lo], [hi, f_hi]]
    bracketed = (f_lo >= 0) != (f_hi >= 0)
    while bracketed and hi - lo > tol:
        mid = 0.5 * (lo + hi)
        f_mid = float(f(mid))
        evals.append([mid, f_mid])
        if (f_mid >= 0) == (f_lo >= 0):
            lo, f_lo = mid, f_mid
        else:
            hi, f_hi = mid, f_mid
    est = 0.5 * (lo + hi) if bracketed else None
    return {
        "lo": lo,
        "hi": hi,
        "f_lo": f_lo,
        "f_hi": f_hi,
        "estimate": est,
        "bracketed": bracketed,
        "evaluations": evals,
    }
