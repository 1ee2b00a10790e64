"""A Gram-free W2S step against the fused one (paper preset shapes: S seeds, batch 32, s = 128, N = 160).

The fused step (`anchorft.w2s.fused.ReducedStepper.step`) gets the squared gradient norm of each neuron from the
batch's Gram matrix, Q_j = G_j^T (z z^T) G_j: a GEMM per chunk for z z^T and one per step for (z z^T) G. The
variant below uses Q_j = ||M_j||^2 with M = G^T z (S, N, s), the product the update needs anyway: it drops both Gram
GEMMs (about 18 % of the step's matmul FLOPs) and writes c_hat - e t M with one pass over c instead of accumulating
inside the GEMM. Both on one torch thread, process CPU time, best of several interleaved repeats, over whole chunks
of fixed inputs (the fused step is charged its chunk's Gram matrices; draws and labels are left out: the same for
both). Also checks that both give the same weights after a chunk (max abs difference). With --json, writes the
numbers.

    .venv/bin/python benchmarks/bench_w2s_gram_free.py [--chunks 10] [--repeats 5] [--seeds 3 8] [--json PATH]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from anchorft.provenance import git_state  # noqa: E402
from anchorft.w2s.fused import ReducedStepper  # noqa: E402
from anchorft.w2s.hermite import get_activation  # noqa: E402

B, S_DIM, N, CHUNK = 32, 128, 160, 32


class GramFreeStepper(ReducedStepper):
    """The fused step with Q from M = G^T z (no Gram matrix; `gram` is ignored). Even activations, correlation loss
    only (the paper preset's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.even or self.loss != "correlation":
            raise ValueError("the variant covers even polynomial activations and the correlation loss")
        self.m = torch.empty_like(self.c)  # M (S, N, s)

    def step(self, i: int, z: torch.Tensor, gram: torch.Tensor | None, y: torch.Tensor, eta: float) -> None:
        u, h, gg = self.u, self.h, self.gg
        torch.bmm(z, self.c_t, out=u)
        u.mul_(self.sigma)
        pw, ra = self.powers, self.ra
        v = pw[0]
        torch.mul(u, u, out=v)
        for k in range(1, self.k):
            torch.mul(pw[k - 1], v, out=pw[k])
        torch.mv(self.pw_flat, self.qa, out=self.f_flat[i])
        torch.addcmul(ra[-2], v, ra[-1], out=h)
        for m in range(self.k - 3, -1, -1):
            h.mul_(v).add_(ra[m])
        h.mul_(u).mul_(y.unsqueeze(-1))  # G (y holds -y_true)
        e = eta / self.b
        rr, qq, t1, inv, sig = self.rr, self.qq, self.t1, self.inv, self.sig
        torch.mul(h, u, out=gg)
        torch.sum(gg, 1, out=rr)  # R
        torch.bmm(self.h_t, z, out=self.m)  # M = G^T z
        torch.linalg.vector_norm(self.m, dim=-1, out=qq)
        qq.square_()  # Q = ||M_j||^2
        torch.addcmul(qq, rr, rr, value=-1.0, out=inv)
        torch.add(self.one, inv, alpha=e * e, out=inv).rsqrt_()
        torch.add(self.one, rr, alpha=e, out=t1)  # 1 + e R
        sig.mul_(t1)
        torch.reciprocal(sig, out=t1)  # 1 / (sigma (1 + e R))
        sig.mul_(inv)
        self.c.addcmul_(self.m, self.t1.unsqueeze(-1), value=-e)


def _setup(n_seeds: int):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(N, generator=g) / N
    c = torch.randn(n_seeds, N, S_DIM, generator=g)
    c = c / (1.25 * c.norm(dim=-1, keepdim=True))  # |c_j| < 1: part of each neuron outside the subspace
    r = torch.full((n_seeds, N), 0.6)
    zbuf = torch.randn(n_seeds, CHUNK, B, S_DIM, generator=g)
    labels = torch.randn(CHUNK, n_seeds, B, generator=g)
    return a, c, r, zbuf, labels


def _run_chunks(stepper: ReducedStepper, zbuf: torch.Tensor, ys: torch.Tensor, chunks: int, gram: bool) -> float:
    """Seconds per step over `chunks` chunks; the fused stepper's chunk Gram matrices are computed inside the clock."""
    zs = zbuf.transpose(0, 1)  # (n, S, b, s)
    t0 = time.process_time()
    for _ in range(chunks):
        grams = (zbuf @ zbuf.mT).transpose(0, 1) if gram else [None] * CHUNK
        for i in range(CHUNK):
            stepper.step(i, zs[i], grams[i], ys[i], 0.4)
    return (time.process_time() - t0) / (chunks * CHUNK)


def measure(n_seeds: int, chunks: int, repeats: int) -> dict:
    act = get_activation("he2+he4")
    a, c, r, zbuf, labels = _setup(n_seeds)

    def make(cls):
        st = cls(c, r, a, act, "correlation", B, CHUNK)
        return st, st.prepare_labels(labels)

    (fused, ys), (free, _) = make(ReducedStepper), make(GramFreeStepper)
    _run_chunks(fused, zbuf, ys, 1, True)
    _run_chunks(free, zbuf, ys, 1, False)
    diff = max(float((x - y).abs().max()) for x, y in zip(fused.weights(), free.weights()))
    best = {"fused": float("inf"), "gram_free": float("inf")}
    for _ in range(repeats):  # interleaved; each from the same start
        best["fused"] = min(best["fused"], _run_chunks(make(ReducedStepper)[0], zbuf, ys, chunks, True))
        best["gram_free"] = min(best["gram_free"], _run_chunks(make(GramFreeStepper)[0], zbuf, ys, chunks, False))
    return {
        "seeds": n_seeds,
        "fused_ms": best["fused"] * 1e3,
        "gram_free_ms": best["gram_free"] * 1e3,
        "gram_free / fused": best["gram_free"] / best["fused"],
        "max_abs_difference": diff,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 8])
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [measure(s, args.chunks, args.repeats) for s in args.seeds]
    for row in rows:
        print(
            f"W2S step, {row['seeds']} seeds: fused {row['fused_ms']:.3f} ms, Gram-free {row['gram_free_ms']:.3f} ms "
            f"({row['gram_free / fused']:.2f}x the fused step's time); weights after a chunk differ by at most "
            f"{row['max_abs_difference']:.1e}"
        )
    if args.json:
        from anchorft.io import write_json

        write_json(
            args.json,
            {
                "rows": rows,
                "chunks": args.chunks,
                "chunk": CHUNK,
                "repeats": args.repeats,
                "torch": torch.__version__,
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "command": "python benchmarks/bench_w2s_gram_free.py " + " ".join(sys.argv[1:]),
                "commit": git_state()["commit"],
            },
        )


if __name__ == "__main__":
    main()
