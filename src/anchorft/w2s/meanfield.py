"""Mean-field (order-parameter) theory of the online spherical SGD of `dynamics.train` (docs/w2s-scaling.md).

Saad and Solla's reduction (Phys. Rev. E 52, 1995) for the strong model f(x) = sum_j a_j sigma(w_j^T x): in the
input space of dimension D (D = s for W2S at lambda = 1, where x = B z, z ~ N(0, I_s); D = d for SFT), a neuron
enters the loss only through its local field lambda_j = c_j^T z (c_j = B^T w_j for W2S, w_j for SFT), and the
fields (lambda_1..lambda_N, nu = theta^T z) are jointly Gaussian with covariance

    Q_jk = c_j^T c_k  (the neuron-neuron overlaps; Q_jj = the norm inside V_kappa),   M_j = c_j^T theta.

The order parameters are Q and M_jk = c_j^T v_k for reference directions v_k (B^T theta_k for W2S, theta_k for
SFT). The labels are modelled by their Hermite expansion along theta_kappa, y = sum_n c_n h_n(nu) + eps, with
eps uncorrelated with every function of nu and of variance E[y^2] - sum_n c_n^2: what the labels do along
directions orthogonal to theta_kappa (the weak model's other components) is projected out and kept only as
label noise. The coefficients are measured from the simulator's own labels (`label_model`).

One step w_j <- (w_j - eta g_t,j) / ||w_j - eta g_t,j|| with g_j = mean_b G_bj x_b and its tangential part
g_t,j = g_j - (w_j^T g_j) w_j (`dynamics.reduced_step`) gives, per step, exactly to second order in eta:

    dQ_jk/dt = eta ((R_j + R_k) Q_jk - H_jk - H_kj) + eta^2 (Nc_jk - (Nf_j + Nf_k) Q_jk / 2)
    dM_jk/dt = eta (R_j M_jk - P_kj) - eta^2 Nf_j M_jk / 2

with H_kj = E[G_j lambda_k], R_j = H_jj, P_kj = E[G_j v_k^T z], Nc_jk = E[(gamma_j - R_j c_j)^T (gamma_k - R_k c_k)]
(the tangential gradients' parts in the input space, gamma_j = mean_b G_bj z_b) and Nf_j = E||g_t,j||^2. The
second-order terms carry the finite-step noise: their leading part is (D / b) E[G_j G_k], of order eta^2 D, the
only second-order term that grows with D; the rest (the tangential projection, the product of the means) is kept.
G_j = (f - y) a_j sigma'(lambda_j) (squared loss) or -y a_j sigma'(lambda_j) (correlation loss). The first-order
expectations are exact: by Stein's lemma they reduce to two-field expectations E[F(X) G(Y)] =
sum_n F~_n(Var X) G~_n(Var Y) Cov(X, Y)^n with F~_n(q) = E[F^(n)(sqrt(q) t)] / sqrt(n!) (Mehler's formula, in a
form without division by the variances), closed-form for polynomial activations. The second-order terms (up to
four fields and ||x||^2) are Monte Carlo averages over fixed draws of the fields (common random numbers: the
right-hand side is a deterministic, smooth function of the state), which `scipy.integrate.solve_ivp` integrates.

Validity: D large (fluctuations of the order parameters are O(D^{-1/2}), the same order as a target neuron's
initial overlap s^{-1/2}, so at small D single runs scatter around the curve), eta D small enough that the
dropped eta^2 terms are small, and labels close to a function of theta_kappa^T x plus independent noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.integrate import solve_ivp

from anchorft import stop
from anchorft.w2s.config import W2SConfig
from anchorft.w2s.dynamics import schedule_factor, step_scale
from anchorft.w2s.hermite import get_activation, hermite_coefficients, measured_coefficients
from anchorft.w2s.labels import label_mean, w2s_labels
from anchorft.w2s.problem import Problem
from anchorft.w2s.sampling import make_generators

__all__ = [
    "LabelModel",
    "gaussian_derivative_table",
    "pair_expectation",
    "label_model",
    "initial_state",
    "solve_order_parameters",
    "predict",
    "crossing_time",
    "check_supported",
]


@dataclass
class LabelModel:
    """Labels y = sum_n coef[n] h_n(theta_kappa^T x) + eps, E[y^2] = second_moment (normalised Hermite h_n)."""

    coef: np.ndarray
    second_moment: float
    stderr: np.ndarray | None = None

    @property
    def noise_var(self) -> float:
        return max(self.second_moment - float(np.sum(self.coef**2)), 0.0)


def gaussian_derivative_table(poly: np.ndarray, n_max: int, q: np.ndarray) -> np.ndarray:
    """F~_n(q) = E[F^(n)(sqrt(q) t)] / sqrt(n!), t ~ N(0, 1), n = 0..n_max, for the polynomial F with monomial
    coefficients `poly` (lowest first), at variances q (any shape). Returns (n_max + 1, *q.shape).

    F^(n)(x) = sum_k poly_k k! / (k - n)! x^(k - n) and E[x^m] = (m - 1)!! q^(m / 2) for even m (0 for odd m)."""
    q = np.asarray(q, dtype=float)
    out = np.zeros((n_max + 1, *q.shape))
    for n in range(n_max + 1):
        for k in range(n, len(poly)):
            m = k - n
            if m % 2 or poly[k] == 0.0:
                continue
            dfact = math.prod(range(m - 1, 0, -2)) if m > 0 else 1
            out[n] += poly[k] * math.factorial(k) / math.factorial(m) * dfact * q ** (m // 2)
        out[n] /= math.sqrt(math.factorial(n))
    return out


def pair_expectation(tf: np.ndarray, tg: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """E[F(X) G(Y)] for jointly Gaussian (X, Y) from the tables F~ (n, ...) of X's variance and G~ (n, ...) of Y's:
    sum_n F~_n G~_n Cov^n (Mehler's formula; exact when F or G is a polynomial of degree < n)."""
    out = np.zeros(np.broadcast_shapes(tf.shape[1:], tg.shape[1:], np.shape(cov)))
    pw = np.ones_like(out)
    for n in range(min(len(tf), len(tg))):
        out += tf[n] * tg[n] * pw
        pw = pw * cov
    return out


def _poly(name: str) -> np.ndarray:
    act = get_activation(name)
    if act.poly is None:
        raise ValueError(f"the mean-field theory needs a polynomial activation, got {name!r}")
    return np.asarray(act.poly, dtype=float)


def check_supported(config: W2SConfig) -> None:
    """Raise ValueError (before any work) if the theory cannot be solved for `config` (a non-polynomial student
    activation: the first-order expectations are closed-form for polynomials only)."""
    _poly(config.activation)


def label_model(
    config: W2SConfig,
    problem: Problem,
    mode: str,
    n_samples: int = 200_000,
    n_max: int = 6,
    seed_index: int = 0,
    centers: torch.Tensor | None = None,
) -> LabelModel:
    """The labels' Hermite expansion along theta_kappa. SFT: y = pi_kappa sigma*_kappa(theta_kappa^T x) exactly
    (quadrature). W2S: measured from `n_samples` of the labels the simulator trains on (`labels.w2s_labels`:
    T(clip(f_weak(x))) with the weak model of `problem`, planted or trained, bounded when weak_bound > 0, less
    the simulator's own centre `labels.label_mean` when label_center is "mean") on the generative distribution
    at lambda = 1 (x = B z), of seed `seed_index` (its own generator, not the training stream). What the labels
    do along directions of V_kappa orthogonal to theta_kappa is not in the coefficients: it is `noise_var`.
    `centers` (S,) may pass the per-seed centres already computed."""
    if mode != "w2s":
        coef = config.pi[0] * hermite_coefficients(config.link, n_max)
        return LabelModel(coef=coef, second_moment=float(np.sum(coef**2)))
    gen = make_generators([problem.seeds[seed_index]], 101, torch.device("cpu"))[0]
    z = torch.randn(n_samples, config.s, generator=gen, dtype=torch.float64)
    b0 = problem.bases[seed_index, 0].double().cpu()
    weak_b = problem.weak_u[seed_index].double().cpu() @ b0  # (M, s)
    y = w2s_labels(config, z, weak_b)
    if config.label_center == "mean":
        centers = label_mean(config, problem) if centers is None else centers
        y = y - float(centers[seed_index])
    nu = z @ (b0.mT @ problem.thetas[seed_index, 0].double().cpu())
    coef, se = measured_coefficients(nu.numpy(), y.numpy(), n_max, normalised=True)
    return LabelModel(coef=coef, second_moment=float((y * y).mean()), stderr=se)


def initial_state(config: W2SConfig, problem: Problem, mode: str, seed_index: int) -> dict:
    """Order parameters of seed `seed_index` at step 0, and what maps them back to alignments in R^d.

    W2S (lambda = 1): c_j = B^T w_j, references B^T theta_k; a neuron's alignment with theta_k is
    r_j theta_k^T p_j + M_jk with p_j = w_j(0) - B c_j(0) fixed and r_j = sqrt((1 - Q_jj) / ||p_j||^2).
    SFT: c_j = w_j, references theta_k, the alignment is M_jk."""
    w0 = problem.w0[seed_index].double().cpu().numpy()
    th = problem.thetas[seed_index].double().cpu().numpy()  # (K, d)
    if mode == "w2s":
        if config.lambda_kappa != 1.0:
            raise ValueError("the mean-field theory of W2S is implemented at lambda_kappa = 1")
        b0 = problem.bases[seed_index, 0].double().cpu().numpy()
        c0 = w0 @ b0
        refs = th @ b0  # (K, s)
        p = w0 - c0 @ b0.T
        p_norm2, p_theta = (p * p).sum(-1), p @ th.T
        dim = config.s
    elif mode == "sft":
        c0, refs, dim = w0, th, config.d
        p_norm2, p_theta = np.zeros(len(w0)), np.zeros((len(w0), len(th)))
    else:
        raise ValueError(f"the mean-field theory covers modes w2s and sft, not {mode!r}")
    return {
        "Q": c0 @ c0.T,
        "M": c0 @ refs.T,
        "T": refs @ refs.T,
        "dim": dim,
        "p_norm2": p_norm2,
        "p_theta": p_theta,
        "groups": problem.groups.cpu().numpy(),
        "a": problem.a.double().cpu().numpy(),
    }


class _RHS:
    """Right-hand side of the order-parameter ODE (module docstring) for one seed."""

    def __init__(self, config: W2SConfig, mode: str, state: dict, labels: LabelModel, n_mc: int, mc_seed: int):
        self.cfg, self.mode = config, mode
        self.n = len(state["a"])
        self.k = state["M"].shape[1]
        self.a, self.T, self.dim = state["a"], state["T"], state["dim"]
        self.b = config.batch_size
        self.squared = config.loss == "squared"
        sig = _poly(config.activation)
        self.sig = sig
        self.dsig = np.polynomial.polynomial.polyder(sig)
        self.ddsig = np.polynomial.polynomial.polyder(sig, 2)
        self.deg = len(sig) - 1
        self.g = np.asarray(labels.coef, dtype=float)
        self.noise_var = labels.noise_var
        # g'(nu) = sum_n g_n sqrt(n) h_(n-1)(nu): coefficients of g' in the h basis
        self.gd = np.array([self.g[n + 1] * math.sqrt(n + 1) for n in range(len(self.g) - 1)])
        self.xi = np.random.default_rng(mc_seed).standard_normal((n_mc, self.n + 1))
        self.base = step_scale(config, mode)
        # SFT: c_j = w_j is a unit vector, so Q_jj = 1 exactly; the ODE's Q_jj = 1 is an unstable fixed point where
        # R_j > 0 (dQ_jj = 2 eta R_j (Q_jj - 1) + ...), so the state is read on the sphere and diag(dQ) = 0
        self.sphere = mode != "w2s"

    def eta(self, t: float) -> float:
        return self.base * schedule_factor(self.cfg, t, self.cfg.steps)

    def unpack(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self.n
        q = y[: n * n].reshape(n, n)
        Q, M = 0.5 * (q + q.T), y[n * n :].reshape(n, self.k)
        if self.sphere:
            dq = np.sqrt(np.clip(np.diag(Q), 1e-12, None))
            Q, M = Q / np.outer(dq, dq), M / dq[:, None]
        return Q, M

    def __call__(self, t: float, y: np.ndarray) -> np.ndarray:
        stop.check()  # the ODE's loop runs inside solve_ivp: its safe point is the right-hand side (anchorft.stop)
        Q, M = self.unpack(y)
        a, d = self.a, self.deg
        m = M[:, 0]  # overlaps with theta_kappa (reference 0): Cov(lambda_j, nu)
        qd = np.clip(np.diag(Q), 0.0, None)
        t_s, t_ds, t_dds = (gaussian_derivative_table(p, d, qd) for p in (self.sig, self.dsig, self.ddsig))
        # E[g'(nu) S(lambda_j)] = sum_n gd_n S~_n(Q_jj) m_j^n, E[g(nu) S(lambda_j)] likewise with g
        D = pair_expectation(self.gd[: d + 1, None], t_ds, m[None, :])[0] if len(self.gd) else np.zeros(self.n)
        E = pair_expectation(self.g[: d + 1, None], t_dds, m[None, :])[0]
        if self.squared:
            A = pair_expectation(t_ds[:, :, None], t_ds[:, None, :], Q)  # E[sigma'_l sigma'_j]
            B = pair_expectation(t_s[:, :, None], t_dds[:, None, :], Q)  # E[sigma_l sigma''_j]
            aB = a @ B  # (N,)
            QaA = Q @ (a[:, None] * A)  # (N, N): sum_l Q_kl a_l A_lj
            H = a[None, :] * (QaA + Q * aB[None, :] - np.outer(m, D) - Q * E[None, :])
            MaA = M.T @ (a[:, None] * A)  # (K, N)
            P = a[None, :] * (MaA + M.T * aB[None, :] - np.outer(self.T[0], D) - M.T * E[None, :])
        else:
            H = -a[None, :] * (np.outer(m, D) + Q * E[None, :])
            P = -a[None, :] * (np.outer(self.T[0], D) + M.T * E[None, :])
        R = np.diag(H)
        self.last = {"R": R, "P": P}  # the first-order expectations at the last evaluation (for inspection)
        # second-order terms over fixed draws xi of the fields: fields = xi S, S = C^(1/2) (symmetric root), so
        # lambda_j = s_j^T xi with s_j = S[:, j] (s_j^T s_k = Q_jk) and x = (its part in the fields' span, Pi xi
        # in these coordinates) + an independent rest with E||rest||^2 = D - rank
        n = self.n
        C = np.empty((n + 1, n + 1))
        C[:n, :n], C[:n, -1], C[-1, :n], C[-1, -1] = Q, m, m, 1.0
        lam, U = np.linalg.eigh(C)
        keep = lam > 1e-9 * max(lam.max(), 1e-300)
        S = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
        fields = self.xi @ S
        u, nu = fields[:, :n], fields[:, -1]
        xi_p = self.xi @ U[:, keep]  # coordinates of Pi xi in the range of C
        pn2 = np.sum(xi_p * xi_p, axis=1)  # ||Pi xi||^2
        rest = max(self.dim - int(keep.sum()), 0)
        gy = np.polynomial.hermite_e.hermeval(nu, self.g / np.sqrt([math.factorial(i) for i in range(len(self.g))]))
        G = np.polynomial.polynomial.polyval(u, self.dsig) * a
        if self.squared:
            G *= (np.polynomial.polynomial.polyval(u, self.sig) @ a - gy)[:, None]
        else:
            G *= -gy[:, None]
        nmc = len(nu)
        # one sample: g_j = G_j x; tangential c-parts (z - lambda_j c_j) G_j, whose products are
        # G_j G_k (||z||^2 - lambda_j^2 - lambda_k^2 + lambda_j lambda_k Q_jk); full tangential norm G_j^2 (||z||^2 -
        # lambda_j^2); the label noise eps adds E[eps^2] a_j a_k sigma'_j sigma'_k times the same factors
        Gn = np.polynomial.polynomial.polyval(u, self.dsig) * a * math.sqrt(self.noise_var)

        def prod(wgt: np.ndarray | float, left: np.ndarray, right: np.ndarray) -> np.ndarray:
            return ((G * left * wgt).T @ (G * right) + (Gn * left * wgt).T @ (Gn * right)) / nmc

        one = np.ones((nmc, 1))
        Ez = prod((rest + pn2)[:, None], one, one)
        T1 = prod(1.0, u * u, one)  # E[G_j G_k lambda_j^2]
        T2 = prod(1.0, u, u)  # E[G_j G_k lambda_j lambda_k]
        single_c = Ez - T1 - T1.T + T2 * Q
        single_f = np.diag(Ez) - np.diag(T2)
        # batch mean: (1 / b) one sample + (1 - 1 / b) product of the means; mean gradient in xi coordinates
        e = (G.T @ xi_p) @ U[:, keep].T / nmc  # (N, n + 1)
        Rm = np.einsum("jk,kj->j", e, S[:, :n])
        mc = e - Rm[:, None] * S[:, :n].T
        b = self.b
        Nc = single_c / b + (1.0 - 1.0 / b) * (mc @ mc.T)
        Nf = single_f / b + (1.0 - 1.0 / b) * (np.sum(e * e, axis=1) - Rm * Rm)
        eta = self.eta(t)
        dQ = eta * ((R[:, None] + R[None, :]) * Q - H - H.T) + eta * eta * (Nc - 0.5 * (Nf[:, None] + Nf[None, :]) * Q)
        dM = eta * (R[:, None] * M - P.T) - 0.5 * eta * eta * Nf[:, None] * M
        if self.sphere:
            np.fill_diagonal(dQ, 0.0)
        return np.concatenate([dQ.ravel(), dM.ravel()])


def solve_order_parameters(
    config: W2SConfig,
    mode: str,
    state: dict,
    labels: LabelModel,
    t_eval: list[int] | np.ndarray,
    n_mc: int = 1024,
    mc_seed: int = 0,
    rtol: float = 1e-4,
) -> dict:
    """Integrate the ODE from `state` (initial_state) over steps [0, max(t_eval)] with scipy's RK45; returns
    the alignments of every neuron with every theta_k at the reached t_eval: "align" (T, N, K) and "t" (T), and
    "failed" (None, or the solver's message when it stopped early: the ODE blows up where the step is so large
    that the second-order expansion of the step fails)."""
    rhs = _RHS(config, mode, state, labels, n_mc, mc_seed)
    y0 = np.concatenate([state["Q"].ravel(), state["M"].ravel()])
    t_eval = np.asarray(t_eval, dtype=float)
    with np.errstate(all="ignore"):
        sol = solve_ivp(rhs, (0.0, float(t_eval.max())), y0, t_eval=t_eval, rtol=rtol, atol=1e-8, method="RK45")
    aligns = []
    for y in sol.y.T:
        Q, M = rhs.unpack(y)
        qd = np.clip(np.diag(Q), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(state["p_norm2"] > 1e-12, np.sqrt((1.0 - qd) / state["p_norm2"]), 0.0)
        aligns.append(r[:, None] * state["p_theta"] + M)
    align = np.abs(np.stack(aligns)) if aligns else np.zeros((0, len(state["a"]), state["M"].shape[1]))
    return {"t": sol.t, "align": align, "n_rhs": int(sol.nfev), "failed": None if sol.success else str(sol.message)}


def crossing_time(t: np.ndarray, v: np.ndarray, level: float) -> float | None:
    """First t where v reaches `level`, interpolated linearly in log(t) between samples (None if never)."""
    t, v = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
    for i in range(len(v)):
        if v[i] >= level:
            if i == 0:
                return float(t[0])
            t0, t1 = max(t[i - 1], 1.0), max(t[i], 1.0)
            frac = (level - v[i - 1]) / (v[i] - v[i - 1])
            return float(math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0))))
    return None


def predict(
    config: W2SConfig,
    problem: Problem,
    mode: str,
    steps: list[int],
    threshold: float = 0.5,
    n_mc: int = 1024,
    n_label_samples: int = 200_000,
) -> dict:
    """The mean-field prediction for every seed of `problem` in `mode`, on the logged `steps`: the three summary
    curves (mean over seeds, and per seed), the per-seed predicted escape samples (the target group's mean
    alignment reaching `threshold`), and the label coefficients used. JSON-able."""
    groups = problem.groups.cpu().numpy()
    non = groups > 0
    per: dict[str, list] = {"target_alignment": [], "nontarget_alignment": [], "nontarget_target_alignment": []}
    escape, coefs, n_rhs, failed, second, noise = [], [], [], [], [], []
    centers = label_mean(config, problem) if mode == "w2s" and config.label_center == "mean" else None
    for i in range(problem.n_seeds):
        labels = label_model(config, problem, mode, n_samples=n_label_samples, seed_index=i, centers=centers)
        coefs.append([float(c) for c in labels.coef])
        second.append(labels.second_moment)
        noise.append(labels.noise_var)
        state = initial_state(config, problem, mode, i)
        out = solve_order_parameters(config, mode, state, labels, steps, n_mc=n_mc, mc_seed=i)
        al = out["align"]  # (T', N, K), T' <= T where the solver stopped early
        n_rhs.append(out["n_rhs"])
        failed.append(None if out["failed"] is None else {"message": out["failed"], "steps_reached": len(out["t"])})
        if len(al) < len(steps):
            al = np.concatenate([al, np.full((len(steps) - len(al), *al.shape[1:]), np.nan)])
        tgt = al[:, groups == 0, 0].mean(-1)
        per["target_alignment"].append(tgt.tolist())
        if non.any():
            own = np.take_along_axis(al[:, non, :], groups[non][None, :, None], axis=-1)[..., 0]
            per["nontarget_alignment"].append(own.mean(-1).tolist())
            per["nontarget_target_alignment"].append(al[:, non, 0].mean(-1).tolist())
        hit = crossing_time(out["t"], tgt[: len(out["t"])], threshold)
        escape.append(None if hit is None else hit * config.batch_size)
    result: dict = {
        "steps": [int(s) for s in steps],
        "samples": [int(s) * config.batch_size for s in steps],
        "threshold": threshold,
        "escape_samples_per_seed": escape,
        "label_coefficients_per_seed": coefs,
        "label_model": {
            "coefficients": "normalised Hermite h_n = He_n / sqrt(n!) along theta_kappa^T x, n = 0..6, measured",
            "center": None if centers is None else [float(v) for v in centers.cpu()],
            "weak_bound": config.weak_bound,
            "transform": config.transform,
            "clip": config.clip,
            "second_moment_per_seed": second,
            "projected_out_var_per_seed": noise,
            "projected_out": "the labels' dependence on directions other than theta_kappa (degree > 6 along it, "
            "and the weak model's components in V_kappa orthogonal to theta_kappa), kept as independent noise",
        },
        "n_rhs_evaluations": n_rhs,
        "failed_per_seed": failed,
    }
    for key, vals in per.items():
        if vals:
            arr = np.asarray(vals)  # (S, T)
            result[key] = arr.mean(0).tolist()  # NaN after a seed's solver stopped
            result[f"{key}_seeds"] = arr.T.tolist()
    return result
