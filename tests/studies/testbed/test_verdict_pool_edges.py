"""`verdict.pooled_verdict` on designs built by hand: one base (its own bootstrap interval and p), several bases (the
counts above 0 and past the front, the averages, the corrected row widened by the bases' mean bias and its p), each
value computed here from its definition with scipy. Written for the mutants `make mutants` left alive in the
pooling (docs/testing.md)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from anchorft.eval.intervals import hartung_knapp
from anchorft.studies.testbed.verdict import pooled_verdict


def _base(estimate, corrected, se, bias, *, low=None, high=None, retention=0.9, gain=0.1, past_front=False) -> dict:
    return {
        "estimate": estimate, "corrected": corrected, "se": se, "bias": bias, "retention": retention, "gain": gain,
        "low": estimate - 2 if low is None else low, "high": estimate + 2 if high is None else high,
        "bc_low": corrected - 3, "bc_high": corrected + 1, "past_front": past_front,
    }  # fmt: skip


def _p(mean: float, se: float, bound: float, df: int | None) -> float:
    """Two-sided p with the bias bound taken off |mean| (1 when it covers it); normal for df None."""
    if abs(mean) <= bound:
        return 1.0
    z = (abs(mean) - bound) / se
    return 2 * (stats.norm.sf(z) if df is None else stats.t.sf(z, df))


def test_one_base_gives_its_own_bootstrap_interval_and_p():
    b = _base(3.0, 2.5, 1.2, -0.4, low=0.5, high=5.5, past_front=True)
    plain = pooled_verdict([{"a": b}])["a"]
    assert (plain["mean"], plain["se"], plain["low"], plain["high"], plain["df"]) == (3.0, 1.2, 0.5, 5.5, None)
    assert plain["p"] == pytest.approx(_p(3.0, 1.2, 0.0, None), rel=1e-12)
    corr = pooled_verdict([{"a": b}], key="corrected")["a"]
    assert (corr["mean"], corr["se"], corr["low"], corr["high"], corr["df"]) == (2.5, 1.2, -0.5, 3.5, None)
    assert corr["p"] == pytest.approx(_p(2.5, 1.2, 0.4, None), rel=1e-12)
    assert (corr["bases"], corr["above"], corr["past_front"], corr["per_base"]) == (1, 1, 1, [2.5])


def test_several_bases_pool_by_hartung_knapp_and_count_what_lies_above_and_past():
    bases = [
        {"a": _base(4.0, 3.0, 1.0, -1.0, retention=0.8, gain=0.2, past_front=True), "b": _base(1.0, 1.0, 1.0, 0.0)},
        {"a": _base(0.0, -0.5, 2.0, -0.5, retention=0.9, gain=0.1), "b": _base(1.0, 1.0, 1.0, 0.0)},
        {"a": _base(6.0, 5.0, 1.5, -1.5, retention=1.0, gain=0.3, past_front=True)},  # no "b": judged nowhere
    ]
    out = pooled_verdict(bases)
    assert list(out) == ["a"]
    a = out["a"]
    hk = hartung_knapp([4.0, 0.0, 6.0], [1.0, 4.0, 2.25])
    assert a["mean"] == pytest.approx(hk["mean"]) and (a["low"], a["high"]) == pytest.approx((hk["low"], hk["high"]))
    assert a["p"] == pytest.approx(_p(hk["mean"], hk["se"], 0.0, 2), rel=1e-10)
    assert (a["bases"], a["above"], a["past_front"], a["per_base"]) == (3, 2, 2, [4.0, 0.0, 6.0])  # 0 is not above
    assert (a["retention"], a["gain"]) == pytest.approx((0.9, 0.2))
    c = pooled_verdict(bases, key="corrected")["a"]
    hk = hartung_knapp([3.0, -0.5, 5.0], [1.0, 4.0, 2.25])
    bound = 1.0  # |mean of the biases -1, -0.5, -1.5|
    assert (c["hk_low"], c["hk_high"], c["bias_bound"]) == pytest.approx((hk["low"], hk["high"], bound))
    assert (c["low"], c["high"]) == pytest.approx((hk["low"] - bound, hk["high"] + bound))
    assert c["p"] == pytest.approx(_p(hk["mean"], hk["se"], bound, 2), rel=1e-10)
    assert math.isclose(c["mean"], hk["mean"]) and c["above"] == 2
