"""Hermite tools for single-index models (Awano and Suzuki, arXiv:2605.12908, Sec. 2).

Normalised probabilists' Hermite polynomials h_j = He_j / sqrt(j!) are orthonormal under the standard
Gaussian: E[h_i(z) h_j(z)] = delta_ij. A link sigma* has the Hermite expansion sigma* = sum_j c_j h_j with
c_j = E[sigma*(z) h_j(z)], computed here by Gauss-Hermite quadrature (`numpy.polynomial.hermite_e.hermegauss`).

- information exponent p (Ben Arous et al. 2021): the lowest j >= 1 with c_j != 0;
- information exponent under one label transformation T: the lowest j >= 1 with E[T(sigma*(z)) h_j(z)] != 0.
  With T(y) = y exp(y) applied to clip(y, -a, a) (the clip makes the moments finite; see docs/w2s.md) an even
  link such as He_4 gets 2;
- generative exponent (Damian et al. 2024): the minimum of that over transforms T; here over polynomial
  transforms of bounded degree (`generative_exponent`): He_4 gets 2, He_3 gets 1.

Activations and links are chosen by name: "heJ" (normalised He_J), sums such as "he2+he4", "relu", "tanh".
Each name gives a NumPy function (for quadrature) and torch functions for the value and the derivative.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from numpy.polynomial import hermite_e as H
from numpy.polynomial import polynomial as P

from anchorft.w2s.names import activation_terms

__all__ = [
    "Activation",
    "get_activation",
    "hermite_normalised",
    "hermite_coefficients",
    "measured_coefficients",
    "information_exponent",
    "generative_exponent",
    "transformed_information_exponent",
    "get_transform",
    "TRANSFORMS",
]


def hermite_normalised(j: int, z: np.ndarray) -> np.ndarray:
    """h_j(z) = He_j(z) / sqrt(j!), the orthonormal probabilists' Hermite polynomial."""
    return H.hermeval(z, [0.0] * j + [1.0]) / math.sqrt(math.factorial(j))


@dataclass(frozen=True)
class Activation:
    """An activation/link: `numpy(z)` for quadrature, `value(u)` and `deriv(u)` for torch tensors.

    Polynomial activations keep their monomial coefficients (`poly`, lowest degree first) and are
    evaluated by Horner's rule, in the dtype and on the device of the input.
    """

    name: str
    numpy: Callable[[np.ndarray], np.ndarray]
    value: Callable[[torch.Tensor], torch.Tensor]
    deriv: Callable[[torch.Tensor], torch.Tensor]
    poly: tuple[float, ...] | None = None
    both: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    def value_and_deriv(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sigma(u), sigma'(u)), sharing u^2 for polynomials with a parity."""
        if self.both is not None:
            return self.both(u)
        return self.value(u), self.deriv(u)


def _horner(coeffs: tuple[float, ...], u: torch.Tensor) -> torch.Tensor:
    if len(coeffs) == 1:
        return torch.full_like(u, coeffs[0])
    out = u * coeffs[-1]
    if coeffs[-2] != 0.0:
        out = out + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        out = out * u
        if c != 0.0:
            out = out + c
    return out


def _parity_eval(coeffs: tuple[float, ...]) -> Callable[[torch.Tensor], torch.Tensor]:
    """Evaluator for a polynomial (monomial coefficients, lowest first), by Horner's rule in u^2 when it has a
    parity (even: p(u) = q(u^2); odd: p(u) = u q(u^2)): half the multiplications of plain Horner."""
    even = all(c == 0.0 for c in coeffs[1::2])
    odd = all(c == 0.0 for c in coeffs[0::2])
    if not (even or odd) or len(coeffs) < 3:
        return lambda u: _horner(coeffs, u)
    sub = tuple(coeffs[0::2]) if even else tuple(coeffs[1::2])

    def ev(u: torch.Tensor) -> torch.Tensor:
        v = u * u
        out = _horner(sub, v) if len(sub) > 1 else torch.full_like(u, sub[0])
        return out if even else out * u

    return ev


@functools.lru_cache(maxsize=64)
def _poly_activation(name: str, degrees: tuple[int, ...]) -> Activation:
    """Polynomial activation (built once per name: the Activation is immutable, so it is shared)."""
    herme = np.zeros(max(degrees) + 1)
    for j in degrees:
        herme[j] += 1.0 / math.sqrt(math.factorial(j))
    mono = H.herme2poly(herme)  # monomial coefficients, lowest first
    dmono = P.polyder(mono) if len(mono) > 1 else np.zeros(1)
    coeffs = tuple(float(x) for x in mono)
    dcoeffs = tuple(float(x) for x in dmono)
    both = None
    if all(c == 0.0 for c in coeffs[1::2]) and len(coeffs) >= 3:  # even sigma: sigma = q(u^2), sigma' = u r(u^2)
        q, r = tuple(coeffs[0::2]), tuple(dcoeffs[1::2])

        def both(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            v = u * u
            return _horner(q, v), (_horner(r, v) * u if len(r) > 1 else u * r[0])

    return Activation(
        name=name,
        numpy=lambda z: H.hermeval(z, herme),
        value=_parity_eval(coeffs),
        deriv=_parity_eval(dcoeffs),
        poly=coeffs,
        both=both,
    )


def get_activation(name: str) -> Activation:
    """Activation by name: "he4", "he2+he4" (sum of normalised Hermite terms), "relu", "tanh".

    Raises ValueError for an unknown name (`anchorft.w2s.names.activation_terms` reads it).
    """
    key, what = activation_terms(name)
    if what == "relu":
        return Activation("relu", lambda z: np.maximum(z, 0.0), torch.relu, lambda u: (u > 0).to(u.dtype))
    if what == "tanh":
        return Activation("tanh", np.tanh, torch.tanh, lambda u: 1.0 - torch.tanh(u) ** 2)
    return _poly_activation(key, what)


def _zexp(y: np.ndarray) -> np.ndarray:
    return y * np.exp(y)


TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"identity": lambda y: y, "zexp": _zexp}


def get_transform(name: str, clip: float | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Label transformation T by name ("zexp": T(y) = y exp(y); "identity"), applied after clip(y, -clip, clip)."""
    if name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}: choose from {sorted(TRANSFORMS)}")
    t = TRANSFORMS[name]
    return t if clip is None else lambda y: t(np.clip(y, -clip, clip))


def hermite_coefficients(
    f: Callable[[np.ndarray], np.ndarray] | str, max_degree: int, n_quad: int = 150
) -> np.ndarray:
    """c_j = E_{z~N(0,1)}[f(z) h_j(z)] for j = 0..max_degree, by Gauss-Hermite(e) quadrature with n_quad nodes.

    hermegauss integrates against exp(-z^2/2); dividing the weights by sqrt(2 pi) gives the Gaussian expectation.
    Exact for polynomials of degree < 2 n_quad - max_degree; for non-smooth f (clips, ReLU) the error decays slowly.
    """
    if isinstance(f, str):
        f = get_activation(f).numpy
    if max_degree < 0 or n_quad < 1:
        raise ValueError("max_degree must be >= 0 and n_quad >= 1")
    z, w = H.hermegauss(n_quad)
    w = w / math.sqrt(2.0 * math.pi)
    fz = np.asarray(f(z), dtype=np.float64)
    return np.array([np.sum(w * fz * hermite_normalised(j, z)) for j in range(max_degree + 1)])


def measured_coefficients(
    z: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    n_max: int,
    normalised: bool = False,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Hermite coefficients of labels y along a direction, measured from samples (z_i, y_i), z_i ~ N(0, 1).

    Normalisation (default, `normalised=False`): the probabilists' series y ~ sum_n c_n He_n(z),

        c_n = E[y He_n(z)] / n!,   n = 0..n_max,

    the convention of `numpy.polynomial.hermite_e` (so a polynomial y = hermeval(z, c) gives back c). With
    `normalised=True`: c_n = E[y h_n(z)] = E[y He_n(z)] / sqrt(n!), the orthonormal basis of
    `hermite_coefficients`. In the simulator z = theta_kappa^T x; the labels may also depend on directions
    orthogonal to theta_kappa, which the projection averages out (E over them at fixed z).

    Returns (c, se), arrays of length n_max + 1: the sample means and their standard errors
    std(y He_n(z) / n!, ddof=1) / sqrt(n_samples). With `weights` (non-negative, summing to 1, e.g. Gauss-Hermite
    weights / sqrt(2 pi) at the nodes z), c is the weighted mean and se is not defined (NaN).
    """
    z = np.asarray(z.detach().double().cpu() if isinstance(z, torch.Tensor) else z, dtype=np.float64).ravel()
    y = np.asarray(y.detach().double().cpu() if isinstance(y, torch.Tensor) else y, dtype=np.float64).ravel()
    if z.shape != y.shape:
        raise ValueError(f"z and y must have the same number of samples, got {z.size} and {y.size}")
    if n_max < 0:
        raise ValueError(f"n_max must be >= 0, got {n_max}")
    if weights is None and z.size < 2:
        raise ValueError("need at least 2 samples for a standard error")
    c, se = np.empty(n_max + 1), np.empty(n_max + 1)
    for n in range(n_max + 1):
        scale = math.sqrt(math.factorial(n)) if normalised else math.factorial(n)
        v = y * H.hermeval(z, [0.0] * n + [1.0]) / scale
        if weights is None:
            c[n], se[n] = v.mean(), v.std(ddof=1) / math.sqrt(v.size)
        else:
            c[n], se[n] = float(np.sum(np.asarray(weights) * v)), math.nan
    return c, se


def _first_nonzero(c: np.ndarray, tol: float) -> int | None:
    scale = max(1.0, float(np.sqrt(np.sum(c**2))))
    for j in range(1, len(c)):
        if abs(c[j]) > tol * scale:
            return j
    return None


def information_exponent(
    link: Callable[[np.ndarray], np.ndarray] | str, max_degree: int = 12, tol: float = 1e-8
) -> int | None:
    """Lowest j >= 1 with a nonzero Hermite coefficient of the link (None if none up to max_degree)."""
    return _first_nonzero(hermite_coefficients(link, max_degree), tol)


def transformed_information_exponent(
    link: Callable[[np.ndarray], np.ndarray] | str,
    transform: str = "zexp",
    clip: float | None = 2.0,
    max_degree: int = 12,
    tol: float = 1e-8,
    n_quad: int = 150,
) -> int | None:
    """Information exponent of T(clip(sigma*)) for one fixed transform T: the lowest j >= 1 with
    E[T(clip(sigma*(z))) h_j(z)] != 0. An upper bound on the generative exponent (`generative_exponent`)."""
    f = get_activation(link).numpy if isinstance(link, str) else link
    t = get_transform(transform, clip)
    return _first_nonzero(hermite_coefficients(lambda z: t(f(z)), max_degree, n_quad=n_quad), tol)


def generative_exponent(
    link: Callable[[np.ndarray], np.ndarray] | str, max_power: int = 6, max_degree: int = 12, tol: float = 1e-8
) -> tuple[int | None, int | None]:
    """Generative exponent (Damian et al. 2024, "Computational-statistical gaps in Gaussian single-index models")
    over the class of polynomial transforms of degree <= max_power: min over T of the information exponent of
    T(sigma*). The Hermite coefficients of T(sigma*) = sum_k t_k sigma*^k are linear in t, so the lowest degree
    reachable in that span is the lowest over the monomials T(y) = y^k, k = 1..max_power. Returns (exponent, k),
    k the lowest power that attains it; (None, None) if no power has a nonzero coefficient up to max_degree.

    Damian et al. minimise over all transforms in L2; for a polynomial link the monomials are the natural finite
    class (He_4 gets 2, from y^2; He_3 gets 1, from y^3).
    """
    f = get_activation(link).numpy if isinstance(link, str) else link
    best: tuple[int | None, int | None] = (None, None)
    for k in range(1, max_power + 1):
        j = _first_nonzero(hermite_coefficients(lambda z, k=k: f(z) ** k, max_degree), tol)
        if j is not None and (best[0] is None or j < best[0]):
            best = (j, k)
    return best
