"""Simulations of the verdict's procedure on designs whose answer is known: coverage of its intervals, and power.

Coverage (`coverage`): each simulated base has front runs at known (retention, ID gain) points and one option placed
exactly on their concave hull (true excess 0); fine-tuning seeds and items are drawn (Gaussian scores: a seed effect
per run, an item effect shared by every run and the base, as the paired design has, and per-grade noise), and the
verdict's per-base procedure is run on them: the two-level paired bootstrap of the excess over the refitted hull
(`base_bootstrap`, the same draws as `intervals.paired_bootstrap` makes, vectorised; tested equal to it), then
`intervals.bias_corrected` per base and `intervals.hartung_knapp` (modified, max(1, q)) over the bases. Reported:
how often each interval covers 0, per base and pooled, with the percentile intervals and the uncorrected pooling
beside them.

Power (`power`): the per-base bias-corrected excesses as theta_b = delta + N(0, tau^2) plus a within-base error
N(0, se_b^2), se_b drawn from the recorded bases' bootstrap SEs; the modified Hartung-Knapp interval on them; power
= how often its lower end is > 0 (one-sided rejection of the two-sided 95 % interval's lower end), by bases.

Every random draw comes from the numpy Generator passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anchorft.eval.intervals import bias_corrected, hartung_knapp
from anchorft.studies.testbed.front import hull_at

__all__ = ["Design", "DESIGNS", "simulate_base", "base_bootstrap", "coverage", "power", "bases_for_power"]
__all__ += ["binomial_band"]


@dataclass(frozen=True)
class Design:
    """Front runs' true (retention, gain in points) and the option's retention (its gain: the hull's there); seeds,
    items and the scores' spreads (ID in accuracy units, OOD in retention units)."""

    name: str
    front: tuple[tuple[float, float], ...]
    option_x: float
    seeds: int = 5
    id_items: int = 250
    ood_items: int = 300
    seed_sd_id: float = 0.03  # a seed's shift of a run's ID accuracy (3 points)
    seed_sd_ood: float = 0.01
    item_sd_id: float = 0.25  # an item's effect, shared by every run and the base
    item_sd_ood: float = 0.12
    noise_sd_id: float = 0.3  # what is left of one grade
    noise_sd_ood: float = 0.12

    def truth(self) -> tuple[float, float]:
        """The option's true (retention, gain): on the hull of the front and the base."""
        pts = np.array([(1.0, 0.0), *self.front])
        return self.option_x, float(hull_at(pts[None, :, 0], pts[None, :, 1], np.array([self.option_x]))[0])


# the recorded verdict's mean front (six bases, docs/alternatives.md), an option between its last two hull points,
# and one at rpsft's retention, where five front points lie within 3 points of gain (a near tie of the maximum)
TESTBED = ((0.327, 20.0), (0.554, 20.9), (0.691, 21.8), (0.824, 22.8), (0.880, 22.4), (0.935, 20.8), (0.969, 10.9))
DESIGNS = {
    "testbed": Design("testbed", TESTBED, 0.95),
    "flat": Design("flat", TESTBED, 0.74),
    # five front points within 0.1 point of one straight line to the base: which are vertices is a coin toss
    "collinear": Design("collinear", ((0.90, 30.0), (0.92, 23.9), (0.94, 17.95), (0.96, 11.9), (0.98, 6.0)), 0.95),
    # the option more retentive than every front point: its front is the chord from the last one to the base
    "past-the-grid": Design("past-the-grid", TESTBED, 0.985),
}


def simulate_base(design: Design, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    """One base's scores as the verdict reads them: {run: {"id": (seeds, items), "ood": (seeds, items)}}, runs
    "base" (one row), "option" and "f0", "f1", ... (the front runs)."""
    truths = {"option": design.truth(), **{f"f{i}": p for i, p in enumerate(design.front)}}
    s, ni, no = design.seeds, design.id_items, design.ood_items
    item_id = rng.normal(0, design.item_sd_id, ni)
    item_ood = rng.normal(0, design.item_sd_ood, no)
    base_id, base_ood = 0.3, 0.9  # the base's accuracies: gains and retentions are relative to them
    out = {
        "base": {
            "id": (base_id + item_id + rng.normal(0, design.noise_sd_id, ni))[None, :],
            "ood": (base_ood + item_ood + rng.normal(0, design.noise_sd_ood, no))[None, :],
        }
    }
    for run, (x, y) in truths.items():
        a_id = rng.normal(0, design.seed_sd_id, (s, 1))
        a_ood = rng.normal(0, design.seed_sd_ood, (s, 1))
        out[run] = {
            "id": base_id + y / 100 + a_id + item_id + rng.normal(0, design.noise_sd_id, (s, ni)),
            "ood": base_ood * x + a_ood + item_ood + rng.normal(0, design.noise_sd_ood, (s, no)),
        }
    return out


def base_bootstrap(scores: dict, n_boot: int, rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """(estimate, replicates) of the option's excess over the hull of the front runs and the base, by the draws of
    `intervals.paired_bootstrap` (seeds, then each set's items in name order, the same for every run), vectorised."""
    runs = [r for r in scores if r != "base"]
    n_seeds = scores[runs[0]]["id"].shape[0]
    seed_idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    weights = {}
    for name in sorted(scores["base"]):
        n = scores["base"][name].shape[1]
        draws = rng.integers(0, n, size=(n_boot, n))
        weights[name] = np.stack([np.bincount(d, minlength=n) for d in draws]) / n

    def means(w: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for r, sets in scores.items():
            out[r] = {}
            for name, a in sets.items():
                per_seed = a @ w[name].T  # (seeds, replicates)
                out[r][name] = (
                    per_seed[0] if a.shape[0] == 1 else per_seed[idx, np.arange(idx.shape[0])[:, None]].mean(1)
                )
        return out

    def excess(m: dict) -> np.ndarray:
        keep = {r: m[r]["ood"] / m["base"]["ood"] for r in runs}
        gain = {r: 100 * (m[r]["id"] - m["base"]["id"]) for r in runs}
        front = [r for r in runs if r != "option"]
        xs = np.stack([np.ones_like(keep["option"]), *(keep[r] for r in front)], axis=1)
        ys = np.stack([np.zeros_like(gain["option"]), *(gain[r] for r in front)], axis=1)
        return gain["option"] - hull_at(xs, ys, keep["option"])

    full = {name: np.full((1, scores["base"][name].shape[1]), 1.0 / scores["base"][name].shape[1]) for name in weights}
    estimate = float(excess(means(full, np.arange(n_seeds)[None, :]))[0])
    return estimate, excess(means(weights, seed_idx))


def coverage(
    design: Design, bases: int, studies: int, n_boot: int, rng: np.random.Generator, level: float = 0.95
) -> dict:
    """How often each interval covers the true excess 0 over `studies` simulated studies of `bases` bases: per base
    the percentile interval, the bias-corrected normal one and the bias-aware one (`intervals.bias_corrected`);
    pooled the modified Hartung-Knapp interval of the plain estimates, of the bias-corrected ones, and the latter
    widened by the size of the bases' mean bias (the verdict's, `verdict.pooled_verdict`); with each rate's
    binomial SE at the nominal level, the counts, and the mean of the plain and the corrected estimates."""
    keys = ("base_percentile", "base_corrected", "base_aware", "pooled_plain", "pooled_corrected", "pooled_aware")
    hits = dict.fromkeys(keys, 0)
    plain_all, corr_all = [], []
    tail = (1 - level) / 2
    for _ in range(studies):
        plain, corr, var, bias = [], [], [], []
        for _ in range(bases):
            est, reps = base_bootstrap(simulate_base(design, rng), n_boot, rng)
            bc = bias_corrected(est, reps, level)
            lo, hi = np.quantile(reps, [tail, 1 - tail])
            hits["base_percentile"] += int(lo <= 0 <= hi)
            hits["base_corrected"] += int(bc["low"] <= 0 <= bc["high"])
            hits["base_aware"] += int(bc["aware_low"] <= 0 <= bc["aware_high"])
            plain.append(est)
            corr.append(bc["corrected"])
            var.append(max(bc["se"], 1e-6) ** 2)
            bias.append(bc["bias"])
        hk = hartung_knapp(plain, var, level)
        hits["pooled_plain"] += int(hk["low"] <= 0 <= hk["high"])
        hk = hartung_knapp(corr, var, level)
        hits["pooled_corrected"] += int(hk["low"] <= 0 <= hk["high"])
        bound = abs(float(np.mean(bias)))
        hits["pooled_aware"] += int(hk["low"] - bound <= 0 <= hk["high"] + bound)
        plain_all += plain
        corr_all += corr
    n = {k: studies * bases if k.startswith("base") else studies for k in keys}
    return {
        "design": design.name,
        "bases": bases,
        "studies": studies,
        "replicates": n_boot,
        "level": level,
        "coverage": {k: hits[k] / n[k] for k in keys},
        "binomial_se": {k: float(np.sqrt(level * (1 - level) / n[k])) for k in keys},
        "n": n,
        "mean_plain": float(np.mean(plain_all)),
        "mean_corrected": float(np.mean(corr_all)),
    }


def power(
    delta: float,
    tau: float,
    within_se: Sequence[float],
    bases: int,
    sims: int,
    rng: np.random.Generator,
    level: float = 0.95,
    bound: float = 0.0,
) -> float:
    """The share of `sims` simulated studies of `bases` bases whose modified Hartung-Knapp interval, widened by the
    bias bound `bound` (the verdict's bias-aware interval), lies above 0; each base's estimate
    delta + N(0, tau^2) + N(0, se^2), its variance se^2, se drawn from `within_se`."""
    se = rng.choice(np.asarray(within_se, dtype=float), size=(sims, bases))
    y = delta + rng.normal(0, tau, (sims, bases)) + rng.normal(0, 1, (sims, bases)) * se
    return float(np.mean([hartung_knapp(y[i], se[i] ** 2, level)["low"] - bound > 0 for i in range(sims)]))


def bases_for_power(
    delta: float,
    tau: float,
    within_se: Sequence[float],
    rng: np.random.Generator,
    target: float = 0.8,
    sims: int = 2000,
    max_bases: int = 80,
    level: float = 0.95,
    bound: float = 0.0,
) -> tuple[int | None, float]:
    """The fewest bases (from 3) whose simulated `power` reaches `target`, and that power; (None, the power at
    `max_bases`) if none up to it does."""
    p = 0.0
    for k in range(3, max_bases + 1):
        p = power(delta, tau, within_se, k, sims, rng, level, bound)
        if p >= target:
            return k, p
    return None, p


def binomial_band(rate: float, n: int, z: float = 3.0) -> tuple[float, float]:
    """rate +- z sqrt(rate (1 - rate) / n): where a coverage estimated from n trials lies around a true `rate`."""
    half = z * np.sqrt(rate * (1 - rate) / n)
    return rate - half, rate + half
