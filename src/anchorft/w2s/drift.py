"""Population drift of a non-target neuron under W2S, and its fixed point rho* (Proposition 2 across students).

Setting (docs/w2s.md, "Model"; W2S at lambda_kappa = 1). Every input is x = B z, z ~ N(0, I_s), B a basis of
V_kappa. A non-target neuron starts at w = a theta_k + sqrt(1 - a^2) v with v in V_k orthogonal to theta_k and to
V_kappa, and theta_k = rho theta_kappa + sqrt(1 - rho^2) u_k, u_k orthogonal to V_kappa; so its component in V_kappa
is exactly m theta_kappa, m = a rho (a = `pretrained_alignment`), the same for every non-target neuron, and its
pre-activation on every input is w^T x = m z_1, z_1 = theta_kappa^T x ~ N(0, 1).

Labels. Only E[y | z_1] enters the drift of such a neuron: ybar(z) = sum_n c_n He_n(z), with the labels' measured
coefficients c_n = E[y He_n(z_1)] / n! (`labels.label_report`); the labels' dependence on the weak neurons'
other directions averages out at fixed z_1 (up to the weak model's finite number of random directions).

Drift. Online spherical SGD, w <- normalise(w - eta (I - w w^T) g), has the population mean step
-eta (I - w w^T) E[g] with g = l'(f(x), y) a_j sigma'(w^T x) x (l' = -y for the correlation loss, f - y for the
squared loss). Along theta_kappa, using theta_kappa^T x = z_1 and w^T x = m z_1:

    theta_kappa^T (I - w w^T) E[g] = -a_j (1 - m^2) D(m),   D(m) = E[ r(z) z sigma'(m z) ],   z ~ N(0, 1),

with the residual r = -l' seen at fixed z_1:

    correlation loss:  r(z) = ybar(z)
    squared loss:      r(z) = ybar(z) - c pi_kappa S_t(z) - c (sum_{k != kappa} pi_k) sigma(m z) - b

(the strong model f = sum_j a_j sigma(w_j^T x) with a_j = c pi_k / N_k; the non-target groups all sit at the same
m; the target group is taken at alignment t with theta_kappa and the rest of its direction in V_kappa orthogonal,
whose output at fixed z_1 is S_t(z) = E_g[sigma(t z + sqrt(1 - t^2) g)]; b = E[ybar - f] with a trained output
bias, which tracks the residual's mean, and 0 without). The components of E[g] orthogonal to theta_kappa inside
V_kappa vanish at fixed z_1, so the neuron's V_kappa part stays along theta_kappa and

    dm/dt = eta a_j (1 - m^2) D(m).

D(m) > 0: the neuron turns to theta_kappa (captured), D(m) < 0: its V_kappa part is pushed out (theta_k kept).
The two terms the paper's labels bring (Awano and Suzuki, T(z) - z = z (e^z - 1) >= 0, so c_0 > 0): the constant
c_0 gives c_0 E[z sigma'(m z)] = c_0 m E[sigma''(m z)] (Stein's lemma), whose sign is that of E[sigma''] at norm m
(for sigma = h_2 + h_4: negative below m = (1 - sqrt(2) sqrt(24) / 12)^{1/2} = 0.650); the degree-2 part gives
c_2 E[He_2(z) z sigma'(m z)] = c_2 E[(z sigma'(m z))''] = c_2 (2 m E[sigma''(m z)] + m^2 E[z sigma'''(m z)]).

The turn boundary is the unstable fixed point m* in (0, 1): the lowest m where D changes sign from - to +
(neurons starting below are pushed out, above captured). In the overlap of Theorem 2, rho* = m* / a.
With D > 0 near 0 (captured from every overlap), D < 0 on all of (0, 1) (pushed out from every overlap) or D = 0
(no drift, e.g. an odd activation against even labels) there is no interior boundary: `fixed_point` returns None
with the reason.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import hermite_e as H

from anchorft.w2s.hermite import get_activation

__all__ = ["drift", "fixed_point", "smoothed", "DRIFT_NODES"]

DRIFT_NODES = 200  # Gauss-Hermite(e) nodes; exact for polynomial activations and labels of degree < 2 * 200 - 2


def _nodes(n: int = DRIFT_NODES) -> tuple[np.ndarray, np.ndarray]:
    z, w = H.hermegauss(n)
    return z, w / math.sqrt(2.0 * math.pi)


def _deriv(act, u: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """sigma'(u): exact for polynomials (from the Hermite series), ReLU's step, tanh's 1 - tanh^2."""
    if act.poly is not None:
        return np.polynomial.polynomial.polyval(u, np.polynomial.polynomial.polyder(np.asarray(act.poly)))
    if act.name == "relu":
        return (u > 0).astype(float)
    if act.name == "tanh":
        return 1.0 - np.tanh(u) ** 2
    return (act.numpy(u + h) - act.numpy(u - h)) / (2 * h)


def smoothed(activation: str, t: float, z: np.ndarray, n: int = 60) -> np.ndarray:
    """S_t(z) = E_g[sigma(t z + sqrt(1 - t^2) g)], g ~ N(0, 1): a neuron at alignment t, seen at fixed z."""
    act = get_activation(activation)
    g, wg = _nodes(n)
    u = t * np.asarray(z)[:, None] + math.sqrt(max(1.0 - t * t, 0.0)) * g[None, :]
    return act.numpy(u) @ wg


def drift(
    m: float | np.ndarray,
    coeffs: list[float] | np.ndarray,
    activation: str,
    loss: str = "correlation",
    c: float = 0.3,
    pi: list[float] | tuple[float, ...] = (1.0, 1.0),
    target_alignment: float = 1.0,
    bias: bool = False,
) -> float | np.ndarray:
    """D(m) = E[r(z) z sigma'(m z)] (module docstring): the population drift, along theta_kappa, of a non-target
    neuron whose V_kappa part is m theta_kappa, divided by eta a_j (1 - m^2); m a number or an array. `coeffs` are
    the labels' c_n = E[y He_n] / n! along theta_kappa. Squared loss: the target group at `target_alignment`, the
    non-target groups at m, and with `bias` the residual's mean removed. Gauss-Hermite quadrature (exact for
    polynomials)."""
    act = get_activation(activation)
    z, w = _nodes()
    mm = np.atleast_1d(np.asarray(m, dtype=float))[:, None]  # (M, 1)
    r = np.broadcast_to(H.hermeval(z, np.asarray(coeffs, dtype=float)), (mm.shape[0], z.size))
    if loss == "squared":
        r = r - c * pi[0] * smoothed(activation, target_alignment, z) - c * sum(pi[1:]) * act.numpy(mm * z)
        if bias:
            r = r - (r @ w)[:, None]
    elif loss != "correlation":
        raise ValueError(f"unknown loss {loss!r}")
    out = (r * z * _deriv(act, mm * z)) @ w
    return float(out[0]) if np.ndim(m) == 0 else out


def fixed_point(
    coeffs: list[float] | np.ndarray,
    activation: str,
    grid: int = 2000,
    tol: float = 1e-9,
    **kwargs,
) -> dict:
    """The unstable fixed point m* in (0, 1) of dm/dt ~ (1 - m^2) D(m): the lowest m where D changes sign from
    negative to positive (bisection to 1e-6 on a grid of `grid` points), with D's sign below it; m_star None and
    `reason` when there is no interior boundary. kwargs go to `drift`."""
    ms = np.linspace(1e-3, 0.999, grid)
    d = drift(ms, coeffs, activation, **kwargs)
    scale = float(np.max(np.abs(d)))
    out: dict = {"m_star": None, "reason": None, "stable": [], "drift_max_abs": scale}
    if scale <= tol:
        out["reason"] = "no drift along theta_kappa (D = 0: e.g. an odd activation against even labels)"
        return out
    sign = np.where(np.abs(d) <= tol * scale, 0.0, np.sign(d))
    for i in range(len(ms) - 1):
        if sign[i] * sign[i + 1] < 0:
            lo, hi = ms[i], ms[i + 1]
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                if np.sign(drift(mid, coeffs, activation, **kwargs)) == sign[i]:
                    lo = mid
                else:
                    hi = mid
            root = 0.5 * (lo + hi)
            if sign[i] < 0 and out["m_star"] is None:
                out["m_star"] = float(root)
            elif sign[i] > 0:
                out["stable"].append(float(root))
    if out["m_star"] is None:
        first = sign[np.nonzero(sign)[0][0]]
        out["reason"] = (
            "D > 0 near m = 0 and no later - to + crossing: captured from every overlap"
            if first > 0
            else "D < 0 on (0, 1): pushed out from every overlap"
        )
    return out
