"""The non-target neurons' population drift and its fixed point rho* (anchorft.w2s.drift), against independent
computations: exact Hermite algebra for polynomial students, Monte Carlo for ReLU, a closed form for c_0 alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial import hermite_e as H
from numpy.polynomial import polynomial as P

from anchorft.w2s.drift import drift, fixed_point
from anchorft.w2s.hermite import get_activation

LABELS = [0.1435, 0.0, 0.2662, 0.0, 0.1276, 0.0, -0.0053]  # c_n = E[y He_n]/n! of the gain preset's labels


def _gauss_inner(p: np.ndarray, q: np.ndarray) -> float:
    """E[p(z) q(z)], z ~ N(0, 1), for polynomials in monomial coefficients: sum_n n! p_n q_n in the He basis."""
    a, b = H.poly2herme(p), H.poly2herme(q)
    n = min(len(a), len(b))
    return float(sum(math.factorial(k) * a[k] * b[k] for k in range(n)))


def _exact_drift(m: float, coeffs, activation: str, loss: str, c=0.3, pi=(1.0, 1.0), bias=False) -> float:
    """D(m) by polynomial algebra: p(z) = z sigma'(m z), r(z) = ybar(z) [- c pi_0 sigma(z) - c pi_1 sigma(m z) - b]
    (target group learnt, t = 1), D = E[r p]."""
    s = np.asarray(get_activation(activation).poly)
    scale = m ** np.arange(len(s))
    s_m = s * scale  # sigma(m z)
    p = P.polymulx(P.polyder(s_m) / m)  # z sigma'(m z) = z d/dz[sigma(m z)] / m
    r = H.herme2poly(np.asarray(coeffs, dtype=float))
    if loss == "squared":
        r = P.polysub(r, P.polyadd(c * pi[0] * s, c * pi[1] * s_m))
        if bias:
            r = P.polysub(r, [_gauss_inner(r, [1.0])])
    return _gauss_inner(r, p)


@pytest.mark.parametrize("activation", ["he2+he4", "he4", "he2+he6"])
@pytest.mark.parametrize(("loss", "bias"), [("correlation", False), ("squared", False), ("squared", True)])
def test_drift_matches_exact_polynomial_algebra(activation, loss, bias):
    for m in (0.1, 0.37, 0.8):
        want = _exact_drift(m, LABELS, activation, loss, bias=bias)
        got = drift(m, LABELS, activation, loss=loss, bias=bias)
        assert got == pytest.approx(want, rel=1e-8, abs=1e-10)
    ms = np.array([0.2, 0.5])
    np.testing.assert_allclose(
        drift(ms, LABELS, activation, loss=loss, bias=bias),
        [drift(float(x), LABELS, activation, loss=loss, bias=bias) for x in ms],
    )


def test_constant_labels_fixed_point_is_the_zero_of_mean_sigma_second():
    # c_0 alone: D(m) = c_0 m E[sigma''(m z)]; for h2 + h4, E[sigma''] = sqrt(2) + 12 (m^2 - 1) / sqrt(24)
    want = math.sqrt(1.0 - math.sqrt(2.0) * math.sqrt(24.0) / 12.0)  # 0.650
    fp = fixed_point([0.4], "he2+he4")
    assert fp["m_star"] == pytest.approx(want, abs=1e-5)
    assert fp["m_star"] == pytest.approx(0.650, abs=1e-3)
    assert drift(0.3, [0.4], "he2+he4") < 0 < drift(0.8, [0.4], "he2+he4")


def test_relu_drift_against_monte_carlo():
    rng = np.random.default_rng(0)
    z = rng.standard_normal(2_000_000)
    ybar = H.hermeval(z, LABELS)
    for m in (0.3, 0.7):
        v = ybar * z * (m * z > 0)
        mc, se = v.mean(), v.std() / math.sqrt(v.size)
        assert drift(m, LABELS, "relu") == pytest.approx(mc, abs=4 * se + 2e-3)


def test_no_interior_fixed_point_reasons():
    assert fixed_point(LABELS, "tanh")["reason"].startswith("no drift")  # odd student, even labels
    relu = fixed_point(LABELS, "relu")  # E[relu''] > 0: the constant pulls in from every overlap
    assert relu["m_star"] is None and "captured" in relu["reason"]
    out = fixed_point(LABELS, "relu", loss="squared")
    assert out["m_star"] is None and "pushed out" in out["reason"]


def test_theory_report_gives_rho_star():
    from anchorft.w2s.theory import preset_theory_report

    ov = ["loss=correlation", "label_samples=8192"]
    rep = preset_theory_report("gain", ov, n_seeds=2)
    assert rep["rho_star"] == pytest.approx(rep["rho_star_detail"]["m_star"] / 0.9)
    assert 0.33 < rep["rho_star"] < 0.46  # simulated boundary 0.39 (docs/w2s.md)
    assert rep["rho_star_detail"]["predicted_at_init"] == "pushed out of V_kappa"  # rho = 0.3 < rho*
    tanh = preset_theory_report("gain", [*ov, "activation=tanh"], n_seeds=1)
    assert tanh["rho_star"] is None and tanh["rho_star_detail"]["reason"]
