import math

import numpy as np
import pytest
import torch
from scipy import integrate

from anchorft.w2s.hermite import (
    generative_exponent,
    get_activation,
    get_transform,
    hermite_coefficients,
    hermite_normalised,
    information_exponent,
    transformed_information_exponent,
)


def quad_coefficient(f, j):
    """Independent computation: E[f(z) h_j(z)] by adaptive quadrature against the Gaussian density."""
    g = lambda z: f(z) * hermite_normalised(j, np.asarray(z)) * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    # split at the kinks of clipped functions so that quad converges
    pts = np.linspace(-6, 6, 121)
    total = integrate.quad(g, -np.inf, -6, limit=200)[0] + integrate.quad(g, 6, np.inf, limit=200)[0]
    for lo, hi in zip(pts[:-1], pts[1:]):
        total += integrate.quad(g, lo, hi, limit=200)[0]
    return total


@pytest.mark.parametrize("name", ["he2+he4", "tanh", "he3", "he1+he2"])
def test_coefficients_match_scipy_quad(name):
    f = get_activation(name).numpy
    c = hermite_coefficients(name, 6)
    ref = [quad_coefficient(f, j) for j in range(7)]
    np.testing.assert_allclose(c, ref, atol=1e-7)


def test_coefficients_closed_forms():
    # z^4 = He_4 + 6 He_2 + 3, so in the orthonormal basis: c0 = 3, c2 = 6 sqrt(2), c4 = sqrt(24)
    c = hermite_coefficients(lambda z: z**4, 6)
    np.testing.assert_allclose(c, [3, 0, 6 * math.sqrt(2), 0, math.sqrt(24), 0, 0], atol=1e-10)
    np.testing.assert_allclose(hermite_coefficients("he4", 6), [0, 0, 0, 0, 1, 0, 0], atol=1e-10)
    # E[relu(z) h_1(z)] = 1/2, E[relu(z)] = 1/sqrt(2 pi)
    c = hermite_coefficients("relu", 1, n_quad=150)
    assert abs(c[0] - 1 / math.sqrt(2 * math.pi)) < 2e-3 and abs(c[1] - 0.5) < 1e-6


def test_transformed_coefficients_match_quad():
    f, t = get_activation("he4").numpy, get_transform("zexp", 2.0)
    c = hermite_coefficients(lambda z: t(f(z)), 4)
    ref = [quad_coefficient(lambda z: float(t(f(np.asarray(z)))), j) for j in range(5)]
    # clipped functions have kinks: Gauss-Hermite converges slowly there, hence the looser tolerance
    np.testing.assert_allclose(c, ref, atol=3e-2)
    assert abs(ref[2]) > 0.3 and abs(ref[1]) < 1e-8


def test_exponents():
    assert information_exponent("he4") == 4
    assert transformed_information_exponent("he4", "zexp", clip=2.0) == 2
    assert information_exponent("he3") == 3
    assert transformed_information_exponent("he3", "zexp", clip=2.0) == 1
    assert transformed_information_exponent("he4", "identity", clip=None) == 4
    assert information_exponent("he2+he4") == 2


def test_generative_exponent_is_a_minimum_over_polynomial_transforms():
    # Damian et al. 2024: every polynomial link has generative exponent <= 2; He_3 (odd) reaches 1 through y^3
    assert generative_exponent("he4") == (2, 2)
    assert generative_exponent("he3") == (1, 3)
    assert generative_exponent("he1") == (1, 1)
    assert generative_exponent("he3", max_power=1) == (
        3,
        1,
    )  # the class of linear transforms: the information exponent
    # independent check of He_3 -> 1: E[He_3(z)^3 z] by Monte Carlo is far from 0
    z = np.random.default_rng(0).standard_normal(200_000)
    he3 = (z**3 - 3 * z) / math.sqrt(6)
    v = he3**3 * z
    assert abs(v.mean()) > 10 * v.std() / math.sqrt(v.size)


def test_torch_activation_matches_numpy_and_autograd():
    u = torch.linspace(-3, 3, 31, dtype=torch.float64, requires_grad=True)
    for name in ["he2+he4", "he4", "he3", "tanh", "he1+he2"]:
        act = get_activation(name)
        v = act.value(u)
        np.testing.assert_allclose(v.detach().numpy(), act.numpy(u.detach().numpy()), atol=1e-10)
        (grad,) = torch.autograd.grad(v.sum(), u)
        np.testing.assert_allclose(act.deriv(u).detach().numpy(), grad.numpy(), atol=1e-10)


def test_unknown_activation():
    with pytest.raises(ValueError, match="unknown activation"):
        get_activation("he4+swish")
    with pytest.raises(ValueError, match="unknown transform"):
        get_transform("exp")


def _quadrature_he_coefficients(f, n_max, n_quad=120):
    """Independent: c_n = E[f He_n] / n! by numpy's Gauss-HermiteE quadrature (hermegauss), weights / sqrt(2 pi)."""
    from numpy.polynomial import hermite_e as H

    x, w = H.hermegauss(n_quad)
    w = w / math.sqrt(2 * math.pi)
    out = []
    for n in range(n_max + 1):
        e = np.zeros(n + 1)
        e[n] = 1.0
        out.append(np.sum(w * f(x) * H.hermeval(x, e)) / math.factorial(n))
    return np.array(out)


def test_measured_coefficients_recover_a_hermite_series():
    from numpy.polynomial import hermite_e as H

    from anchorft.w2s.hermite import measured_coefficients

    series = np.array([0.3, -0.5, 0.25, 0.0, 0.1])  # y = sum_n c_n He_n(z)
    z, w = H.hermegauss(40)
    c, se = measured_coefficients(z, H.hermeval(z, series), 6, weights=w / math.sqrt(2 * math.pi))
    np.testing.assert_allclose(c, np.r_[series, 0, 0], atol=1e-10)
    assert np.isnan(se).all()


@pytest.mark.parametrize("transform", ["identity", "zexp"])
def test_measured_coefficients_match_quadrature_within_error(transform):
    from anchorft.w2s.hermite import measured_coefficients

    t = get_transform(transform, 2.0)
    f = get_activation("he4").numpy
    g = lambda z: t(f(z))  # noqa: E731
    ref = _quadrature_he_coefficients(g, 6)
    z = np.random.default_rng(0).standard_normal(400_000)
    c, se = measured_coefficients(z, g(z), 6)
    assert (se > 0).all()
    assert np.all(np.abs(c - ref) < 4 * se), (c, ref, se)
    # the orthonormal normalisation is the same numbers times sqrt(n!)
    cn, _ = measured_coefficients(z, g(z), 6, normalised=True)
    np.testing.assert_allclose(cn, c * np.sqrt([math.factorial(n) for n in range(7)]), rtol=1e-12)
    np.testing.assert_allclose(cn, hermite_coefficients(g, 6), atol=6 * se.max() * math.sqrt(720))


def test_the_names_read_without_torch_are_the_functions_names():
    """The config's checks read activation and transform names without torch (anchorft.w2s.names): the same names
    hermite builds functions for."""
    from anchorft.w2s.hermite import TRANSFORMS, get_activation
    from anchorft.w2s.names import TRANSFORM_NAMES, activation_terms

    assert tuple(TRANSFORMS) == TRANSFORM_NAMES
    assert activation_terms(" He2 + he4") == ("he2+he4", (2, 4)) and get_activation("he2+he4").name == "he2+he4"
    for bad in ("he13", "hee4", "he2+", "sigmoid"):
        with pytest.raises(ValueError, match="unknown activation/link"):
            activation_terms(bad)
