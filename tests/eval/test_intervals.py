"""`anchorft.eval.intervals` against independent computations: a loop over explicit resamples, scipy's t interval,
hand-built designs whose mean squares are known exactly, and a simulation of the design a power calculation sizes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from anchorft.eval.intervals import (
    detectable_effect,
    hartung_knapp,
    paired_bootstrap,
    standard_error,
    variance_components,
)


def _scores(rng, seeds=3, items=(7, 5)):
    """Two methods and a base on two item sets, 0/1 scores."""
    sets = {f"s{j}": n for j, n in enumerate(items)}
    out = {m: {s: (rng.random((seeds, n)) < p).astype(float) for s, n in sets.items()} for m, p in
           (("a", 0.6), ("b", 0.4))}  # fmt: skip
    out["base"] = {s: (rng.random((1, n)) < 0.5).astype(float) for s, n in sets.items()}
    return out


def _diff(means):
    return (means["a"]["s0"] + means["a"]["s1"]) - (means["b"]["s0"] + means["b"]["s1"]) - means["base"]["s0"]


def test_paired_bootstrap_equals_a_loop_over_explicit_resamples():
    """Each replicate is the statistic of the scores resampled by the same seed draw (rows) and, per set, the same
    item draw (columns) for every method; recomputed here with explicit fancy indexing, in the same draw order."""
    scores = _scores(np.random.default_rng(1))
    got = paired_bootstrap(scores, _diff, n_boot=50, rng=np.random.default_rng(7), level=0.9)
    rng = np.random.default_rng(7)
    seed_idx = rng.integers(0, 3, size=(50, 3))
    draws = {s: rng.integers(0, n, size=(50, n)) for s, n in sorted({"s0": 7, "s1": 5}.items())}
    reps = []
    for b in range(50):
        means = {}
        for m, sets in scores.items():
            rows = [0] * 3 if m == "base" else seed_idx[b]
            means[m] = {s: float(a[rows][:, draws[s][b]].mean()) for s, a in sets.items()}
        reps.append(_diff(means))
    assert got["se"] == pytest.approx(np.std(reps, ddof=1), rel=1e-12)
    assert got["low"] == pytest.approx(np.quantile(reps, 0.05), rel=1e-12)
    assert got["high"] == pytest.approx(np.quantile(reps, 0.95), rel=1e-12)
    plain = {m: {s: float(a.mean()) for s, a in sets.items()} for m, sets in scores.items()}
    assert got["estimate"] == pytest.approx(_diff(plain), rel=1e-12)


def test_pairing_cancels_what_methods_share():
    """Two methods equal to a shared per-item difficulty plus a constant: the paired difference has no spread,
    while the same methods with independent item draws (unpaired) would; the seed level enters when the seeds
    differ by a shared amount that the difference does not cancel."""
    rng = np.random.default_rng(0)
    shared = rng.random((4, 30))
    scores = {"a": {"x": shared + 0.1}, "b": {"x": shared}}
    out = paired_bootstrap(scores, lambda m: m["a"]["x"] - m["b"]["x"], n_boot=200, rng=np.random.default_rng(1))
    assert out["estimate"] == pytest.approx(0.1) and out["se"] < 1e-12
    seeds_apart = {"a": {"x": shared + np.array([[0.0], [0.2], [0.0], [0.2]])}, "b": {"x": shared}}
    out = paired_bootstrap(seeds_apart, lambda m: m["a"]["x"] - m["b"]["x"], n_boot=400, rng=np.random.default_rng(1))
    # the difference is 0 or 0.2 per seed (std 0.1, ddof 0): the bootstrap SE of a 4-seed mean is 0.1 / 2 = 0.05
    assert 0.02 < out["se"] < 0.08


def test_items_only_bootstrap_has_the_item_means_analytic_spread_and_draws_alike_for_alike_shapes():
    """`seeds=False`: every replicate keeps all seeds and resamples items, so a run's mean has the bootstrap
    variance of a mean of n item values, var_0(per-item seed means) / n (ddof 0), within the Monte Carlo error of
    a standard deviation from B replicates (relative SD about 1 / sqrt(2 (B - 1)): 1.1 % at B = 4000; 5 of them
    allowed). Two equally seeded calls on item sets of the same sizes draw the same items: a shifted copy gives
    the replicates shifted."""
    rng = np.random.default_rng(3)
    a = (rng.random((4, 60)) < np.linspace(0.1, 0.9, 60)).astype(float)
    scores = {"a": {"x": a}}
    out = paired_bootstrap(scores, lambda m: m["a"]["x"], n_boot=4000, rng=np.random.default_rng(5), seeds=False,
                           keep=True)  # fmt: skip
    want = a.mean(axis=0).std(ddof=0) / np.sqrt(60)
    assert out["se"] == pytest.approx(want, rel=5 / np.sqrt(2 * 3999))
    assert out["estimate"] == pytest.approx(a.mean()) and out["values"].shape == (4000,)
    moved = paired_bootstrap({"a": {"x": a[::-1] + 1.0}}, lambda m: m["a"]["x"], n_boot=4000,
                             rng=np.random.default_rng(5), seeds=False, keep=True)  # fmt: skip
    assert np.allclose(moved["values"], out["values"] + 1.0)  # seeds reversed: held, so the same means
    with_seeds = paired_bootstrap(scores, lambda m: m["a"]["x"], n_boot=4000, rng=np.random.default_rng(5))
    assert "values" not in with_seeds and with_seeds["se"] > out["se"]  # the seeds' spread on top


def test_paired_bootstrap_refuses_unpaired_shapes():
    with pytest.raises(ValueError, match="pair the seeds"):
        paired_bootstrap({"a": {"x": np.zeros((3, 4))}, "b": {"x": np.zeros((2, 4))}}, lambda m: 0.0)
    with pytest.raises(ValueError, match="item set 'x'"):
        paired_bootstrap({"a": {"x": np.zeros((3, 4))}, "b": {"x": np.zeros((3, 5))}}, lambda m: 0.0)


def test_hartung_knapp_with_equal_variances_is_the_one_sample_t_interval():
    """Equal within-base variances give equal weights, so the HK mean is the plain mean and its interval scipy's
    t interval on k - 1 degrees of freedom (with 4 bases the critical value is 3.18)."""
    y = np.array([2.0, -1.0, 4.5, 1.0])
    out = hartung_knapp(y, np.full(4, 0.3))
    lo, hi = stats.t.interval(0.95, df=3, loc=y.mean(), scale=stats.sem(y))
    assert out["mean"] == pytest.approx(y.mean())
    assert (out["low"], out["high"]) == pytest.approx((lo, hi))
    assert out["t"] == pytest.approx(3.182, abs=1e-3)


def test_hartung_knapp_between_base_variance_and_weights():
    """tau^2 by DerSimonian-Laird recomputed by hand for a small example, and 0 when the estimates agree more than
    their variances allow (the mean then weights by 1 / v)."""
    y, v = np.array([1.0, 3.0, 8.0]), np.array([1.0, 2.0, 4.0])
    w = 1 / v
    mu_fe = (w * y).sum() / w.sum()
    q = (w * (y - mu_fe) ** 2).sum()
    tau2 = (q - 2) / (w.sum() - (w**2).sum() / w.sum())
    out = hartung_knapp(y, v)
    assert out["tau2"] == pytest.approx(tau2) and tau2 > 0
    ws = 1 / (v + tau2)
    assert out["mean"] == pytest.approx((ws * y).sum() / ws.sum())
    close = hartung_knapp(np.array([1.0, 1.1, 0.9]), np.array([1.0, 2.0, 4.0]))
    assert close["tau2"] == 0.0
    assert close["mean"] == pytest.approx((1.0 / 1 + 1.1 / 2 + 0.9 / 4) / (1 + 1 / 2 + 1 / 4))


def test_hartung_knapp_never_narrower_than_the_weights_allow():
    """Two bases whose estimates agree by chance: the plain Hartung-Knapp SE shrinks with their distance (to 0 for
    equal estimates); the modified one stays at the fixed-effect SE sqrt(1 / sum w) (tau^2 = 0 here)."""
    v = np.array([4.0, 4.0])
    plain = hartung_knapp(np.array([1.0, 1.1]), v, modified=False)
    out = hartung_knapp(np.array([1.0, 1.1]), v)
    assert plain["se"] == pytest.approx(0.05)  # sqrt(sum w (y - mu)^2 / ((k - 1) sum w)) = |y1 - y2| / 2
    assert out["se"] == pytest.approx(np.sqrt(1 / 0.5)) and out["tau2"] == 0.0
    wide = hartung_knapp(np.array([-10.0, 10.0]), v)  # q > 1: the modification changes nothing
    assert wide["se"] == pytest.approx(hartung_knapp(np.array([-10.0, 10.0]), v, modified=False)["se"])


def test_variance_components_of_a_design_with_known_mean_squares():
    """Effects that sum to zero inside each group (so the mean squares are exact): bases +-1 (var 2 with ddof 1
    over 2 bases, less the seed share), seeds +-0.5 within each base, items +-0.25 within each seed."""
    b, s, i = 2, 4, 6
    base = np.array([1.0, -1.0])[:, None, None]
    seed = np.array([0.5, -0.5, 0.5, -0.5])[None, :, None]
    item = np.array([0.25, -0.25] * 3)[None, None, :]
    d = 3.0 + base + seed + item * np.ones((b, s, 1))
    c = variance_components(d)
    ms_item = (0.25**2 * i * s * b) / (b * s * (i - 1))
    ms_seed = i * (0.5**2 * s * b) / (b * (s - 1))
    ms_base = s * i * (1.0**2 * b) / (b - 1)
    assert c["item"] == pytest.approx(ms_item)
    assert c["seed"] == pytest.approx((ms_seed - ms_item) / i)
    assert c["base"] == pytest.approx((ms_base - ms_seed) / (s * i))


def test_detectable_effect_has_its_power_in_a_simulation():
    """Simulated designs drawn from the stated components with the detectable effect as the true mean: the t test
    on the base means rejects in about `power` of them (binomial SE of 2,000 draws: 0.9 points)."""
    comp = {"base": 1.0, "seed": 2.0, "item": 40.0}
    B, S, I = 4, 3, 50
    delta = detectable_effect(comp, B, S, I, power=0.8)
    rng = np.random.default_rng(3)
    n = 2000
    d = (
        delta
        + rng.normal(0, 1.0, (n, B, 1, 1))
        + rng.normal(0, np.sqrt(2.0), (n, B, S, 1))
        + rng.normal(0, np.sqrt(40.0), (n, B, S, I))
    )
    base_means = d.mean(axis=(2, 3))
    t = base_means.mean(axis=1) / (base_means.std(axis=1, ddof=1) / np.sqrt(B))
    rejected = np.mean(np.abs(t) > stats.t.ppf(0.975, B - 1))
    # the t test's power at the noncentral value is close to, and by the approximation t_power below, its target
    assert 0.75 < rejected < 0.86
    se = standard_error(comp, B, S, I)
    assert se == pytest.approx(np.sqrt(1.0 / B + 2.0 / (B * S) + 40.0 / (B * S * I)))
    assert base_means.mean(axis=1).std(ddof=1) == pytest.approx(se, rel=0.05)
