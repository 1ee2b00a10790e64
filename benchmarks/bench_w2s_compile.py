"""torch.compile against the hand-fused W2S step (paper preset shapes: S seeds, batch 32, s = 128, N = 160).

The fused step (`anchorft.w2s.fused.ReducedStepper.step`, buffers and in-place ops) against the same update written
as a pure function of tensors and compiled by torch.compile (inductor, C++ code generation on CPU; the step size
passed as a 0-d tensor, so a new step size does not recompile), both on one torch thread, process CPU time, the best
of several interleaved repeats; the compile time is wall time, cold (an empty inductor cache in a temporary folder)
and warm (the same cache again). Inputs: one fixed batch (no draws or labels: the step alone). Also checks that
both give the same update (max abs difference). Prints the ratio; with --json, writes the numbers.

    .venv/bin/python benchmarks/bench_w2s_compile.py [--steps 300] [--repeats 3] [--seeds 8] [--json PATH]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from anchorft.provenance import git_state  # noqa: E402
from anchorft.w2s.fused import ReducedStepper  # noqa: E402
from anchorft.w2s.hermite import get_activation  # noqa: E402

B, S_DIM, N = 32, 128, 160


def functional_step(c, sigma, z, gram, y, e, qa, r1, r2):
    """The fused step's update for an even quartic activation (sigma = q0 + q1 v + q2 v^2, v = u^2) and the
    correlation loss, as a pure function: c (S, N, s), sigma (S, 1, N) the deferred scale, z (S, B, s), gram = z z^T,
    y (S, B) = -labels, e = eta / B (0-d tensor); returns (c_new, sigma_new, f)."""
    u = torch.bmm(z, c.mT) * sigma  # (S, B, N)
    v = u * u
    f = torch.cat([v, v * v], -1) @ qa  # (S, B)
    h = u * (r1 + r2 * v) * y.unsqueeze(-1)  # per-sample coefficients G (S, B, N)
    rr = (h * u).sum(1)  # R (S, N)
    qq = (torch.bmm(gram, h) * h).sum(1)  # Q (S, N)
    inv = torch.rsqrt(1 + e * e * (qq - rr * rr))
    sig = sigma.squeeze(1) * (1 + e * rr)
    c_new = c - e * torch.bmm((h / sig.unsqueeze(1)).mT, z)
    return c_new, (sig * inv).unsqueeze(1), f


def _setup(n_seeds: int):
    g = torch.Generator().manual_seed(0)
    act = get_activation("he2+he4")
    q = act.poly[0::2]  # sigma = sum_k q_k v^k
    a = torch.randn(N, generator=g) / N
    c = torch.randn(n_seeds, N, S_DIM, generator=g) / S_DIM**0.5
    z = torch.randn(n_seeds, B, S_DIM, generator=g)
    labels = torch.randn(n_seeds, B, generator=g)
    consts = (torch.cat([q[1] * a, q[2] * a]), 2.0 * q[1] * a, 4.0 * q[2] * a)
    return act, a, c, z, z @ z.mT, labels, consts


def _time(fn, steps: int) -> float:
    t0 = time.process_time()
    for _ in range(steps):
        fn()
    return (time.process_time() - t0) / steps


def compile_seconds(n_seeds: int, cache: str) -> float:
    """Wall seconds to compile and run the functional step once, in a fresh process with inductor cache `cache`."""
    code = (
        "import time, torch; torch.set_num_threads(1); t = time.perf_counter(); "
        f"import benchmarks.bench_w2s_compile as b; act, a, c, z, gram, y, k = b._setup({n_seeds}); "
        "f = torch.compile(b.functional_step, dynamic=False, fullgraph=True); "
        "f(c, torch.ones(c.shape[0], 1, c.shape[1]), z, gram, -y, torch.tensor(0.4 / 32), *k); "
        "print(time.perf_counter() - t)"
    )
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    act, a, c, z, gram, labels, consts = _setup(args.seeds)
    eta = 0.4
    e = torch.tensor(eta / B)
    stepper = ReducedStepper(c, torch.ones(args.seeds, N), a, act, "correlation", B, 8)
    y = stepper.prepare_labels(labels)  # -labels
    sigma = torch.ones(args.seeds, 1, N)
    compiled = torch.compile(functional_step, dynamic=False, fullgraph=True)
    got = compiled(c, sigma, z, gram, y, e, *consts)
    ref = functional_step(c, sigma, z, gram, y, e, *consts)
    stepper.step(0, z, gram, y, eta)
    c_fused, _ = stepper.weights()
    c_comp = got[0] * got[1].mT  # c = sigma_new * c_hat_new: the fused step's deferred scale folded back
    diff = max(
        float((got[0] - ref[0]).abs().max()),
        float((c_comp - c_fused).abs().max()),
    )
    best = {"fused": float("inf"), "compiled": float("inf")}
    for _ in range(args.repeats):
        best["fused"] = min(best["fused"], _time(lambda: stepper.step(0, z, gram, y, eta), args.steps))
        best["compiled"] = min(best["compiled"], _time(lambda: compiled(c, sigma, z, gram, y, e, *consts), args.steps))
    with tempfile.TemporaryDirectory(prefix="anchorft-inductor-") as cache:
        cold = compile_seconds(args.seeds, cache)
        warm = compile_seconds(args.seeds, cache)
    out = {
        "seeds": args.seeds,
        "steps": args.steps,
        "repeats": args.repeats,
        "fused_ms": best["fused"] * 1e3,
        "compiled_ms": best["compiled"] * 1e3,
        "compiled / fused": best["compiled"] / best["fused"],
        "compile_cold_s": cold,
        "compile_warm_s": warm,
        "max_abs_difference": diff,
        "torch": torch.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "command": "python benchmarks/bench_w2s_compile.py " + " ".join(sys.argv[1:]),
        "commit": git_state()["commit"],
    }
    print(
        f"W2S step, {args.seeds} seeds: fused {out['fused_ms']:.3f} ms, torch.compile {out['compiled_ms']:.3f} ms "
        f"({out['compiled / fused']:.2f}x the fused step's time); compile {cold:.1f} s cold, {warm:.1f} s warm "
        f"(cache); max abs difference {diff:.1e}"
    )
    if args.json:
        from anchorft.io import write_json

        write_json(args.json, out)


if __name__ == "__main__":
    main()
