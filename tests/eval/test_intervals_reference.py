"""`anchorft.eval.intervals` against implementations it shares no code with: statsmodels' meta-analysis
(`combine_effects`, DerSimonian-Laird, its WLS-scale "HKSJ" variance) and nested ANOVA (`anova_lm`), the
textbook formulas written out here in numpy, scipy's noncentral t, and simulations of the designs a power
calculation sizes.

Tolerances: 1e-12 relative where both sides compute the same deterministic quantity; from the binomial standard
error where a rate is simulated; from the size of the approximation where the code approximates (stated at each
assertion)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import optimize, stats

from anchorft.eval.intervals import detectable_effect, hartung_knapp, standard_error, variance_components

EXACT = {"rel": 1e-12, "abs": 1e-12}


def _combine(y, v):
    """statsmodels' random-effects combination (DerSimonian-Laird tau^2, t intervals on k - 1 df). Its tau^2 is
    not truncated at 0, so where it is negative enough its random-effects SDs are NaN (sqrt of a negative
    variance; silenced): those designs are compared with its fixed-effect rows."""
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    with np.errstate(invalid="ignore"):
        return meta.combine_effects(np.asarray(y, dtype=float), np.asarray(v, dtype=float), method_re="dl", use_t=True)


def _textbook(y, v, level=0.95, modified=True) -> dict[str, float]:
    """DerSimonian-Laird tau^2 truncated at 0, random-effects weights, the Hartung-Knapp variance with the
    max(1, q) floor (Roever, Knapp and Friede 2015), the t interval on k - 1 degrees of freedom; written out."""
    y, v = np.asarray(y, dtype=float), np.asarray(v, dtype=float)
    k = len(y)
    w = 1 / v
    mu_fe = np.dot(w, y) / w.sum()
    q_stat = np.dot(w, (y - mu_fe) ** 2)
    tau2 = max(0.0, (q_stat - (k - 1)) / (w.sum() - np.dot(w, w) / w.sum()))
    ws = 1 / (v + tau2)
    mu = np.dot(ws, y) / ws.sum()
    q = np.dot(ws, (y - mu) ** 2) / (k - 1)
    var = (max(1.0, q) if modified else q) / ws.sum()
    t = stats.t.ppf(1 - (1 - level) / 2, k - 1)
    return {"mean": mu, "se": np.sqrt(var), "low": mu - t * np.sqrt(var), "high": mu + t * np.sqrt(var), "tau2": tau2}


# per-base estimates and their variances, unequal; what each design is built to exercise is asserted in the tests
HETEROGENEOUS_Q_ABOVE_1 = [
    ([0.8, -1.8, -3.0, 3.5], [0.84, 0.31, 0.85, 2.31]),
    ([4.0, 0.3, -1.5], [2.39, 0.68, 0.15]),
]
HETEROGENEOUS_Q_BELOW_1 = [
    ([4.0, -2.0, 0.5], [0.2, 0.2, 5.0]),
    ([-1.2, 0.4, 2.9, 5.1, 1.0], [0.3, 1.1, 0.6, 2.5, 0.9]),
]
NEGATIVE_RAW_TAU2 = ([1.0, 1.3, 0.2, 2.5, 1.9, 0.8], [0.4, 0.1, 0.9, 2.0, 0.3, 0.6])


@pytest.mark.parametrize("y, v", HETEROGENEOUS_Q_ABOVE_1)
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_hartung_knapp_is_statsmodels_hksj_when_bases_disagree(y, v, level):
    """Bases that disagree beyond their variances (tau^2 > 0) and a Hartung-Knapp scale q > 1, so the max(1, q)
    floor is inactive: mean, tau^2, SE and t interval are statsmodels' random-effects "wls" (HKSJ) row."""
    ref = _combine(y, v)
    assert ref.tau2 > 0 and ref.scale_hksj_re > 1  # the design
    out = hartung_knapp(y, v, level=level)
    low, high = ref.conf_int(alpha=1 - level, use_t=True)[3]
    assert out["mean"] == pytest.approx(ref.mean_effect_re, **EXACT)
    assert out["tau2"] == pytest.approx(ref.tau2, **EXACT)
    assert out["se"] == pytest.approx(np.sqrt(ref.var_hksj_re), **EXACT)
    assert (out["low"], out["high"]) == pytest.approx((low, high), **EXACT)
    assert out["df"] == len(y) - 1 and out["t"] == pytest.approx(stats.t.isf((1 - level) / 2, len(y) - 1), **EXACT)
    assert out == pytest.approx({**_textbook(y, v, level), "df": len(y) - 1, "t": out["t"]}, **EXACT)
    with warnings.catch_warnings():  # its per-base rows want sample sizes for a t interval; only the pooled is used
        warnings.simplefilter("ignore")
        frame = ref.summary_frame(alpha=1 - level, use_t=True).loc["random effect wls"]
    assert (out["mean"], out["se"], out["low"], out["high"]) == pytest.approx(
        (frame["eff"], frame["sd_eff"], frame["ci_low"], frame["ci_upp"]), **EXACT
    )


@pytest.mark.parametrize("y, v", HETEROGENEOUS_Q_BELOW_1)
def test_hartung_knapp_floor_applies_when_the_scale_is_below_1(y, v):
    """tau^2 > 0 but q < 1: the modified variance is statsmodels' plain random-effects variance 1 / sum w* (scale
    1), the unmodified one its HKSJ variance q / sum w*; both on k - 1 degrees of freedom."""
    ref = _combine(y, v)
    assert ref.tau2 > 0 and ref.scale_hksj_re < 1  # the design
    out, plain = hartung_knapp(y, v), hartung_knapp(y, v, modified=False)
    assert out["mean"] == pytest.approx(ref.mean_effect_re, **EXACT)
    assert out["se"] == pytest.approx(ref.sd_eff_w_re, **EXACT)
    assert (out["low"], out["high"]) == pytest.approx(tuple(ref.conf_int(use_t=True)[1]), **EXACT)
    assert plain["se"] == pytest.approx(np.sqrt(ref.var_hksj_re), **EXACT)
    assert (plain["low"], plain["high"]) == pytest.approx(tuple(ref.conf_int(use_t=True)[3]), **EXACT)
    assert plain["se"] < out["se"]
    assert out == pytest.approx({**_textbook(y, v), "df": len(y) - 1, "t": out["t"]}, **EXACT)
    assert plain == pytest.approx({**_textbook(y, v, modified=False), "df": len(y) - 1, "t": plain["t"]}, **EXACT)


def test_hartung_knapp_with_a_negative_raw_between_base_variance_is_the_fixed_effect_mean():
    """Bases that agree more than their variances allow: the DerSimonian-Laird moment estimate is negative
    (statsmodels keeps it untruncated), ours is 0, so the weights are 1 / v and the mean, the floored variance
    1 / sum w and the unmodified q / sum w are statsmodels' fixed-effect ones (q = Q / (k - 1) < 1 here)."""
    y, v = NEGATIVE_RAW_TAU2
    ref = _combine(y, v)
    assert ref.tau2 < 0 and ref.q < len(y) - 1  # the design: a negative raw estimate
    out, plain = hartung_knapp(y, v), hartung_knapp(y, v, modified=False)
    assert out["tau2"] == 0.0
    assert out["mean"] == pytest.approx(ref.mean_effect_fe, **EXACT)
    assert out["se"] == pytest.approx(ref.sd_eff_w_fe, **EXACT)
    assert (out["low"], out["high"]) == pytest.approx(tuple(ref.conf_int(use_t=True)[0]), **EXACT)
    assert plain["se"] == pytest.approx(np.sqrt(ref.var_hksj_fe), **EXACT)
    assert (plain["low"], plain["high"]) == pytest.approx(tuple(ref.conf_int(use_t=True)[2]), **EXACT)
    assert out == pytest.approx({**_textbook(y, v), "df": 5, "t": out["t"]}, **EXACT)


def test_hartung_knapp_with_agreeing_bases_keeps_the_fixed_effect_width():
    """Every base estimates the same value: Q = 0, tau^2 = 0 and q = 0, so the plain Hartung-Knapp interval has
    no width while the floored one is the fixed-effect interval, value +- t_{k-1} / sqrt(sum 1 / v), known by
    construction."""
    v = np.array([0.2, 0.5, 1.0, 3.0])
    y = np.full(4, 1.7)
    out, plain = hartung_knapp(y, v), hartung_knapp(y, v, modified=False)
    se = 1 / np.sqrt((1 / v).sum())
    t = stats.t.ppf(0.975, 3)
    assert out["tau2"] == 0.0 and out["mean"] == pytest.approx(1.7, **EXACT)
    assert out["se"] == pytest.approx(se, **EXACT)
    assert (out["low"], out["high"]) == pytest.approx((1.7 - t * se, 1.7 + t * se), **EXACT)
    assert plain["se"] == pytest.approx(0.0, **EXACT)  # the weighted mean of equal values: 1e-16 off at most
    assert plain["low"] == pytest.approx(1.7, **EXACT) and plain["high"] == pytest.approx(1.7, **EXACT)
    ref = _combine(y, v)  # its raw tau^2 is -(k - 1) / c < 0: its fixed-effect row is the reference
    assert ref.tau2 < 0 and ref.sd_eff_w_fe == pytest.approx(se, **EXACT)


def test_hartung_knapp_two_bases_equal_variances_from_its_definition():
    """k = 2, equal variances v, estimates 2 d apart: Q = 2 d^2 / v and c = 1 / v, so tau^2 = max(0, 2 d^2 - v);
    equal weights put the mean at the midpoint, q / sum w* = d^2 and 1 / sum w* = (v + tau^2) / 2: the interval
    is midpoint +- t_1 max(d, sqrt((v + tau^2) / 2)), t_1 = 12.71 (one degree of freedom, not two). d = 3: the
    bases disagree (tau^2 > 0, SE d); d = 0.2: they agree (tau^2 = 0, the floor, SE sqrt(v / 2))."""
    for d, v in ((3.0, 1.0), (0.2, 1.0)):
        y = np.array([5.0 - d, 5.0 + d])
        out = hartung_knapp(y, np.full(2, v))
        tau2 = max(0.0, ((2 * d**2 / v) - 1) / (2 / v - 1 / v))
        se = max(d, np.sqrt((v + tau2) / 2))
        assert out["tau2"] == pytest.approx(tau2, **EXACT) and out["mean"] == pytest.approx(5.0, **EXACT)
        assert out["se"] == pytest.approx(se, **EXACT)
        assert out["high"] - out["mean"] == pytest.approx(12.706204736174707 * se, rel=1e-12)


def _nested_anova(d) -> dict[str, float]:
    """Variance components of a balanced bases x seeds x items design from statsmodels' sequential (type I) ANOVA
    of y ~ base + base:seed (seeds nested in bases), the expected mean squares solved for the components, negative
    solutions set to 0."""
    smf = pytest.importorskip("statsmodels.formula.api")
    from statsmodels.stats.anova import anova_lm

    pd = pytest.importorskip("pandas")
    b, s, i = d.shape
    base, seed, _ = np.meshgrid(range(b), range(s), range(i), indexing="ij")
    frame = pd.DataFrame({"y": d.ravel(), "base": base.ravel(), "seed": seed.ravel()})
    table = anova_lm(smf.ols("y ~ C(base) + C(base):C(seed)", frame).fit(), typ=1)
    assert list(table["df"]) == [b - 1, b * (s - 1), b * s * (i - 1)]  # the nested design's degrees of freedom
    ms_base, ms_seed, ms_item = table["mean_sq"]
    return {
        "base": max(0.0, (ms_base - ms_seed) / (s * i)),
        "seed": max(0.0, (ms_seed - ms_item) / i),
        "item": ms_item,
    }


@pytest.mark.parametrize(
    "shape, sds", [((5, 3, 8), (1.5, 0.8, 2.0)), ((4, 2, 30), (3.0, 0.5, 10.0)), ((2, 2, 2), (1, 1, 1))]
)
def test_variance_components_are_the_nested_anova_of_statsmodels(shape, sds):
    """A simulated nested design (normal base, seed-within-base and item-within-seed effects of distinct sizes):
    the three components are those of statsmodels' nested ANOVA, each in its own slot."""
    rng = np.random.default_rng(sum(shape))
    b, s, i = shape
    d = 7.0 + rng.normal(0, sds[0], (b, 1, 1)) + rng.normal(0, sds[1], (b, s, 1)) + rng.normal(0, sds[2], (b, s, i))
    got, want = variance_components(d), _nested_anova(d)
    assert set(got) == {"base", "seed", "item"}
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)  # the OLS route sums otherwise: 1e-9
    if min(shape) > 2:  # three distinct positive components: one in another's slot would show
        assert 0 < got["seed"] < got["base"] < got["item"] or 0 < got["seed"] < got["item"] < got["base"]


def test_variance_components_truncate_negative_moment_estimates_at_zero():
    """Built so the raw moment estimates are negative: every base with the same mean (MS_base = 0 < MS_seed) and,
    in the second design, every seed too (MS_seed = 0 < MS_item); those components are 0, the others are the
    nested ANOVA's."""
    rng = np.random.default_rng(11)
    d = rng.normal(0, 1, (4, 3, 6)) + rng.normal(0, 2, (4, 3, 1))
    d -= d.mean(axis=(1, 2), keepdims=True)  # equal base means
    got = variance_components(d)
    assert got["base"] == 0.0 and got["seed"] > 0 and got == pytest.approx(_nested_anova(d), rel=1e-9, abs=1e-12)
    flat = d - d.mean(axis=2, keepdims=True) + 3.0  # equal seed means: no base or seed spread left
    got = variance_components(flat)
    assert got["base"] == pytest.approx(0.0, abs=1e-12) and got["seed"] == 0.0 and got["item"] > 0
    assert got == pytest.approx(_nested_anova(flat), rel=1e-9, abs=1e-12)


def _power(delta_over_se: float, df: int, level: float = 0.95) -> float:
    """Power of the two-sided one-sample t test on df degrees of freedom at noncentrality delta / SE (scipy's
    noncentral t; the lower tail as the upper tail of -T, which stays finite far out)."""
    crit = stats.t.isf((1 - level) / 2, df)
    return float(stats.nct.sf(crit, df, delta_over_se) + stats.nct.sf(crit, df, -delta_over_se))


def _exact_detectable(df: int, level: float = 0.95, power: float = 0.8) -> float:
    """The noncentrality at which the t test has `power`, solved on the noncentral t."""
    return optimize.brentq(lambda d: _power(d, df, level) - power, 0.1, 20.0, xtol=1e-12)


COMP = {"base": 2.0, "seed": 3.0, "item": 50.0}


@pytest.mark.parametrize("bases", [4, 5, 6, 8, 12])
@pytest.mark.parametrize("level, power", [(0.95, 0.8), (0.9, 0.9)])
def test_detectable_effect_against_the_noncentral_t_on_b_minus_1_df(bases, level, power):
    """The effect the t test on the B base means (B - 1 df, SE from the components) detects with `power`, solved
    on scipy's noncentral t: the code's (t_{1-alpha/2} + t_{power}) x SE shifts a central t instead, within 2.5 %
    of it from 4 bases on (at 95 % and 80 % power it falls short, by 2.3 % at 4 bases, 0.7 % at 6, 0.3 % at 8;
    at 90 % and 90 % it exceeds it by up to 1.8 %), and its power at the code's effect is within 2 points of the
    target."""
    S, items = 3, 40
    se = standard_error(COMP, bases, S, items)
    assert se == pytest.approx(np.sqrt(2.0 / bases + 3.0 / (bases * S) + 50.0 / (bases * S * items)), **EXACT)
    got = detectable_effect(COMP, bases, S, items, level=level, power=power)
    exact = _exact_detectable(bases - 1, level, power) * se
    assert abs(exact - got) / exact < 0.025
    assert got <= exact or (level, power) != (0.95, 0.8)
    assert abs(_power(got / se, bases - 1, level) - power) < 0.02
    want = (stats.t.ppf(1 - (1 - level) / 2, bases - 1) + stats.t.ppf(power, bases - 1)) * se
    assert got == pytest.approx(want, **EXACT)


@pytest.mark.parametrize("bases, seeds, items, comp", [(4, 3, 20, COMP), (6, 2, 30, {"base": 0.0, "seed": 8.0,
                                                                                   "item": 30.0})])  # fmt: skip
def test_detectable_effect_in_a_simulation_of_the_nested_design(bases, seeds, items, comp):
    """20,000 designs of B bases x S seeds x I items drawn from the components with the detectable effect as the
    true mean, each tested by the two-sided t test on its B base means: the rejection rate is the noncentral t's
    power at effect / SE (B - 1 df) within 4 binomial SEs (0.0116 at 80 %), and the target within those plus the
    approximation's shortfall (2 points at B >= 4; the previous test)."""
    rng = np.random.default_rng(bases * 100 + seeds)
    n = 20_000
    delta = detectable_effect(comp, bases, seeds, items)
    d = (
        delta
        + rng.normal(0, np.sqrt(comp["base"]), (n, bases, 1, 1))
        + rng.normal(0, np.sqrt(comp["seed"]), (n, bases, seeds, 1))
        + rng.normal(0, np.sqrt(comp["item"]), (n, bases, seeds, items))
    )
    m = d.mean(axis=(2, 3))
    t = m.mean(axis=1) / (m.std(axis=1, ddof=1) / np.sqrt(bases))
    rate = float(np.mean(np.abs(t) > stats.t.isf(0.025, bases - 1)))
    predicted = _power(delta / standard_error(comp, bases, seeds, items), bases - 1)
    mc_se = np.sqrt(predicted * (1 - predicted) / n)
    assert abs(rate - predicted) < 4 * mc_se
    assert abs(rate - 0.8) < 0.02 + 4 * mc_se
