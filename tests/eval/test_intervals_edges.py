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
