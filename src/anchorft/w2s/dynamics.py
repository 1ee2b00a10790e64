"""Online spherical SGD of the strong model under W2S, SFT and SFT with the RPSFT anchor (docs/w2s.md).

Strong model f(x) = sum_j a_j sigma(w_j^T x), ||w_j|| = 1, a_j fixed. One step on a fresh batch (x_b, y_b):

    squared loss      l = (f(x) - y)^2 / 2,  g_j = mean_b (f(x_b) - y_b) a_j sigma'(w_j^T x_b) x_b
    correlation loss  l = -y f(x),           g_j = mean_b (-y_b) a_j sigma'(w_j^T x_b) x_b
    spherical step    w_j <- normalise(w_j - eta_t (I - w_j w_j^T) g_j)

with eta_t = eta N_kappa / (c s) under W2S and eta N_kappa / (c d) under SFT (docs/w2s.md, "The model and the
parametrisation chosen"), times the schedule (constant, then a geometric decay to anneal_final over the last
1 - anneal_start of the steps).

W2S labels y = T(clip(f_weak(x))), inputs from the generative distribution; SFT labels y = pi_kappa
sigma*_kappa(theta_kappa^T x), isotropic inputs; "sft_anchor" adds anchor_weight * dR/dW of the RPSFT penalty
R(W) = ||U_0^T (W - W_0) V_0||_F^2 on the first layer (anchorft.subspace).

Reduced representation at lambda = 1: every input is x = B z, so every gradient lies in V_kappa and a neuron
stays w_j = r_j p_j + B c_j with p_j = (I - B B^T) w_j(0) fixed: the step only updates c_j (s numbers) and the
scalar r_j (the renormalisation), O(s N) per sample, while alignments theta_k^T w_j = r_j theta_k^T p_j +
(B^T theta_k)^T c_j stay exact in R^d. p_j is formed explicitly (`reduced_coordinates`), so that q_j = ||p_j||^2
and theta_k^T p_j come from the same vector and the exact renormalisation r_j^2 q_j + ||c_j||^2 = 1 bounds
|r_j| ||p_j|| <= 1; a p_j at round-off level (a neuron built inside V_kappa: ||p_j||^2 below the dtype's epsilon,
invisible in ||w_j||) is set to zero with r_j = 0, so that such a neuron stays in V_kappa exactly. Every logged
alignment is checked to be a cosine and every returned neuron to have unit norm (`NumericalFailure` otherwise).
`train` runs this path with `anchorft.w2s.fused.ReducedStepper` (the same update with a deferred per-neuron scale
and preallocated buffers; tested equal to `reduced_step`) and every other mode with `fused.DenseStepper` (the same
interface around `dense_step`): one loop for every mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from anchorft import stop
from anchorft.subspace import reference_block, subspace_penalty_grad, top_k_bases
from anchorft.w2s.config import W2SConfig
from anchorft.w2s.fused import DenseStepper, ReducedStepper
from anchorft.w2s.hermite import Activation, get_activation
from anchorft.w2s.labels import label_mean, transform_labels, weak_output
from anchorft.w2s.problem import Problem
from anchorft.w2s.sampling import generative_dense, generative_reduced, isotropic, make_generators

__all__ = [
    "RunResult",
    "train",
    "log_steps",
    "step_scale",
    "schedule_factor",
    "dense_step",
    "reduced_step",
    "renormalise_reduced",
    "reduced_coordinates",
    "check_alignments",
    "check_unit_norm",
    "NumericalFailure",
    "train_weak",
]

# SFT and SFT+anchor see the same inputs; the ceiling (W2S inputs, true labels) sees W2S's
STREAMS = {"w2s": 1, "sft": 2, "sft_anchor": 2, "weak": 3, "ceiling": 1}
QUANTILES = (0.1, 0.5, 0.9)
COS_TOL = 1e-5  # a logged alignment |theta_k^T w_j| above 1 + COS_TOL is not a cosine
NORM_TOL = 1e-4  # a returned neuron with | ||w_j|| - 1 | above NORM_TOL is not on the sphere (float32: ~1e-6 seen)


class NumericalFailure(RuntimeError):
    """A run whose numbers left the model: an alignment that is not a cosine, or a neuron off the unit sphere."""


@dataclass
class RunResult:
    mode: str
    log: dict
    weights: torch.Tensor  # (S, N, d) final first layer
    diverged_at: int | None = None
    extra: dict = field(default_factory=dict)


def log_steps(steps: int, n_log: int) -> list[int]:
    """0, then about n_log log-spaced steps in [1, steps], always ending at `steps`."""
    pts = np.unique(np.round(np.logspace(0, math.log10(max(steps, 1)), n_log)).astype(int))
    return sorted({0, steps, *[int(p) for p in pts if 1 <= p <= steps]})


def step_scale(config: W2SConfig, mode: str) -> float:
    """Base step size: eta_w2s N_kappa / (c s) under W2S, eta_sft N_kappa / (c d) under SFT."""
    n_kappa = config.group_sizes[0]
    if mode in ("w2s", "ceiling"):
        return config.eta_w2s * n_kappa / (config.c * config.s)
    return config.eta_sft * n_kappa / (config.c * config.d)


def schedule_factor(config: W2SConfig, t: int, steps: int) -> float:
    """1 for t < anneal_start * steps, then geometric decay reaching anneal_final at the last step."""
    if config.schedule == "constant":
        return 1.0
    t0 = int(config.anneal_start * steps)
    if t < t0 or steps - 1 <= t0:
        return 1.0
    return config.anneal_final ** ((t - t0) / (steps - 1 - t0))


def _residual(f: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    if loss == "squared":
        r = f - y
        return r, 0.5 * (r * r).mean(-1)
    return -y, -(y * f).mean(-1)


def _coefficients(
    u: torch.Tensor, y: torch.Tensor, a: torch.Tensor, act: Activation, loss: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample gradient coefficients G_bj = l'(f(x_b), y_b) a_j sigma'(u_bj), so that g_j = mean_b G_bj x_b."""
    val, der = act.value_and_deriv(u)
    f = val @ a  # (S, b)
    r, lval = _residual(f, y, loss)
    return der.mul_(a).mul_(r.unsqueeze(-1)), lval


def _sphere_factors(
    gcoef: torch.Tensor, u: torch.Tensor, gram: torch.Tensor, eta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factors of the renormalised spherical step without a pass over W.

    With ||w|| = 1, g = X^T G / b, rad = w^T g = mean_b G_b u_b and ||g||^2 = G^T (X X^T) G / b^2:
    w_new = ((1 + eta rad) w - eta g) / n with n^2 = ||(1 + eta rad) w - eta g||^2 = 1 + eta^2 (||g||^2 - rad^2).
    `gram` is X X^T (S, b, b). Returns alpha = (1 + eta rad) / n (S, N) and eta G / (b n) (S, b, N).
    """
    b = gcoef.shape[-2]
    rad = (gcoef * u).sum(-2).div_(b)  # (S, N)
    g2 = (gram @ gcoef).mul_(gcoef).sum(-2).div_(b * b)  # (S, N)
    inv = torch.addcmul(g2, rad, rad, value=-1.0).mul_(eta * eta).add_(1.0).rsqrt_()
    alpha = rad.mul_(eta).add_(1.0).mul_(inv)
    return alpha, gcoef.mul_(inv.mul_(eta / b).unsqueeze(-2))


def dense_step(
    w: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    a: torch.Tensor,
    act: Activation,
    eta: float,
    loss: str = "squared",
    extra_grad: torch.Tensor | None = None,
    gram: torch.Tensor | None = None,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One spherical SGD step for W (S, N, d) with unit rows on a batch x (S, b, d), labels y (S, b).

    Returns (W_new, loss (S,)). Without `extra_grad` the step is fused: one bmm writes the new W
    (w_new = alpha w - (eta G / (b n))^T x), the norm coming from the b x b Gram matrix (see _sphere_factors);
    with `inplace` that W_new is w itself, updated in place (the same numbers: no new (S, N, d) tensors per step).
    """
    # (S, b, N): MKL runs W X^T 1.8x faster than X W^T on the paper's shapes (the same products); copied back to
    # (S, b, N) memory so that the ops after it round as before
    u = torch.bmm(w, x.mT).mT.contiguous()
    gcoef, lval = _coefficients(u, y, a, act, loss)
    if extra_grad is None:
        alpha, gs = _sphere_factors(gcoef, u, x @ x.mT if gram is None else gram, eta)
        if inplace:
            return w.mul_(alpha.unsqueeze(-1)).baddbmm_(gs.mT, x, alpha=-1.0), lval
        return torch.baddbmm(w * alpha.unsqueeze(-1), gs.mT, x, alpha=-1.0), lval
    g = gcoef.mT @ x / x.shape[-2] + extra_grad  # (S, N, d)
    radial = (g * w).sum(-1, keepdim=True)
    w = w - eta * (g - radial * w)
    return w / w.norm(dim=-1, keepdim=True), lval


def reduced_step(
    c: torch.Tensor,
    r: torch.Tensor,
    z: torch.Tensor,
    y: torch.Tensor,
    a: torch.Tensor,
    act: Activation,
    eta: float,
    loss: str = "squared",
    gram: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same step for w_j = r_j p_j + B c_j with inputs x = B z, z (S, b, s): g_j = B gc_j, so only c_j and the
    scalar r_j change: c_new = alpha c - (eta G / (b n))^T z, r_new = alpha r. Returns (c, r, loss)."""
    u = z @ c.mT  # w_j^T x = c_j^T z
    gcoef, lval = _coefficients(u, y, a, act, loss)
    alpha, gs = _sphere_factors(gcoef, u, z @ z.mT if gram is None else gram, eta)
    return torch.baddbmm(c * alpha.unsqueeze(-1), gs.mT, z, alpha=-1.0), r * alpha, lval


def renormalise_reduced(c: torch.Tensor, r: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact renormalisation ||r p + B c||^2 = r^2 q + ||c||^2 = 1 (removes round-off drift of the fused norm)."""
    n = torch.sqrt(r * r * q + (c * c).sum(-1))
    return c / n.unsqueeze(-1), r / n


def reduced_coordinates(
    w0: torch.Tensor, basis: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split w0 (S, N, d) on V = span(basis) (S, d, s orthonormal): w0 = r0 p + B c0 with c0 = B^T w0 and
    p = (I - B B^T) w0 formed explicitly, then projected off V once more (the basis is orthonormal only to round-off).
    Returns (c0, r0, p, q) with q = ||p||^2 computed from p itself, all in w0's dtype.

    Not ||w0||^2 - ||c0||^2: for w0 inside V that difference cancels to round-off of either sign, unrelated to p's
    own round-off, and the renormalisation by r^2 q + ||c||^2 then bounds neither r nor r theta^T p. Where
    ||p|| <= sqrt(eps) ||w0|| (eps of w0's dtype: p changes ||w0||^2 by less than one rounding unit, so it is
    round-off of a neuron built inside V), p = 0, q = 0 and r0 = 0: the neuron is B c0 and stays in V exactly
    (r_t = r0 prod alpha = 0). Elsewhere r0 = 1, and r_t^2 q + ||c_t||^2 = 1 keeps |r_t| <= 1 / ||p||.
    """
    c0 = w0 @ basis
    p = w0 - c0 @ basis.mT
    p = p - (p @ basis) @ basis.mT  # re-orthogonalise
    pn = torch.linalg.vector_norm(p, dim=-1)
    keep = pn > math.sqrt(torch.finfo(w0.dtype).eps) * torch.linalg.vector_norm(w0, dim=-1)
    p = p * keep.unsqueeze(-1)
    return c0, keep.to(w0.dtype), p, pn * pn * keep


def check_alignments(align: torch.Tensor, seeds: list[int], step: int, mode: str) -> None:
    """Raise NumericalFailure if some |theta_k^T w_j| in `align` (S, N, K) exceeds 1 + COS_TOL (unit w_j and
    theta_k: a cosine). Non-finite values are left to the divergence check."""
    m = align.detach().abs().amax(-1)  # (S, N)
    worst = float(m.max())
    if worst > 1.0 + COS_TOL:
        i, j = divmod(int(m.argmax()), m.shape[1])
        raise NumericalFailure(
            f"w2s {mode}: seed {seeds[i]} neuron {j}: logged alignment |theta^T w| = {worst:.6g} at step {step} is "
            f"not a cosine (> 1 + {COS_TOL:g}): numerical failure"
        )


def check_unit_norm(weights: torch.Tensor, seeds: list[int], mode: str, tol: float = NORM_TOL) -> None:
    """Raise NumericalFailure if a returned neuron of `weights` (S, N, d) has | ||w_j|| - 1 | > tol."""
    dev = (torch.linalg.vector_norm(weights.detach().double(), dim=-1) - 1.0).abs()  # (S, N)
    worst = float(dev.max())
    if not worst <= tol:
        i, j = divmod(int(dev.argmax()), dev.shape[1])
        norm = float(torch.linalg.vector_norm(weights[i, j].double()))
        raise NumericalFailure(
            f"w2s {mode}: seed {seeds[i]} neuron {j}: returned weight norm {norm:.6g} is not 1 (tolerance {tol:g}):"
            " numerical failure"
        )


class _Logger:
    """Alignment of each group with every theta_k (mean and quantiles), loss, samples, at the logged steps."""

    def __init__(self, groups: torch.Tensor, n_tasks: int, batch: int):
        self.groups = groups.cpu()
        self.n_tasks = n_tasks
        self.batch = batch
        curves = [f"{k}_alignment{sfx}" for sfx in ("", "_seeds") for k in ("target", "nontarget", "nontarget_target")]
        self.log: dict = {k: [] for k in ("steps", "samples", "loss", "eta", *curves)}
        self.log["groups"] = {
            f"group{g}_theta{k}": {"mean": [], **{f"q{int(q * 100)}": [] for q in QUANTILES}}
            for g in range(n_tasks)
            for k in range(n_tasks)
        }

    def record(self, t: int, align: torch.Tensor, loss: float | None, eta: float) -> None:
        al = align.detach().abs().double().cpu().numpy()  # (S, N, K); the summaries in NumPy (cheaper per call)
        groups = self.groups.numpy()
        lg = self.log
        lg["steps"].append(t)
        lg["samples"].append(t * self.batch)
        lg["loss"].append(loss)
        lg["eta"].append(eta)
        for g in range(self.n_tasks):
            sel = al[:, groups == g, :].reshape(-1, self.n_tasks)  # (S N_g, K): all tasks in one call
            means, qs = sel.mean(0), np.quantile(sel, QUANTILES, axis=0)
            for k in range(self.n_tasks):
                entry = lg["groups"][f"group{g}_theta{k}"]
                entry["mean"].append(float(means[k]))
                for q, val in zip(QUANTILES, qs[:, k]):
                    entry[f"q{int(q * 100)}"].append(float(val))
        tgt = al[:, groups == 0, 0].mean(-1)  # (S,)
        non = groups > 0
        own = np.take_along_axis(al[:, non, :], groups[non].reshape(1, -1, 1), axis=-1)[..., 0]
        nt = own.mean(-1) if non.any() else np.full_like(tgt, np.nan)
        ntt = al[:, non, 0].mean(-1) if non.any() else np.full_like(tgt, np.nan)
        for key, val in (("target", tgt), ("nontarget", nt), ("nontarget_target", ntt)):
            lg[f"{key}_alignment"].append(float(val.mean()))
            lg[f"{key}_alignment_seeds"].append([float(x) for x in val])


def _thresholds(hit_threshold: float | list[float] | tuple[float, ...] | None) -> list[float]:
    if hit_threshold is None:
        return []
    return sorted(float(x) for x in (hit_threshold if isinstance(hit_threshold, (list, tuple)) else [hit_threshold]))


def _record_hits(hits: dict[float, list], values: list[float], t: int) -> bool:
    """Set, per threshold and seed, the first checked step t where the value reached it; True when all did."""
    for thr, hs in hits.items():
        for i, v in enumerate(values):
            if hs[i] is None and v >= thr:
                hs[i] = t
    return all(h is not None for hs in hits.values() for h in hs)


def _hit_extra(hits: dict[float, list]) -> dict:
    if not hits:
        return {}
    return {"hit_step": hits[min(hits)], "hit_steps": {str(k): v for k, v in hits.items()}}


def train(
    config: W2SConfig,
    problem: Problem,
    mode: str,
    progress: bool = True,
    hit_threshold: float | list[float] | None = None,
) -> RunResult:
    """Run `config.steps` online SGD steps of the strong model in `mode` ("w2s", "sft", "sft_anchor", "ceiling":
    W2S's inputs with the true labels, the reference of the performance gap recovered).

    All seeds of `problem` run as one batched computation. A non-finite loss or weight stops the run: the
    result has `diverged_at` (the first bad step) and the metrics logged before it. A finite logged alignment that
    is not a cosine (|theta_k^T w_j| > 1 + COS_TOL), or a returned neuron off the unit sphere (by more than
    NORM_TOL), raises NumericalFailure naming the seed, the neuron and the value. With `hit_threshold` (one
    value or several), the target alignment of each seed is checked at every chunk end; `extra["hit_step"]`
    holds, per seed, the first checked step where it reached the lowest threshold (None: censored at the
    budget), `extra["hit_steps"]` the same for every threshold (keyed by str(threshold)), and the run stops
    once every seed has reached every threshold.
    """
    if mode not in STREAMS or mode == "weak":
        raise ValueError(f"mode must be 'w2s', 'sft' or 'sft_anchor', got {mode!r}")
    dev, dtype = problem.w0.device, problem.w0.dtype
    act, link = get_activation(config.activation), get_activation(config.link)
    steps, batch, n_seeds = config.steps, config.batch_size, problem.n_seeds
    reduced = mode in ("w2s", "ceiling") and config.lambda_kappa == 1.0
    gens = make_generators(problem.seeds, STREAMS[mode], dev)
    b0, thetas, a = problem.bases[:, 0], problem.thetas, problem.a
    theta0 = thetas[:, 0, :].unsqueeze(-1)  # (S, d, 1)
    pi0 = config.pi[0]
    base = step_scale(config, mode)
    bias = torch.zeros(n_seeds, dtype=dtype, device=dev) if config.strong_bias == "trained" else None

    if reduced:
        # w = r p + B c with p formed once (q = ||p||^2 and theta^T p from p itself, see reduced_coordinates): d-dim
        # GEMMs at the start and at the end only
        c0, r0, p, q = reduced_coordinates(problem.w0, b0)
        b_theta = (thetas @ b0).mT  # (S, s, K)
        p_theta = p @ thetas.mT  # (S, N, K)
        weak_b = problem.weak_u @ b0  # (S, M, s)
        theta0_b = b_theta[:, :, :1]  # (S, s, 1): theta_kappa in the coordinates z of x = B z
        stepper = ReducedStepper(c0, r0, a, act, config.loss, batch, config.chunk, bias, config.bias_eta)
        zbuf = torch.empty(n_seeds, config.chunk, batch, config.s, dtype=dtype, device=dev)

        def alignment() -> torch.Tensor:
            c, r = stepper.weights()
            return r.unsqueeze(-1) * p_theta + c @ b_theta

        def weights() -> torch.Tensor:
            c, r = stepper.weights()
            return torch.bmm(c, b0.mT).addcmul_(r.unsqueeze(-1), p)

    else:
        extra_grad = None
        if mode == "sft_anchor" and config.anchor_weight > 0:
            u0, _, v0 = top_k_bases(problem.w0, config.anchor_rank)
            s_ref = reference_block(problem.w0, u0, v0)

            def extra_grad(w: torch.Tensor) -> torch.Tensor:
                return config.anchor_weight * subspace_penalty_grad(w, u0, v0, s_ref)

        stepper = DenseStepper(
            problem.w0, a, act, config.loss, config.chunk, dense_step, extra_grad, bias, config.bias_eta
        )

        def alignment() -> torch.Tensor:
            return stepper.weights() @ thetas.mT

        weights = stepper.weights
        if mode not in ("w2s", "ceiling"):
            xbuf = torch.empty(n_seeds, config.chunk, batch, config.d, dtype=dtype, device=dev)

    center = label_mean(config, problem) if mode == "w2s" and config.label_center == "mean" else None
    label_sum = torch.zeros(n_seeds, dtype=torch.float64)  # mean of the labels trained on, per seed (reported)

    def labels(x: torch.Tensor, weak_first: torch.Tensor | None, chunk_major: bool = True) -> torch.Tensor:
        """Labels of a chunk's inputs: x (S, n b, dim) (the reduced path), (n, S, b, dim) or, with chunk_major
        False, (S, n, b, dim) (the isotropic buffer: labels (S, n, b), each batch's product as in the (n, S, ...)
        layout, so the same numbers)."""
        if mode == "w2s":
            fw = weak_output(x, weak_first, config.weak_activation, config.weak_bound)
            y = transform_labels(fw, config.transform, config.clip)
            y = y if center is None else y - center.unsqueeze(-1)
        else:
            theta = theta0_b if reduced else theta0
            y = pi0 * link.value((x @ (theta if chunk_major else theta.unsqueeze(1))).squeeze(-1))
        seed_axis = 0 if y.dim() == 2 or not chunk_major else 1
        label_sum.add_(y.double().movedim(seed_axis, 0).reshape(n_seeds, -1).sum(-1).cpu())
        return y

    logger = _Logger(problem.groups, config.n_tasks, batch)
    marks = log_steps(steps, config.n_log)
    mark_set = set(marks)
    losses = torch.zeros(steps, n_seeds, dtype=torch.float64)

    def record(t: int, al: torch.Tensor, loss: float | None, eta: float) -> None:
        check_alignments(al, problem.seeds, t, mode)
        logger.record(t, al, loss, eta)

    record(0, alignment(), None, base * schedule_factor(config, 0, steps))  # no loss before step 1
    last, t, diverged = 0, 0, None
    hits: dict[float, list] = {thr: [None] * n_seeds for thr in _thresholds(hit_threshold)}
    bar = tqdm(total=steps, desc=mode, disable=not progress, leave=False, mininterval=1.0)

    def take_losses(ys: torch.Tensor, i0: int, i1: int) -> torch.Tensor:
        """Losses (i1 - i0, S) of the chunk's steps i0..i1-1 (not yet stored), in float64 on the CPU."""
        return stepper.losses(ys, i0, i1).double().cpu()

    while t < steps and diverged is None:
        n = min(config.chunk, steps - t)
        if reduced:  # noise in zbuf (S, n, b, s): labels and Gram matrices as GEMMs on contiguous memory
            noise = generative_reduced(gens, config.s, n, batch, dtype, dev, out=zbuf)
            zs = zbuf[:, :n]
            ys = labels(zs.reshape(n_seeds, n * batch, config.s), weak_b).view(n_seeds, n, batch).transpose(0, 1)
            ys = stepper.prepare_labels(ys)
            grams = (zs @ zs.mT).transpose(0, 1)
        else:
            if mode in ("w2s", "ceiling"):
                noise = generative_dense(gens, b0, config.lambda_kappa, n, batch)
                ys = labels(noise, problem.weak_u)  # labels do not depend on W: whole chunk at once
                grams = noise @ noise.mT  # (n, S, b, b) Gram matrices of the batches, for the fused renormalisation
            else:  # drawn into xbuf (S, n, b, d) as in the reduced path: no stacked copy of the chunk
                noise = isotropic(gens, n, batch, config.d, dtype, dev, out=xbuf)
                xs = xbuf[:, :n]
                ys = labels(xs, None, chunk_major=False).transpose(0, 1)
                grams = (xs @ xs.mT).transpose(0, 1)
        per_step = list(zip(noise.unbind(0), grams.unbind(0), ys.unbind(0)))  # views made once per chunk
        flushed = 0  # steps of this chunk whose losses are stored in `losses`
        for i in range(n):
            stop.check()  # a safe point per step (anchorft.stop; 0.1 us against a step's 400)
            eta = base * schedule_factor(config, t, steps)
            stepper.step(i, *per_step[i], eta)
            t += 1
            if t in mark_set:
                losses[t - (i + 1 - flushed) : t] = take_losses(ys, flushed, i + 1)
                flushed = i + 1
                al = alignment()
                bad = ~torch.isfinite(losses[last:t]).all(-1)
                if bad.any() or not torch.isfinite(al).all():
                    diverged = last + int(bad.nonzero()[0, 0]) + 1 if bad.any() else t
                    break
                record(t, al, float(losses[last:t].mean()), eta)
                last = t
        if reduced:  # fold the deferred scale back and renormalise exactly, once per chunk
            stepper.reset(*renormalise_reduced(*stepper.weights(), q))
        else:
            stepper.end_chunk()
        if hits and diverged is None:
            tgt = alignment()[:, problem.groups == 0, 0].abs().mean(-1).cpu()
            if _record_hits(hits, tgt.tolist(), t):
                if not logger.log["steps"] or logger.log["steps"][-1] != t:
                    record(t, alignment(), float(losses[last:t].mean()) if t > last else None, eta)
                bar.update(n)
                break
        if flushed < n and diverged is None:
            cl = take_losses(ys, flushed, n)
            losses[t - (n - flushed) : t] = cl
            bad = ~torch.isfinite(cl).all(-1)
            if bad.any():
                diverged = t - (n - flushed) + int(bad.nonzero()[0, 0]) + 1
        bar.update(n)
    bar.close()
    extra = {**_hit_extra(hits), "steps_run": t}
    if center is not None:
        extra["label_center"] = [float(v) for v in center.cpu()]
    extra["train_label_mean"] = [float(v) / max(t * batch, 1) for v in label_sum]
    if bias is not None:
        extra["bias"] = [float(v) for v in bias.cpu()]  # the trained output bias at the end, per seed
    final = weights()
    if diverged is None:
        check_unit_norm(final, problem.seeds, mode)
    return RunResult(mode=mode, log=logger.log, weights=final, diverged_at=diverged, extra=extra)


def train_weak(
    config: W2SConfig,
    problem: Problem,
    progress: bool = True,
    hit_threshold: float | list[float] | None = None,
    stop_at: float | None = None,
) -> tuple[torch.Tensor, dict]:
    """Train the weak model from scratch: M neurons, f_weak = mean_j sigma_w(u_j^T x), online spherical SGD with
    the true labels pi_kappa sigma*_kappa(theta_kappa^T x) for `config.weak_steps` steps, in the space
    `config.weak_space`:

    - "subspace" (the s-dimensional problem): u_j uniform on the unit sphere of V_kappa, inputs x = B z with
      z ~ N(0, I_s) (the task restricted to V_kappa, where the strong model's pretraining lives), step
      weak_eta M / s; the SGD runs in the coordinates z (the weak model's cost depends on s, not on d);
    - "ambient": u_j uniform on S^{d-1}, x ~ N(0, I_d), step weak_eta M / d.

    With `hit_threshold` the run stops once every seed's mean alignment |theta_kappa^T u_j| reached every
    threshold (checked at chunk ends). With `stop_at`, each seed's weights are frozen at the first chunk end where
    its mean alignment reached `stop_at` (the others go on), and the run stops when all are frozen.

    Returns (U (S, M, d), info) with info["hit_step"] per seed (None: censored), the per-threshold hit steps, the
    final alignments and, with `stop_at`, `stop_step` per seed (None: never reached, weights at the budget).
    """
    dev, dtype = problem.w0.device, problem.w0.dtype
    m, batch = config.weak_neurons, config.batch_size
    subspace = config.weak_space == "subspace"
    dim = config.s if subspace else config.d
    u = np.stack([np.random.default_rng([s, 1]).standard_normal((m, dim)) for s in problem.seeds])
    u = torch.from_numpy(u / np.linalg.norm(u, axis=-1, keepdims=True)).to(device=dev, dtype=dtype)
    act, link = get_activation(config.weak_activation), get_activation(config.link)
    a = torch.full((m,), 1.0 / m, dtype=dtype, device=dev)
    basis = problem.bases[:, 0]  # (S, d, s)
    theta0 = problem.thetas[:, 0, :].unsqueeze(-1)  # (S, d, 1)
    if subspace:
        theta0 = basis.mT @ theta0  # B^T theta_kappa (unit: theta_kappa lies in V_kappa)
    gens = make_generators(problem.seeds, STREAMS["weak"], dev)
    eta = config.weak_eta * m / dim
    hits: dict[float, list] = {thr: [None] * problem.n_seeds for thr in _thresholds(hit_threshold)}
    stop_step: list[int | None] = [None] * problem.n_seeds
    frozen = torch.zeros(problem.n_seeds, dtype=torch.bool, device=dev)
    kept = torch.empty_like(u)
    t = 0
    bar = tqdm(total=config.weak_steps, desc="weak", disable=not progress, leave=False, mininterval=1.0)
    while t < config.weak_steps:
        n = min(config.chunk, config.weak_steps - t)
        xs = isotropic(gens, n, batch, dim, dtype, dev)
        ys = config.pi[0] * link.value((xs @ theta0).squeeze(-1))
        for i in range(n):
            stop.check()  # a safe point per step (anchorft.stop)
            u, _ = dense_step(u, xs[i], ys[i], a, act, eta, config.loss)
        t += n
        u = u / u.norm(dim=-1, keepdim=True)
        if stop_at is not None and frozen.any():
            u = torch.where(frozen[:, None, None], kept, u)
        bar.update(n)
        al = (u @ theta0).squeeze(-1).abs().mean(-1).cpu()
        if not torch.isfinite(al).all():
            raise FloatingPointError(f"weak model training diverged (non-finite weights) by step {t}")
        if stop_at is not None:
            for i, v in enumerate(al.tolist()):
                if stop_step[i] is None and v >= stop_at:
                    stop_step[i], frozen[i] = t, True
                    kept[i] = u[i]
            if bool(frozen.all()):
                break
        if hits and _record_hits(hits, al.tolist(), t):
            break
    bar.close()
    info = {
        "space": config.weak_space,
        "hit_step": hits[min(hits)] if hits else [None] * problem.n_seeds,
        **_hit_extra(hits),
        "steps_run": t,
        "final_alignment": al.tolist(),
    }
    if stop_at is not None:
        info.update({"stop_at": stop_at, "stop_step": stop_step})
    return (u @ basis.mT if subspace else u), info
