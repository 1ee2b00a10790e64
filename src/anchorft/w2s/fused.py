"""Fused W2S step at lambda = 1: the update of `dynamics.reduced_step`, restructured for speed (docs/w2s.md, Speed).

`anchorft w2s run` takes this path for W2S at lambda = 1 (the paper preset). Per step, on z (S, b, s), the Gram
matrix z z^T (S, b, b) and labels y (S, b), with e = eta / b, u = z c^T (S, b, N), per-sample coefficients
G_bj = l'(f(x_b), y_b) a_j sigma'(u_bj), R_j = sum_b G_bj u_bj, Q_j = G_j^T (z z^T) G_j and M = G^T z, the
spherical step of `reduced_step` is

    c_new = alpha c - e inv M,   r_new = alpha r,   alpha = (1 + e R) inv,   inv = (1 + e^2 (Q - R^2))^(-1/2).

Deferred scale: keep c = sigma * c_hat and r = sigma * r_hat with one scale sigma_j per neuron. Then r_hat never
changes and

    c_hat_new = c_hat - e / (sigma (1 + e R)) M,   sigma_new = sigma (1 + e R) inv,

one in-place GEMM on c_hat per step (no pass over c to rescale it), u = sigma * (z c_hat^T). The scale is folded back
(c = sigma c_hat, then the exact renormalisation of `renormalise_reduced`) once per chunk.

Even polynomial activations sigma(u) = sum_k q_k v^k (v = u^2, the paper's He2 + He4): with the powers
P = [v, v^2, ...] (S, b, K N) in one buffer, f = q_0 sum_j a_j + P @ [q_1 a, q_2 a, ...] (one matrix-vector product;
the constant is folded into the labels once per chunk) and a_j sigma'(u) = u sum_m (r_m a_j) v^m with
r_m = 2 (m + 1) q_(m+1) (Horner's rule in v with vector coefficients). Other activations use
`Activation.value_and_deriv`. All intermediate tensors live in buffers allocated once; step-size constants are
passed as the `alpha`/`value` arguments of fused ops, so no per-step scalar tensors are made.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from anchorft.w2s.hermite import Activation

__all__ = ["ReducedStepper", "DenseStepper"]


class ReducedStepper:
    """State (c_hat, r_hat, sigma) and buffers of the fused reduced step for S seeds, N neurons, batch b, chunk n.

    `step(i, z, gram, y, eta)` advances one step and writes the network outputs f (less the constant q_0 sum a) of
    that step into row i of the chunk buffer; `prepare_labels(y)` turns a chunk of labels into the form `step` takes;
    `losses(y, i0, i1)` gives the losses (i1 - i0, S) of steps i0..i1-1 of the current chunk; `weights()` gives the
    current (c, r); `reset(c, r)` sets them (used after the per-chunk renormalisation). With `bias` (S,) (squared
    loss) the network has a trainable output bias b, updated in place each step: residual f + b - y, then
    b <- b - bias_eta mean_b (f + b - y).
    """

    def __init__(
        self,
        c: torch.Tensor,
        r: torch.Tensor,
        a: torch.Tensor,
        act: Activation,
        loss: str,
        batch: int,
        chunk: int,
        bias: torch.Tensor | None = None,
        bias_eta: float = 0.0,
    ):
        if loss not in ("squared", "correlation"):
            raise ValueError(f"loss must be 'squared' or 'correlation', got {loss!r}")
        n_seeds, n, _ = c.shape
        dt, dev = c.dtype, c.device
        self.bias, self.bias_eta = bias, bias_eta
        if bias is not None:
            self.fb = torch.zeros(chunk, n_seeds, dtype=dt, device=dev)  # b before each step of the chunk
        self.loss, self.act, self.a, self.b = loss, act, a, batch
        self.c = c.clone()
        self.r = r.clone()
        self.sigma = torch.ones(n_seeds, 1, n, dtype=dt, device=dev)
        self.u, self.h, self.gg = (torch.empty(n_seeds, batch, n, dtype=dt, device=dev) for _ in range(3))
        self.f = torch.empty(chunk, n_seeds, batch, dtype=dt, device=dev)
        self.res = torch.empty(n_seeds, batch, dtype=dt, device=dev)
        self.rr, self.qq, self.t1, self.inv = (torch.empty(n_seeds, n, dtype=dt, device=dev) for _ in range(4))
        self.one = torch.ones((), dtype=dt, device=dev)
        # views made once (a view costs about as much as a small op)
        self.c_t, self.h_t, self.sig = self.c.mT, self.h.mT, self.sigma.squeeze(1)
        self.t1_col, self.res_col = self.t1.unsqueeze(1), self.res.unsqueeze(-1)
        self.f_rows = list(self.f.unbind(0))
        self.f_flat = [x.view(-1) for x in self.f_rows]
        poly = act.poly
        self.even = poly is not None and len(poly) >= 3 and all(x == 0.0 for x in poly[1::2])
        if self.even:
            q = poly[0::2]  # sigma = sum_k q_k v^k
            self.k = len(q) - 1
            self.const = float(q[0]) * float(a.sum())
            self.pw = torch.empty(n_seeds, batch, self.k * n, dtype=dt, device=dev)
            self.pw_flat = self.pw.view(-1, self.k * n)
            self.powers = [self.pw[..., k * n : (k + 1) * n] for k in range(self.k)]  # v, v^2, ...
            self.qa = torch.cat([q[k] * a for k in range(1, self.k + 1)])  # (K N,)
            self.ra = [2.0 * (m + 1) * q[m + 1] * a for m in range(self.k)]  # a_j sigma'(u) = u sum_m ra[m] v^m
        else:
            self.const = 0.0

    def prepare_labels(self, y: torch.Tensor) -> torch.Tensor:
        """Labels of a chunk (n, S, b) in the form `step` takes: y - q_0 sum a (squared loss) or -y (correlation)."""
        return y - self.const if self.loss == "squared" else -y

    def step(self, i: int, z: torch.Tensor, gram: torch.Tensor, y: torch.Tensor, eta: float) -> None:
        """One spherical SGD step on z (S, b, s) with Gram matrix z z^T and prepared labels y (S, b)."""
        u, h, gg = self.u, self.h, self.gg
        torch.bmm(z, self.c_t, out=u)
        u.mul_(self.sigma)
        f = self.f_rows[i]
        if self.even:
            pw = self.powers
            v = pw[0]
            torch.mul(u, u, out=v)
            for k in range(1, self.k):
                torch.mul(pw[k - 1], v, out=pw[k])
            torch.mv(self.pw_flat, self.qa, out=self.f_flat[i])
            ra = self.ra
            if self.k == 1:
                torch.mul(u, ra[0], out=h)
            else:
                torch.addcmul(ra[-2], v, ra[-1], out=h)
                for m in range(self.k - 3, -1, -1):
                    h.mul_(v).add_(ra[m])
                h.mul_(u)
        else:
            val, der = self.act.value_and_deriv(u)
            torch.mv(val.view(-1, u.shape[-1]), self.a, out=self.f_flat[i])
            torch.mul(der, self.a, out=h)
        if self.loss == "squared":
            torch.sub(f, y, out=self.res)
            if self.bias is not None:
                self.fb[i].copy_(self.bias)
                self.res.add_(self.bias.unsqueeze(-1))
                self.bias.sub_(self.res.mean(-1), alpha=self.bias_eta)
            h.mul_(self.res_col)  # G
        else:
            h.mul_(y.unsqueeze(-1))  # y holds -y_true
        e = eta / self.b
        rr, qq, t1, inv, sig = self.rr, self.qq, self.t1, self.inv, self.sig
        torch.mul(h, u, out=gg)
        torch.sum(gg, 1, out=rr)  # R
        torch.bmm(gram, h, out=gg)
        gg.mul_(h)
        torch.sum(gg, 1, out=qq)  # Q
        torch.addcmul(qq, rr, rr, value=-1.0, out=inv)
        torch.add(self.one, inv, alpha=e * e, out=inv).rsqrt_()
        torch.add(self.one, rr, alpha=e, out=t1)  # 1 + e R
        sig.mul_(t1)
        torch.reciprocal(sig, out=t1)  # 1 / (sigma (1 + e R))
        sig.mul_(inv)
        h.mul_(self.t1_col)
        self.c.baddbmm_(self.h_t, z, alpha=-e)

    def losses(self, y: torch.Tensor, i0: int, i1: int) -> torch.Tensor:
        """Losses (i1 - i0, S) of steps i0..i1-1 of the chunk, from the stored outputs and the prepared labels."""
        f, yy = self.f[i0:i1], y[i0:i1]
        if self.loss == "squared":
            d = f - yy
            if self.bias is not None:
                d = d + self.fb[i0:i1].unsqueeze(-1)
            return 0.5 * (d * d).mean(-1)
        return (yy * (f + self.const)).mean(-1)  # yy = -y_true

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Current (c (S, N, s), r (S, N)) of w_j = r_j p_j + B c_j, as new tensors (the caller may modify them).

        p_j and r_j(0) come from `dynamics.reduced_coordinates`: r_j = 0 (and stays 0, r_hat fixed) for a neuron
        inside V; otherwise the per-chunk renormalisation with q_j = ||p_j||^2 keeps |r_j| ||p_j|| <= 1."""
        return self.c * self.sig.unsqueeze(-1), self.r * self.sig

    def reset(self, c: torch.Tensor, r: torch.Tensor) -> None:
        """Set the state to (c, r) with unit scale."""
        self.c.copy_(c)
        self.r.copy_(r)
        self.sigma.fill_(1.0)


class DenseStepper:
    """The full-space step (`dynamics.dense_step`) behind the interface of `ReducedStepper`, so that
    `dynamics.train` runs one loop for every mode: `step(i, x, gram, y, eta)`, `prepare_labels`, `losses`,
    `weights()` (the current W (S, N, d)), `end_chunk()` (exact renormalisation). `step_fn` is
    `dynamics.dense_step` (passed in: this module does not import dynamics); `extra_grad(w)`, if given, adds a
    gradient term to every step (the RPSFT anchor's penalty gradient); `bias` (S,), if given, is a trained output
    bias as in `ReducedStepper`."""

    def __init__(
        self,
        w: torch.Tensor,
        a: torch.Tensor,
        act: Activation,
        loss: str,
        chunk: int,
        step_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]],
        extra_grad: Callable[[torch.Tensor], torch.Tensor] | None = None,
        bias: torch.Tensor | None = None,
        bias_eta: float = 0.0,
    ):
        if loss not in ("squared", "correlation"):
            raise ValueError(f"loss must be 'squared' or 'correlation', got {loss!r}")
        self.w, self.a, self.act, self.loss, self.extra_grad = w.clone(), a, act, loss, extra_grad
        self.bias, self.bias_eta = bias, bias_eta  # as in ReducedStepper
        self.step_fn = step_fn
        self.lbuf = torch.empty(chunk, w.shape[0], dtype=w.dtype, device=w.device)

    def prepare_labels(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def step(self, i: int, x: torch.Tensor, gram: torch.Tensor, y: torch.Tensor, eta: float) -> None:
        extra = self.extra_grad(self.w) if self.extra_grad is not None else None
        if self.bias is not None:  # residual f + b - y: the step sees labels y - b; then b follows the mean residual
            f = self.act.value(x @ self.w.mT) @ self.a
            y = y - self.bias.unsqueeze(-1)
            self.bias.sub_((f - y).mean(-1), alpha=self.bias_eta)
        # in place: the stepper owns w (cloned above), and a new (S, N, d) tensor per step costs a copy and an alloc
        self.w, lval = self.step_fn(self.w, x, y, self.a, self.act, eta, self.loss, extra, gram, inplace=True)
        self.lbuf[i] = lval

    def losses(self, y: torch.Tensor, i0: int, i1: int) -> torch.Tensor:
        return self.lbuf[i0:i1]

    def weights(self) -> torch.Tensor:
        return self.w

    def end_chunk(self) -> None:
        self.w.div_(self.w.norm(dim=-1, keepdim=True))
