"""The coverage and power simulations: their bootstrap is the verdict's (the same replicates as
`paired_bootstrap` with the verdict's hull statistic), a small coverage run lies within its binomial error of the
nominal level, and the power of a null effect is the test's one-sided size."""

from __future__ import annotations

import numpy as np
import pytest

from anchorft.eval.intervals import paired_bootstrap
from anchorft.studies.testbed import verdict_sim as vs
from anchorft.studies.testbed.verdict import excess_statistic


@pytest.mark.parametrize("name", ["testbed", "collinear", "past-the-grid"])
def test_simulated_bootstrap_is_the_verdicts_paired_bootstrap_of_the_hull_excess(name):
    design = vs.DESIGNS[name]
    small = vs.Design(name, design.front, design.option_x, seeds=3, id_items=40, ood_items=30)
    scores = vs.simulate_base(small, np.random.default_rng(1))
    est, reps = vs.base_bootstrap(scores, 60, np.random.default_rng(2))
    front = [r for r in scores if r.startswith("f")]
    want = paired_bootstrap(scores, excess_statistic("option", front), 60, np.random.default_rng(2), keep=True)
    assert est == pytest.approx(want["estimate"], abs=1e-9)
    assert reps == pytest.approx(want["values"], abs=1e-9)


def test_the_design_puts_the_option_on_the_hull_of_its_front():
    for design in vs.DESIGNS.values():
        x, y = design.truth()
        pts = [(1.0, 0.0), *design.front]
        stat = excess_statistic("o", [f"f{i}" for i in range(len(design.front))])
        means = {"base": {"id": 0.0, "ood": 1.0}, "o": {"id": y / 100, "ood": x}}
        means |= {f"f{i}": {"id": g / 100, "ood": r} for i, (r, g) in enumerate(pts[1:])}
        assert stat(means) == pytest.approx(0.0, abs=1e-9)


def test_small_coverage_run_is_within_its_binomial_error_of_the_nominal_level():
    """60 studies of 6 bases on the near-tie design: the bias-aware per-base and pooled intervals cover 0 at 95 %
    to within 3 binomial SEs (coverage may exceed it: the widening is conservative); the percentile interval of
    the plain estimate, which carries no bias, is below that band per base."""
    r = vs.coverage(vs.DESIGNS["collinear"], 6, 60, 100, np.random.default_rng(5))
    low_base, _ = vs.binomial_band(0.95, r["n"]["base_aware"])
    low_pooled, _ = vs.binomial_band(0.95, r["n"]["pooled_aware"])
    assert r["coverage"]["base_aware"] >= low_base
    assert r["coverage"]["pooled_aware"] >= low_pooled
    assert r["coverage"]["base_percentile"] < low_base
    assert r["mean_plain"] < r["mean_corrected"] < 0  # biased down; the correction finds part of it


def test_power_of_a_null_effect_is_at_most_the_one_sided_size():
    rng = np.random.default_rng(9)
    sims = 3000
    p0 = vs.power(0.0, 6.0, (2.0, 3.0), 8, sims, rng)
    assert p0 <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / sims)
    assert vs.power(20.0, 1.0, (1.0,), 6, 300, rng) == 1.0
