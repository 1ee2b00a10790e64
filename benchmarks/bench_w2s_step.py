"""Speed of the weak-to-strong simulator's SGD step (paper preset: d=1024, s=128, N=160, batch 32).

Compares the time per sample of the project's step (`anchorft.w2s.dynamics.train`, seeds batched, inputs and
labels included; the marginal cost of a step, from runs of n and 3n steps) with two NumPy loops of the same model
written below: a competent one in the same reduced coordinates (float32, seeds batched, x = B z never formed, the
batch Gram matrix for the renormalisation: the same arithmetic as the project's W2S step), and the plain full-space
one (one seed at a time, float64, dense x in R^d, as one would write it first). Also measures this machine's
single-precision matmul rate in the same process and prints the share of it that each step reaches (matmul FLOPs
only). The machine may be shared:
times are process CPU times (time.process_time; everything runs on one thread, so a process that is descheduled
by other users is not charged for it), each the best of several interleaved repeats; the numbers that matter
are the ratios. Set CLOCK=wall in the environment to use wall-clock time instead.

With --whole, also times the whole paper preset as a user runs it (`anchorft w2s run --preset paper`, W2S and SFT,
its seeds, start-up, risks and plots included) in a child process (its user + system CPU time) and divides by its
samples (modes x seeds x steps x batch), against the full-space NumPy loop per sample (the mean of its W2S and SFT
loops). With --json, writes every number printed.

    .venv/bin/python benchmarks/bench_w2s_step.py [--steps 500] [--repeats 3] [--seeds 3] [--whole] [--json PATH]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

_clock = time.perf_counter if os.environ.get("CLOCK") == "wall" else time.process_time

import numpy as np  # noqa: E402
import torch  # noqa: E402

from anchorft.w2s.config import apply_overrides, load_config  # noqa: E402
from anchorft.w2s.dynamics import train  # noqa: E402
from anchorft.w2s.problem import build_problem  # noqa: E402


def numpy_baseline(cfg, basis, theta, w0, weak_u, a, steps: int, mode: str, rng: np.random.Generator) -> float:
    """Plain per-step NumPy loop of the same model, one seed: returns seconds per step."""
    w = w0.copy()
    eta = 0.1
    h2 = lambda u: (u * u - 1.0) / np.sqrt(2.0)  # noqa: E731
    h4 = lambda u: (u**4 - 6.0 * u**2 + 3.0) / np.sqrt(24.0)  # noqa: E731
    dsig = lambda u: 2.0 * u / np.sqrt(2.0) + (4.0 * u**3 - 12.0 * u) / np.sqrt(24.0)  # noqa: E731
    t0 = _clock()
    for _ in range(steps):
        if mode == "w2s":
            x = rng.standard_normal((cfg.batch_size, cfg.s)) @ basis.T  # x = B z in R^d
            fw = h4(x @ weak_u.T).mean(1)
            fw = np.clip(fw, -cfg.clip, cfg.clip)
            y = fw * np.exp(fw)
        else:
            x = rng.standard_normal((cfg.batch_size, cfg.d))
            y = h4(x @ theta)
        u = x @ w.T
        f = (h2(u) + h4(u)) @ a
        g = ((f - y)[:, None] * dsig(u) * a).T @ x / cfg.batch_size
        g -= (g * w).sum(1, keepdims=True) * w
        w -= eta * g
        w /= np.linalg.norm(w, axis=1, keepdims=True)
    return (_clock() - t0) / steps


def numpy_reduced(cfg, problem, steps: int, rng: np.random.Generator) -> float:
    """W2S at lambda = 1 in reduced coordinates, float32, seeds batched: c (S, N, s) with w = r p + B c, labels from
    the weak model's s-dim projection; the fused renormalisation of `dynamics.reduced_step`. Seconds per step."""
    f32 = np.float32
    b0 = problem.bases[:, 0].float().numpy()
    c = (problem.w0.float().numpy() @ b0).astype(f32)  # (S, N, s)
    r = np.ones(c.shape[:2], dtype=f32)
    weak = (problem.weak_u.float().numpy() @ b0).astype(f32)  # (S, M, s)
    a = problem.a.float().numpy()
    S, B, s = c.shape[0], cfg.batch_size, cfg.s
    q2, q4 = f32(1 / np.sqrt(2.0)), f32(1 / np.sqrt(24.0))
    eta = f32(0.1)
    t0 = _clock()
    for _ in range(steps):
        z = rng.standard_normal((S, B, s), dtype=f32)
        v = z @ weak.transpose(0, 2, 1)  # weak fields (S, B, M)
        v2 = v * v
        fw = ((v2 * v2 - 6 * v2 + 3) * q4).mean(-1)
        fw = np.clip(fw, -cfg.clip, cfg.clip)
        y = fw * np.exp(fw)
        u = z @ c.transpose(0, 2, 1)  # (S, B, N)
        u2 = u * u
        f = ((u2 - 1) * q2 + (u2 * u2 - 6 * u2 + 3) * q4) @ a
        G = (u * (2 * q2 + (4 * u2 - 12) * q4)) * a * (f - y)[..., None]  # (S, B, N)
        rad = (G * u).sum(1) / B
        g2 = ((z @ z.transpose(0, 2, 1)) @ G * G).sum(1) / (B * B)
        inv = 1 / np.sqrt(1 + eta * eta * (g2 - rad * rad))
        alpha = (1 + eta * rad) * inv
        c = c * alpha[..., None] - (eta / B) * inv[..., None] * (G.transpose(0, 2, 1) @ z)
        r = r * alpha
    return (_clock() - t0) / steps


def project_run(cfg, problem, mode: str, steps: int) -> float:
    """Seconds of one `train` run of `steps` steps (its set-up and logging included)."""
    cfg = apply_overrides(cfg, {"steps": steps})
    t0 = _clock()
    with torch.no_grad():
        train(cfg, problem, mode, progress=False)
    return _clock() - t0


def matmul_rate(n: int = 512, reps: int = 20) -> float:
    """Best single-precision matmul rate (FLOP/s) of torch on this machine, same thread setting as the step."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(3):
        t0 = _clock()
        for _ in range(reps):
            a @ b
        best = min(best, (_clock() - t0) / reps)
    return 2 * n**3 / best


def step_parts(cfg, dense: bool = False, reps: int = 64) -> dict[str, float]:
    """Seconds per step of two of its parts, timed alone on the step's shapes: the Gaussian draws (one chunk per
    seed, as `sampling.gaussian_chunk` draws them, divided by the chunk) and the step's three batched GEMMs (the
    forward u, Gram G, the update's G^T x). W2S works on z in R^s (u = z c^T); with `dense`, SFT on x in R^d
    (u = (W x^T)^T, the orientation `dynamics.dense_step` uses). What a step takes beyond both is elementwise work
    and per-op overhead. Best of 3."""
    from anchorft.w2s.sampling import gaussian_chunk, make_generators

    S, B, N, n = cfg.n_seeds, cfg.batch_size, sum(cfg.group_sizes), cfg.chunk
    dim = cfg.d if dense else cfg.s
    gens = make_generators(list(range(S)), 1, torch.device("cpu"))
    buf = torch.empty(S, n, B, dim)
    z, c, gram, h = torch.randn(S, B, dim), torch.randn(S, N, dim), torch.randn(S, B, B), torch.randn(S, B, N)
    u, ut = torch.empty(S, B, N), torch.empty(S, N, B)
    best = {"draws": float("inf"), "gemms": float("inf")}
    for _ in range(3):
        t0 = _clock()
        for _ in range(max(reps // n, 2)):
            gaussian_chunk(gens, n, B, dim, torch.float32, torch.device("cpu"), out=buf)
        best["draws"] = min(best["draws"], (_clock() - t0) / (max(reps // n, 2) * n))
        t0 = _clock()
        for _ in range(reps):
            if dense:
                torch.bmm(c, z.mT, out=ut)
            else:
                torch.bmm(z, c.mT, out=u)
            torch.bmm(gram, h, out=u)
            c.baddbmm_(h.mT, z, alpha=-1e-9)
        best["gemms"] = min(best["gemms"], (_clock() - t0) / reps)
    return best


def whole_preset(cfg) -> dict:
    """CPU seconds (user + system, the child's) of `anchorft w2s run --preset paper` and the samples it trains on
    (`cfg`: the paper preset as shipped)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="anchorft-bench-") as tmp:
        cmd = [sys.executable, "-m", "anchorft", "w2s", "run", "--preset", "paper", "--out", tmp, "--quiet"]
        subprocess.run(cmd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu, "samples": len(cfg.modes) * cfg.n_seeds * cfg.steps * cfg.batch_size}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--whole", action="store_true", help="also time the whole paper preset (about 20 s)")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    paper = load_config("paper")
    cfg = apply_overrides(paper, {"steps": args.steps, "n_seeds": args.seeds, "n_log": 5})
    problem = build_problem(cfg)
    S, B, N, d, s = cfg.n_seeds, cfg.batch_size, sum(cfg.group_sizes), cfg.d, cfg.s
    np0 = [x[0].double().numpy() for x in (problem.bases[:, 0], problem.thetas[:, 0], problem.w0, problem.weak_u)]
    a = problem.a.double().numpy()
    rng = np.random.default_rng(0)
    np_steps = max(20, args.steps // 4)
    # the project's step is the marginal cost of a step: runs of n and 3n steps, (t(3n) - t(n)) / 2n, so that the
    # run's set-up (about 17 ms for W2S, 20 % of a 200-step run) is not charged to the step
    t = {k: float("inf") for k in ("np_w2s", "np_sft", "np_red", "w2s1", "w2s3", "sft1", "sft3")}
    for mode in ("w2s", "sft"):  # a first run's one-time costs (caches, BLAS set-up) would land in t(n) alone
        project_run(cfg, problem, mode, 2)
    for _ in range(args.repeats):  # interleaved, best of repeats
        t["np_red"] = min(t["np_red"], numpy_reduced(cfg, problem, np_steps, rng))
        t["np_w2s"] = min(t["np_w2s"], numpy_baseline(cfg, *np0, a, np_steps, "w2s", rng))
        t["np_sft"] = min(t["np_sft"], numpy_baseline(cfg, *np0, a, np_steps, "sft", rng))
        for mode in ("w2s", "sft"):
            for k in (1, 3):
                t[f"{mode}{k}"] = min(t[f"{mode}{k}"], project_run(cfg, problem, mode, k * args.steps))
    for mode in ("w2s", "sft"):
        t[mode] = (t[f"{mode}3"] - t[f"{mode}1"]) / (2 * args.steps)
    rate = matmul_rate()
    # useful FLOPs per step of the project (matmuls only): forward, gradient, b x b Gram, weak model / labels
    flops = {
        "w2s": S * (2 * B * s * N * 2 + 2 * B * B * s + 2 * B * B * N + 2 * B * s * cfg.weak_neurons),
        "sft": S * (2 * B * d * N * 2 + 2 * B * B * d + 2 * B * B * N + 2 * B * d),
    }
    out: dict = {"seeds": S, "steps": args.steps, "repeats": args.repeats, "threads": args.threads}
    out["matmul_gflops"] = rate / 1e9
    for mode in ("w2s", "sft"):
        out[mode] = {
            "step_ms": t[mode] * 1e3,
            "us_per_sample": t[mode] / (S * B) * 1e6,
            "numpy_us_per_sample": t[f"np_{mode}"] / B * 1e6,
            "share_of_matmul_rate": flops[mode] / t[mode] / rate,
        }
    clock = "wall-clock" if os.environ.get("CLOCK") == "wall" else "process CPU"
    print(f"paper preset: d={d} s={s} N={N} batch={B}, seeds batched={S}, torch threads={args.threads}, {clock} time")
    print(f"matmul rate (float32, 512^3): {rate / 1e9:.1f} GFLOP/s")
    for mode in ("w2s", "sft"):
        m = out[mode]
        print(
            f"{mode:>4}: numpy loop {m['numpy_us_per_sample']:8.2f} us/sample | project {m['us_per_sample']:8.2f}"
            f" us/sample | ratio {m['numpy_us_per_sample'] / m['us_per_sample']:6.1f}x | step {m['step_ms']:.2f} ms"
            f" = {m['share_of_matmul_rate']:.1%} of matmul rate"
        )
    red = t["np_red"] / (S * B)
    proj = t["w2s"] / (S * B)
    print(
        f" w2s: competent NumPy loop in reduced coordinates (float32, {S} seeds batched) {red * 1e6:8.2f} us/sample"
        f" = {flops['w2s'] / t['np_red'] / rate:.1%} of matmul rate"
    )
    print(f"ratio W2S step vs the competent reduced-coordinate NumPy loop: {red / proj:.2f}x")
    print(f"ratio W2S step vs the full-space NumPy loop (float64, one seed, x in R^d): {t['np_w2s'] / B / proj:.1f}x")
    parts = step_parts(cfg)
    gemm_flops = S * (2 * B * s * N * 2 + 2 * B * B * N)
    rest = t["w2s"] - parts["draws"] - parts["gemms"]
    print(
        f"what bounds the W2S step ({t['w2s'] * 1e3:.2f} ms): its three GEMMs alone {parts['gemms'] * 1e3:.2f} ms"
        f" ({gemm_flops / parts['gemms'] / rate:.0%} of the 512^3 rate on these shapes), Gaussian draws"
        f" {parts['draws'] * 1e3:.2f} ms ({parts['draws'] / t['w2s']:.0%} of the step), elementwise work and"
        f" per-op overhead {rest * 1e3:.2f} ms ({rest / t['w2s']:.0%}); the share of the matmul rate cannot exceed"
        f" {flops['w2s'] / (parts['gemms'] + parts['draws']) / rate:.0%} without faster draws or GEMMs"
    )
    out["w2s"].update(
        numpy_reduced_us_per_sample=red * 1e6,
        gemms_ms=parts["gemms"] * 1e3,
        draws_ms=parts["draws"] * 1e3,
        bound_share=flops["w2s"] / (parts["gemms"] + parts["draws"]) / rate,
    )
    if args.whole:
        whole = whole_preset(paper)
        loop = (t["np_w2s"] + t["np_sft"]) / (2 * B)  # the full-space loop, seconds per sample
        sft_parts = step_parts(cfg, dense=True)
        # the preset's two runs reduced to their steps' GEMMs and draws: no set-up, elementwise work, risks or plots
        floor = paper.steps * sum(p["gemms"] + p["draws"] for p in (parts, sft_parts))
        floor *= paper.n_seeds / S  # the parts were timed at this run's seeds
        whole.update(
            us_per_sample=whole["cpu_s"] / whole["samples"] * 1e6,
            ratio=loop * whole["samples"] / whole["cpu_s"],
            sft_gemms_ms=sft_parts["gemms"] * 1e3,
            sft_draws_ms=sft_parts["draws"] * 1e3,
            floor_cpu_s=floor,
            bound_ratio=loop * whole["samples"] / floor,
        )
        out["whole"] = whole
        print(
            f"whole paper preset (`anchorft w2s run --preset paper`, {whole['samples']:,} samples):"
            f" {whole['cpu_s']:.1f} CPU-s = {whole['us_per_sample']:.2f} us/sample; the full-space NumPy loop"
            f" {loop * 1e6:.1f} us/sample: {whole['ratio']:.1f}x; the SFT step's GEMMs alone"
            f" {sft_parts['gemms'] * 1e3:.2f} ms and draws {sft_parts['draws'] * 1e3:.2f} ms: with nothing but both"
            f" steps' GEMMs and draws the preset would take {floor:.1f} CPU-s ({whole['bound_ratio']:.1f}x at most)"
        )
    if args.json:
        from anchorft.io import write_json
        from anchorft.provenance import git_state

        out.update(
            clock=clock,
            torch=torch.__version__,
            load_average=[round(x, 2) for x in os.getloadavg()],
            command="python benchmarks/bench_w2s_step.py " + " ".join(sys.argv[1:]),
            commit=git_state()["commit"],
        )
        write_json(args.json, out)


if __name__ == "__main__":
    main()
