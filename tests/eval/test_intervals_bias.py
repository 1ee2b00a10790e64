"""The verdict's new statistics against independent computations: Holm against statsmodels' multipletests, the
bootstrap bias correction against a statistic whose bias is known in closed form (the square of a mean), and the
bias-aware p-value against the interval it is the inverse of."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from anchorft.eval.intervals import bias_aware_p, bias_corrected, holm, t_test_p


@pytest.mark.parametrize("seed", range(6))
def test_holm_is_statsmodels_multipletests_holm(seed):
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    p = rng.uniform(0, 0.2, m) ** rng.uniform(0.5, 3)
    if m > 2:
        p[1] = p[0]  # ties
    reject, want, _, _ = multitest.multipletests(p, alpha=0.05, method="holm")
    assert holm(p) == pytest.approx(want, abs=1e-12)
    assert list(holm(p) <= 0.05) == list(reject)


def test_holm_refuses_what_is_not_a_p_value():
    with pytest.raises(ValueError):
        holm([0.1, 1.2])


def test_bias_correction_removes_the_known_bias_of_a_squared_mean():
    """theta = mu^2 estimated by xbar^2 is biased up by sigma^2 / n; the bootstrap (replicates drawn here) finds
    the plug-in bias s^2 / n (s^2 with ddof 0), so the corrected estimate's mean over many samples is mu^2 to
    within its Monte Carlo error while the plain one's is sigma^2 / n off."""
    rng = np.random.default_rng(3)
    mu, sigma, n, samples, n_boot = 1.0, 2.0, 10, 1500, 200
    plain, corrected, found = [], [], []
    for _ in range(samples):
        x = rng.normal(mu, sigma, n)
        reps = x[rng.integers(0, n, (n_boot, n))].mean(axis=1) ** 2
        out = bias_corrected(x.mean() ** 2, reps)
        plain.append(x.mean() ** 2)
        corrected.append(out["corrected"])
        found.append(out["bias"] - x.var() / n)  # the bootstrap's bias against the plug-in one
    mc = np.std(corrected) / np.sqrt(samples)
    assert abs(np.mean(plain) - mu**2 - sigma**2 / n) < 4 * np.std(plain) / np.sqrt(samples)
    assert abs(np.mean(corrected) - mu**2) < 4 * mc and sigma**2 / n > 6 * mc  # the bias gone, visibly
    assert abs(np.mean(found)) < 0.02  # the bootstrap's bias is the plug-in s^2 / n, up to resampling noise


def test_bias_corrected_interval_is_normal_around_the_corrected_estimate_and_widened_by_the_bias():
    values = np.array([1.0, 2.0, 4.0, 7.0])
    out = bias_corrected(2.0, values, level=0.9)
    z = stats.norm.isf(0.05)
    sd = np.std(values, ddof=1)
    assert out["bias"] == pytest.approx(1.5) and out["corrected"] == pytest.approx(0.5) and out["se"] == sd
    assert (out["low"], out["high"]) == pytest.approx((0.5 - z * sd, 0.5 + z * sd))
    assert (out["aware_low"], out["aware_high"]) == pytest.approx((0.5 - z * sd - 1.5, 0.5 + z * sd + 1.5))


@pytest.mark.parametrize("df", [None, 5, 15])
def test_bias_aware_p_is_the_level_at_which_the_widened_interval_touches_zero(df):
    rng = np.random.default_rng(df or 0)
    for _ in range(50):
        mean, se, bound = rng.normal(0, 3), rng.uniform(0.3, 2), rng.uniform(0, 1)
        p = bias_aware_p(mean, se, bound, df)
        q = stats.norm.isf(p / 2) if df is None else stats.t.isf(p / 2, df)
        if abs(mean) > bound:
            assert abs(mean) - q * se - bound == pytest.approx(0.0, abs=1e-9)  # the interval's end at 0
        else:
            assert p == 1.0
    x = rng.normal(0.5, 1, 7)  # with no bias bound: the one-sample t test
    assert t_test_p(x.mean(), x.std(ddof=1) / np.sqrt(7), 6) == pytest.approx(stats.ttest_1samp(x, 0).pvalue)
