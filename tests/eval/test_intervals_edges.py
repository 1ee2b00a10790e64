"""The edges of the verdict's statistics (anchorft.eval.intervals): what each function accepts at its smallest
design, what it refuses with which message, and the zero-SE case of the t test. Written for the mutants that the
statistical tests left alive (docs/testing.md, "The newest modules"): each case below fails for one of them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from anchorft.eval.intervals import bias_corrected, detectable_effect, holm, t_test_p, variance_components


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.1])
def test_bias_corrected_refuses_a_level_outside_0_1_by_name(level):
    with pytest.raises(ValueError, match=r"bias_corrected: need >= 2 replicates and 0 < level < 1, got 3 and"):
        bias_corrected(0.0, [0.1, 0.2, 0.3], level=level)


def test_bias_corrected_refuses_one_replicate_and_takes_two():
    with pytest.raises(ValueError, match=r"need >= 2 replicates .* got 1 and 0.95"):
        bias_corrected(0.0, [0.1])
    out = bias_corrected(1.0, [1.0, 3.0], level=0.9)  # mean 2: bias 1, corrected 0; SD (ddof 1) sqrt(2)
    z = stats.norm.ppf(0.95)
    assert out["bias"] == pytest.approx(1.0) and out["corrected"] == pytest.approx(0.0)
    assert out["se"] == pytest.approx(np.sqrt(2.0))
    assert out["low"] == pytest.approx(-z * np.sqrt(2.0)) and out["aware_high"] == pytest.approx(z * np.sqrt(2) + 1)


def test_detectable_effect_takes_two_bases_and_refuses_one_by_name():
    comps = {"base": 4.0, "seed": 0.0, "item": 0.0}
    # two bases: df 1, SE sqrt(4 / 2)
    expected = (stats.t.ppf(0.975, 1) + stats.t.ppf(0.8, 1)) * np.sqrt(2.0)
    assert detectable_effect(comps, bases=2, seeds=1, items=1) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"detectable_effect: need >= 2 bases, got 1"):
        detectable_effect(comps, bases=1, seeds=1, items=1)


def test_holm_takes_p_zero_and_refuses_outside_0_1_by_name():
    # p = 0 is a valid p-value (a test that rejects surely): adjusted 0; the others as Holm's step-down
    np.testing.assert_allclose(holm([0.0, 0.02, 0.04]), [0.0, 0.04, 0.04])
    for bad in ([0.1, -0.01], [1.2], [[0.1, 0.2]]):
        with pytest.raises(ValueError, match=r"holm: need a list of p-values in \[0, 1\], got"):
            holm(bad)


def test_t_test_p_with_zero_se_is_one_at_zero_and_zero_elsewhere():
    """A zero SE (every base the same number) has no t statistic: the mean is 0 for sure (p 1) or not 0 for sure
    (p 0), by the function's stated limit; a negative SE is never passed (an SE is a square root)."""
    assert t_test_p(0.0, 0.0) == 1.0
    assert t_test_p(0.3, 0.0) == 0.0
    assert t_test_p(1.0, 0.0, df=5) == 0.0
    # the ordinary case against scipy
    assert t_test_p(1.0, 0.5, df=5) == pytest.approx(2 * stats.t.sf(2.0, 5))


@pytest.mark.parametrize("shape", [(2, 1, 3), (1, 2, 3), (2, 3, 1), (2, 3)])
def test_variance_components_refuses_a_design_with_a_level_below_two_by_name(shape):
    with pytest.raises(ValueError, match=r"variance_components: need \(bases, seeds, items\), each >= 2, got shape"):
        variance_components(np.zeros(shape))


def test_bias_aware_p_with_zero_se():
    """A zero SE: the mean lies outside the bias bound for sure (p 0) or inside it (p 1)."""
    from anchorft.eval.intervals import bias_aware_p

    assert bias_aware_p(1.0, 0.0, 0.5) == 0.0
    assert bias_aware_p(0.25, 0.0, 0.5) == 1.0
    assert bias_aware_p(0.5, 0.0, 0.5) == 1.0  # on the bound: not excluded


def test_hartung_knapp_refuses_unpaired_variances_and_a_variance_of_zero_by_name():
    from anchorft.eval.intervals import hartung_knapp

    with pytest.raises(ValueError, match=r"hartung_knapp: need >= 2 estimates with one variance each, got 3 and 2"):
        hartung_knapp([1.0, 2.0, 3.0], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"need >= 2 estimates with one variance each, got 1 and 1"):
        hartung_knapp([1.0], [0.1])
    for v in ([0.1, 0.0], [0.1, -0.2]):
        with pytest.raises(ValueError, match=r"^hartung_knapp: every variance must be > 0$"):
            hartung_knapp([1.0, 2.0], v)


def test_holm_takes_p_one():
    np.testing.assert_allclose(holm([1.0, 0.5]), [1.0, 1.0])


def _scores(seeds=3, items=5, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "base": {"id": rng.integers(0, 2, size=(1, items)).astype(float)},
        "a": {"id": rng.integers(0, 2, size=(seeds, items)).astype(float)},
        "b": {"id": rng.integers(0, 2, size=(seeds, items)).astype(float)},
    }


def _gain(m):
    return m["a"]["id"] - m["base"]["id"]


def test_paired_bootstrap_defaults_are_2000_replicates_from_a_generator_seeded_0():
    from anchorft.eval.intervals import paired_bootstrap

    default = paired_bootstrap(_scores(), _gain)
    assert default["replicates"] == 2000
    assert default == paired_bootstrap(_scores(), _gain, n_boot=2000, rng=np.random.default_rng(0))
    assert default != paired_bootstrap(_scores(), _gain, n_boot=2000, rng=np.random.default_rng(1))


def test_paired_bootstrap_refuses_its_bad_numbers_by_name_and_takes_two_replicates():
    from anchorft.eval.intervals import paired_bootstrap

    assert paired_bootstrap(_scores(), _gain, n_boot=2)["replicates"] == 2
    with pytest.raises(ValueError, match=r"n_boot: need >= 2 replicates, got 1"):
        paired_bootstrap(_scores(), _gain, n_boot=1)
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"level: must be in \(0, 1\), got"):
            paired_bootstrap(_scores(), _gain, n_boot=10, level=level)


def test_paired_bootstrap_names_the_bad_shape_and_the_unpaired_seeds():
    from anchorft.eval.intervals import paired_bootstrap

    s = _scores()
    s["b"]["id"] = s["b"]["id"][0]  # one dimension
    with pytest.raises(ValueError, match=r"scores\['b'\]\['id'\]: expected \(seeds, items\), got shape \(5,\)"):
        paired_bootstrap(s, _gain, n_boot=10)
    s = _scores()
    s["b"]["id"] = np.zeros((2, 5))  # 2 seeds against 3
    with pytest.raises(ValueError, match=r"'b': 2 seeds, another method has 3; pair the seeds"):
        paired_bootstrap(s, _gain, n_boot=10)


def test_paired_bootstrap_of_single_row_methods_resamples_items_only():
    """Every method a single row (no fine-tuning seed): the estimate is the difference of the item means."""
    from anchorft.eval.intervals import paired_bootstrap

    s = {"base": {"id": np.array([[0.0, 1.0, 0.0, 0.0]])}, "a": {"id": np.array([[1.0, 1.0, 1.0, 0.0]])}}
    out = paired_bootstrap(s, _gain, n_boot=50, keep=True)
    assert out["estimate"] == pytest.approx(0.5)
    assert out["values"].shape == (50,)
