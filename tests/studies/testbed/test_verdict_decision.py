"""The decision rule (Holm over every row against statsmodels, the confirmatory row's outcomes) on made-up rows;
the knob picked again in every replicate is checked in test_verdict_statistics.py."""

from __future__ import annotations

import pytest

from anchorft.studies.testbed.decision import decide, decision_markdown


def _rows(means, ses, df=5):
    return {f"r{i}": {"mean": m, "low": m - 2.57 * s, "high": m + 2.57 * s, "p": 2 * __import__("scipy").stats.t.sf(
        abs(m) / s, df)} for i, (m, s) in enumerate(zip(means, ses))}  # fmt: skip


def test_every_row_is_decided_by_holm_adjusted_p_as_statsmodels_adjusts_it():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rows = _rows([-10.5, -3.3, -3.0, 6.1, 1.0, -0.6], [3.2, 1.0, 1.1, 2.5, 0.5, 0.3])
    d = decide(rows, None, None)
    p = [r["p"] for r in rows.values()]
    reject, want, _, _ = multitest.multipletests(p, alpha=0.05, method="holm")
    assert [d["rows"][r]["p_holm"] for r in rows] == pytest.approx(want, abs=1e-12)
    assert [d["rows"][r]["decided"] != "-" for r in rows] == list(reject)
    assert {d["rows"][r]["decided"] for r in rows if d["rows"][r]["decided"] != "-"} <= {"above", "under"}
    assert d["confirmatory"] is None and "Holm-adjusted over 6" in decision_markdown(d)


@pytest.mark.parametrize(
    ("low", "high", "outcome"),
    [
        (0.5, 9.0, "above the front"),
        (4.5, 9.0, "above the front by at least the SESOI"),
        (-7.0, -0.2, "under the front"),
        (-3.0, 3.5, "no effect of interest (inside +-SESOI)"),
        (-3.0, 8.0, "not decided"),
    ],
)
def test_the_confirmatory_row_is_judged_alone_against_zero_and_the_sesoi(low, high, outcome):
    rows = {"subspace": {"mean": (low + high) / 2, "low": low, "high": high, "p": 0.5}, "x": {"mean": 0.0,
            "low": -1.0, "high": 1.0, "p": 0.9}}  # fmt: skip
    d = decide(rows, "subspace", 4.0)
    assert d["confirmatory"]["outcome"] == outcome
    assert "## Confirmatory" in decision_markdown(d)


def test_pooled_bias_corrected_rows_are_hartung_knapp_widened_by_the_mean_bias_each_side():
    """Rows with bias-corrected estimates: the pooled mean and Hartung-Knapp interval are statsmodels' (DL, HKSJ
    scale floored at 1) on the corrected values; the interval is widened by |mean bias| on both sides."""
    import numpy as np
    from scipy import stats

    from anchorft.studies.testbed.verdict import pooled_verdict

    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    y, se, bias = [3.0, -1.0, 5.5, 2.0, 0.5], [1.2, 0.8, 2.0, 1.5, 0.6], [-0.5, -1.0, 0.2, -0.7, -0.4]
    per_base = [{"r": {"estimate": yi + bi, "corrected": yi, "bias": bi, "se": si, "retention": 0.9, "gain": 1.0}}
                for yi, si, bi in zip(y, se, bias)]  # fmt: skip
    p = pooled_verdict(per_base, 0.95, "corrected")["r"]
    with np.errstate(invalid="ignore"):
        ref = meta.combine_effects(np.array(y), np.square(se), method_re="dl")
    hk_se = np.sqrt(max(1.0, ref.scale_hksj_re) * ref.var_eff_w_re)
    t, bound = stats.t.isf(0.025, 4), abs(np.mean(bias))
    assert p["mean"] == pytest.approx(ref.mean_effect_re, rel=1e-12) and p["bias_bound"] == pytest.approx(bound)
    assert (p["low"], p["high"]) == pytest.approx((p["mean"] - t * hk_se - bound, p["mean"] + t * hk_se + bound))
    assert (p["hk_low"], p["hk_high"]) == pytest.approx((p["mean"] - t * hk_se, p["mean"] + t * hk_se))
