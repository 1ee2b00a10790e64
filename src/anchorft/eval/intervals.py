"""Intervals for comparing ways of fine-tuning on shared seeds and shared items, across pretrained bases.

Three tools, each a pure function:

- `paired_bootstrap`: a statistic of several methods' scores (for example a method's excess over the front of
  others), with a two-level bootstrap that resamples the fine-tuning seeds, then the items, using the same draws
  for every method, so that what seeds and items share cancels out of the differences (Efron and Tibshirani 1993,
  ch. 6; the two-level scheme of Davison and Hinkley 1997, sec. 3.8, seeds as the upper level). The statistic is
  recomputed inside each replicate, so a front fitted to the same scores (the upper hull of noisy means, biased
  upward) is refitted in every replicate and its own noise enters the interval.
- `hartung_knapp`: the random-effects mean of per-base estimates y_b with variances v_b (DerSimonian and Laird
  1986 for the between-base variance tau^2), with the Hartung-Knapp variance and a t interval on k - 1 degrees
  of freedom (Hartung and Knapp 2001; IntHout et al. 2014): with 4 bases the 97.5 % point is 3.18, not 1.96.
  With few bases whose estimates agree by chance the Hartung-Knapp variance can fall below the random-effects one,
  1 / sum w* (the inverse of the summed weights 1 / (v_b + tau^2), not the fixed-effect 1 / sum 1 / v_b); the
  variance is therefore never taken below it (the ad hoc modification, max(1, q), of Roever, Knapp and Friede
  2015).
- `bias_corrected`: a bootstrap's bias-corrected estimate and normal interval, estimate - b +- z se with
  b = mean(replicates) - estimate (Efron and Tibshirani 1993, sec. 10.2; Davison and Hinkley 1997, eq. 2.14 and
  sec. 5.2): a front fitted to the same scores is a maximum of noisy means, biased upward, and a percentile interval
  carries its noise but not its bias.
- `holm`: Holm's step-down adjusted p-values (Holm 1979), for many options judged at once.
- `variance_components` and `detectable_effect`: the between-base, between-seed and item variances of a balanced
  pilot (bases x seeds x items, nested ANOVA by the method of moments), and the smallest true effect a design of
  B bases, S seeds and I items finds with the stated power, (t_{1-alpha/2, B-1} + t_{power, B-1}) x SE, with
  SE^2 = var_base / B + var_seed / (B S) + var_item / (B S I).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy import stats

__all__ = ["paired_bootstrap", "hartung_knapp", "variance_components", "detectable_effect", "standard_error"]
__all__ += ["bias_corrected", "bias_aware_p", "holm", "t_test_p"]

Scores = Mapping[str, Mapping[str, np.ndarray]]  # method -> item set -> (seeds, items)


def _shapes(scores: Scores) -> tuple[int, dict[str, int]]:
    """(number of seeds, {item set: number of items}), checked to be shared by every method; a method with a single
    row (the base model, which has no fine-tuning seed) is allowed."""
    seeds, items = None, {}
    for method, sets in scores.items():
        for name, a in sets.items():
            a = np.asarray(a)
            if a.ndim != 2:
                raise ValueError(f"scores[{method!r}][{name!r}]: expected (seeds, items), got shape {a.shape}")
            if items.setdefault(name, a.shape[1]) != a.shape[1]:
                raise ValueError(f"item set {name!r}: {a.shape[1]} items for {method!r}, {items[name]} for another")
            if a.shape[0] > 1:
                if seeds is not None and seeds != a.shape[0]:
                    raise ValueError(f"{method!r}: {a.shape[0]} seeds, another method has {seeds}; pair the seeds")
                seeds = a.shape[0]
    return seeds or 1, items


def _means(scores: Scores, seed_idx: np.ndarray, item_w: dict[str, np.ndarray]) -> list[dict[str, dict[str, float]]]:
    """Per replicate b: {method: {set: mean over the seeds seed_idx[b] of the item-weighted means}}; item_w[set]
    is (replicates, items), each row the draw counts over the number of items."""
    n_rep = seed_idx.shape[0]
    out: list[dict] = [{m: {} for m in scores} for _ in range(n_rep)]
    for m, sets in scores.items():
        for name, a in sets.items():
            per_seed = np.asarray(a, dtype=float) @ item_w[name].T  # (seeds, replicates)
            if per_seed.shape[0] == 1:  # no seeds to resample (the base)
                vals = per_seed[0]
            else:
                vals = per_seed[seed_idx, np.arange(n_rep)[:, None]].mean(axis=1)
            for b in range(n_rep):
                out[b][m][name] = float(vals[b])
    return out


def paired_bootstrap(
    scores: Scores,
    statistic: Callable[[dict[str, dict[str, float]]], float],
    n_boot: int = 2000,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    seeds: bool = True,
    keep: bool = False,
) -> dict:
    """`statistic` of the methods' mean scores, and its two-level paired bootstrap (module docstring).

    `scores[method][set]` is a (seeds, items) array: row s the method's scores at fine-tuning seed s (the same
    seeds, in the same order, for every method), column i item i of that set (the same items for every method);
    a single-row array (the base) is not resampled over seeds. `statistic(means)` gets {method: {set: mean}}.
    Each replicate draws the seeds with replacement, then, independently per set, the items with replacement;
    the same draws serve every method. Returns "estimate" (on the data), "se" (the replicates' std, ddof 1),
    "low" / "high" (percentile interval at `level`) and "replicates".

    `seeds=False`: the items alone are resampled (every replicate takes all seeds once), so the spread is what the
    item sample contributes; the generator then draws only items, so two calls with equally seeded generators on
    item sets of the same sizes draw the same items (what a comparison over bases that share their items needs).
    `keep`: the replicates' values too ("values", an array; not JSON)."""
    if n_boot < 2:
        raise ValueError(f"n_boot: need >= 2 replicates, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level: must be in (0, 1), got {level}")
    rng = rng if rng is not None else np.random.default_rng(0)
    n_seeds, items = _shapes(scores)
    full_w = {name: np.full((1, n), 1.0 / n) for name, n in items.items()}
    estimate = statistic(_means(scores, np.arange(n_seeds)[None, :], full_w)[0])
    if seeds:
        seed_idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    else:
        seed_idx = np.broadcast_to(np.arange(n_seeds), (n_boot, n_seeds))
    item_w = {}
    for name, n in sorted(items.items()):
        draws = rng.integers(0, n, size=(n_boot, n))
        item_w[name] = np.stack([np.bincount(d, minlength=n) for d in draws]) / n
    reps = np.array([statistic(m) for m in _means(scores, seed_idx, item_w)])
    tail = (1 - level) / 2
    out = {
        "estimate": float(estimate),
        "se": float(reps.std(ddof=1)),
        "low": float(np.quantile(reps, tail)),
        "high": float(np.quantile(reps, 1 - tail)),
        "replicates": int(n_boot),
    }
    return {**out, "values": reps} if keep else out


def bias_corrected(estimate: float, values, level: float = 0.95) -> dict[str, float]:
    """The bootstrap's bias b = mean(values) - estimate, the bias-corrected estimate estimate - b, the replicates'
    SD (ddof 1), the normal interval estimate - b -+ z_{(1+level)/2} SD (Efron and Tibshirani 1993, sec. 10.2;
    Davison and Hinkley 1997, eq. 2.14) as "low" / "high", and the bias-aware one, widened by |b| each side, as
    "aware_low" / "aware_high": near ties of a maximum the bootstrap finds only part of the bias (it resamples
    around the estimate, where the ties are already broken), so what is left is bounded by |b| where it finds at
    least half (the widening of Armstrong and Kolesar 2020 with |b| as the bound, checked by `verdict_sim`).
    `values`: the bootstrap replicates of the statistic."""
    values = np.asarray(values, dtype=float)
    if values.size < 2 or not 0 < level < 1:
        raise ValueError(f"bias_corrected: need >= 2 replicates and 0 < level < 1, got {values.size} and {level}")
    bias = float(values.mean() - estimate)
    sd = float(values.std(ddof=1))
    z = float(stats.norm.ppf((1 + level) / 2))
    corrected = float(estimate - bias)
    return {
        "bias": bias,
        "corrected": corrected,
        "se": sd,
        "low": corrected - z * sd,
        "high": corrected + z * sd,
        "aware_low": corrected - z * sd - abs(bias),
        "aware_high": corrected + z * sd + abs(bias),
    }


def bias_aware_p(mean: float, se: float, bound: float, df: int | None = None) -> float:
    """Two-sided p of mean = 0 for an estimate whose bias is at most `bound` in size: the smallest 1 - level at
    which mean -+ (q se + bound) excludes 0, q the t quantile on `df` degrees of freedom (normal for None); 1 when
    |mean| <= bound."""
    if abs(mean) <= bound:
        return 1.0
    z = (abs(mean) - bound) / se if se > 0 else np.inf
    return float(2 * (stats.norm.sf(z) if df is None else stats.t.sf(z, df)))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): with p sorted ascending, p_(i) adjusted to
    max_{j <= i} min(1, (m - j + 1) p_(j)); a hypothesis is rejected at alpha when its adjusted p <= alpha, which
    holds the family-wise error rate at alpha over the m hypotheses, whatever their dependence."""
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or np.any((p < 0) | (p > 1)):
        raise ValueError(f"holm: need a list of p-values in [0, 1], got {pvalues!r}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def t_test_p(mean: float, se: float, df: int | None = None) -> float:
    """Two-sided p of mean = 0 by a t test on `df` degrees of freedom (normal for None): 2 P(T_df > |mean| / se)."""
    return bias_aware_p(mean, se, 0.0, df) if se > 0 else float(mean == 0)


def hartung_knapp(y, v, level: float = 0.95, modified: bool = True) -> dict[str, float]:
    """Random-effects mean of estimates `y` (one per base) with within-base variances `v`.

    tau^2 (DerSimonian-Laird) = max(0, (Q - (k - 1)) / (sum w - sum w^2 / sum w)), w = 1 / v, Q = sum w (y - mu_FE)^2;
    weights w* = 1 / (v + tau^2), mu = sum w* y / sum w*; the Hartung-Knapp variance
    max(1, q) / sum w*, q = sum w* (y - mu)^2 / (k - 1) (the max: never below 1 / sum w*, the random-effects
    variance the weights w* themselves give, which is not the fixed-effect 1 / sum w unless tau^2 = 0; the
    modified Knapp-Hartung of Roever, Knapp and Friede 2015; `modified=False` drops it); interval
    mu +- t_{(1+level)/2, k-1} SE. Needs k >= 2 and v > 0."""
    y, v = np.asarray(y, dtype=float), np.asarray(v, dtype=float)
    k = y.size
    if k < 2 or v.shape != y.shape:
        raise ValueError(f"hartung_knapp: need >= 2 estimates with one variance each, got {k} and {v.size}")
    if np.any(v <= 0):
        raise ValueError("hartung_knapp: every variance must be > 0")
    w = 1.0 / v
    mu_fe = np.sum(w * y) / np.sum(w)
    q_stat = float(np.sum(w * (y - mu_fe) ** 2))
    tau2 = max(0.0, (q_stat - (k - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    ws = 1.0 / (v + tau2)
    mu = float(np.sum(ws * y) / np.sum(ws))
    q = float(np.sum(ws * (y - mu) ** 2) / (k - 1))
    se = float(np.sqrt((max(1.0, q) if modified else q) / np.sum(ws)))
    t = float(stats.t.ppf((1 + level) / 2, k - 1))
    return {"mean": mu, "se": se, "low": mu - t * se, "high": mu + t * se, "tau2": float(tau2), "df": k - 1, "t": t}


def variance_components(d) -> dict[str, float]:
    """Between-base, between-seed (within base) and item (within seed) variances of a balanced pilot d
    (bases, seeds, items), by the nested ANOVA's expected mean squares (negative estimates set to 0):
    MS_item = var_item; MS_seed = var_item + I var_seed; MS_base = var_item + I var_seed + S I var_base."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 3 or min(d.shape) < 2:
        raise ValueError(f"variance_components: need (bases, seeds, items), each >= 2, got shape {d.shape}")
    b, s, i = d.shape
    seed_means = d.mean(axis=2)  # (b, s)
    base_means = seed_means.mean(axis=1)  # (b,)
    ms_item = float(((d - seed_means[..., None]) ** 2).sum() / (b * s * (i - 1)))
    ms_seed = float(i * ((seed_means - base_means[:, None]) ** 2).sum() / (b * (s - 1)))
    ms_base = float(s * i * ((base_means - base_means.mean()) ** 2).sum() / (b - 1))
    return {
        "base": max(0.0, (ms_base - ms_seed) / (s * i)),
        "seed": max(0.0, (ms_seed - ms_item) / i),
        "item": ms_item,
    }


def standard_error(components: Mapping[str, float], bases: int, seeds: int, items: int) -> float:
    """SE of the grand mean of a balanced design: sqrt(var_base / B + var_seed / (B S) + var_item / (B S I))."""
    c = components
    return float(np.sqrt(c["base"] / bases + c["seed"] / (bases * seeds) + c["item"] / (bases * seeds * items)))


def detectable_effect(
    components: Mapping[str, float], bases: int, seeds: int, items: int, level: float = 0.95, power: float = 0.8
) -> float:
    """The smallest true mean a two-sided t test at `level` on bases - 1 degrees of freedom finds with probability
    `power`: (t_{(1+level)/2, B-1} + t_{power, B-1}) x `standard_error`."""
    if bases < 2:
        raise ValueError(f"detectable_effect: need >= 2 bases, got {bases}")
    df = bases - 1
    factor = stats.t.ppf((1 + level) / 2, df) + stats.t.ppf(power, df)
    return float(factor * standard_error(components, bases, seeds, items))
