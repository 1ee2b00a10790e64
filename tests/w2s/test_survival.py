import math

import numpy as np
import pytest
from scipy import stats

from anchorft.w2s.survival import censored_lognormal_loglik, fit_censored_lognormal


def _planted(rng, slope=1.5, intercept=2.0, sigma=0.35, xs=(16, 32, 64, 128, 256), seeds=8, budget=None):
    per_seed, budgets = [], []
    for x in xs:
        t = np.exp(intercept + slope * math.log(x) + sigma * rng.standard_normal(seeds))
        c = budget if budget is not None else math.inf
        per_seed.append([float(v) if v <= c else None for v in t])
        budgets.append(c if budget is not None else float(t.max()) * 2)
    return list(xs), per_seed, budgets


def test_loglik_matches_direct_sum():
    """Independent computation: the density of log T and the survival function written out by hand."""
    lx = np.log([10.0, 20.0, 40.0])
    lt = np.log([100.0, 250.0, 900.0])
    obs = np.array([True, True, False])
    a, b, s = 0.5, 1.4, 0.3
    mu = a + b * lx
    direct = sum(
        -0.5 * ((lt[i] - mu[i]) / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)) for i in range(2)
    ) + math.log(1 - stats.norm.cdf((lt[2] - mu[2]) / s))
    assert censored_lognormal_loglik(np.array([a, b, math.log(s)]), lx, lt, obs) == pytest.approx(direct, rel=1e-10)


def test_recovers_planted_slope_under_censoring():
    """A planted slope 1.5 with the two largest x mostly censored: the censored fit's interval holds 1.5, while
    the naive fit (censored seeds replaced by the budget) is biased low and its interval excludes it."""
    rng = np.random.default_rng(3)
    xs, per_seed, budgets = _planted(rng, budget=math.exp(2.0 + 1.5 * math.log(128)))
    n_cens = sum(v is None for vals in per_seed for v in vals)
    assert 8 <= n_cens <= 24  # about half of the two largest points' seeds and all of the last
    fit = fit_censored_lognormal(xs, per_seed, budgets)
    lo, hi = fit["ci"]
    assert lo < 1.5 < hi
    assert hi - lo < 0.6
    naive = [[budgets[i] if v is None else v for v in vals] for i, vals in enumerate(per_seed)]
    nfit = fit_censored_lognormal(xs, naive, [1e30] * len(xs))
    assert nfit["n_censored"] == 0
    assert nfit["ci"][1] < 1.5  # ignoring the censoring biases the slope down


@pytest.mark.slow
def test_coverage_of_the_profile_interval():
    """Over 40 planted data sets the 95% interval holds the planted slope in at least 34 (binomial lower tail)."""
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(40):
        xs, per_seed, budgets = _planted(rng, slope=1.0, budget=math.exp(2.0 + 1.0 * math.log(150)))
        lo, hi = fit_censored_lognormal(xs, per_seed, budgets)["ci"]
        hits += lo is not None and hi is not None and lo < 1.0 < hi
    assert hits >= 34


def test_degenerate_and_bad_input():
    fit = fit_censored_lognormal([16, 32], [[None, None], [None, 5.0]], [10.0, 10.0])
    assert fit["slope"] is None and fit["n_censored"] == 3
    with pytest.raises(ValueError):
        fit_censored_lognormal([16, 32], [[1.0], [2.0]], [10.0, 10.0], level=1.5)
    with pytest.raises(ValueError):
        fit_censored_lognormal([16, -32], [[1.0], [2.0]], [10.0, 10.0])


def test_gradient_matches_finite_differences():
    from scipy.optimize import approx_fprime

    from anchorft.w2s.survival import censored_lognormal_grad

    rng = np.random.default_rng(0)
    lx = np.log(rng.uniform(10, 200, 12))
    lt = 1.0 + 1.2 * lx + 0.4 * rng.standard_normal(12)
    obs = rng.random(12) < 0.6
    p = np.array([0.8, 1.1, math.log(0.5)])
    num = approx_fprime(p, lambda q: censored_lognormal_loglik(q, lx, lt, obs), 1e-7)
    np.testing.assert_allclose(censored_lognormal_grad(p, lx, lt, obs), num, rtol=1e-5, atol=1e-5)


def test_a_huge_trial_sigma_scores_as_its_limit_instead_of_overflowing():
    """An optimiser's line search can try log sigma past exp's float range (it did, in the d-scaling-w2s quick
    sweep's fit): the log-likelihood is then its limit, z = 0 for every seed, and the gradient finite."""
    from anchorft.w2s.survival import censored_lognormal_grad

    log_x, log_t = np.log([10.0, 10.0, 20.0]), np.log([5.0, 7.0, 9.0])
    observed = np.array([True, True, False])
    got = censored_lognormal_loglik(np.array([0.1, 0.2, 1000.0]), log_x, log_t, observed)
    assert got == pytest.approx(2 * (-0.5 * math.log(2 * math.pi) - 1000.0) + math.log(0.5))
    assert np.all(np.isfinite(censored_lognormal_grad(np.array([0.1, 0.2, 1000.0]), log_x, log_t, observed)))
