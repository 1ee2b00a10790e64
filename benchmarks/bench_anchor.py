"""Cost of the RPSFT anchor, as ratios measured in one run (wall-clock on a shared machine is inflated).

    .venv/bin/python benchmarks/bench_anchor.py                       # small Llama: hidden 256, 4 layers
    .venv/bin/python benchmarks/bench_anchor.py --rank 32 --batch 16  # other settings

Prints:
1. step time RPSFT / SFT for a training step (forward, backward, penalty, clip, AdamW; the order of
   RPSFTTrainer's step) at anchor_every = 1 and 10, closed-form gradient against autograd, and L2
   (full-rank anchor). Variants run interleaved round by round on copies of one model; ratios of
   the summed step times over the same rounds, and of the penalty operation alone to the SFT step.
   Times are the process's CPU time with one torch thread (--wall for wall-clock).
2. exact against randomized SVD for building the anchor: time, and subspace overlap
   ||U_exact^T U_approx||_F^2 / k (mean and min over matrices), on the random-init weights (flat
   spectrum: the hard case) and on weights with a power-law spectrum sigma_i = i^-1 (closer to pretrained ones).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters

# CPU time of this process (1 torch thread): robust to other jobs sharing the cores, unlike wall-clock.
CLOCK = time.process_time


def build_model(a) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.inter,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=max(a.seq, 128),
    )
    torch.manual_seed(0)  # benchmark script: transformers' init uses the global generator
    return LlamaForCausalLM(cfg).float()


def make_step(model, anchor, mode: str, every: int, lam: float):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-7, weight_decay=0.0)
    state = {"i": 0}

    def step(batch):
        due = anchor is not None and state["i"] % every == 0
        loss = model(input_ids=batch, labels=batch).loss
        if due and mode == "autograd":
            loss = loss + lam * every * anchor.penalty(model)
        loss.backward()
        if due and mode == "grad":
            anchor.add_penalty_grad_(model, lam * every)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["i"] += 1

    return step


def bench_steps(a, base) -> dict:
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, a.vocab, (a.batch, a.seq), generator=g) for _ in range(a.rounds + a.warmup)]
    anchor = SubspaceAnchor.from_model(base, rank=a.rank)
    l2 = SubspaceAnchor.from_model(base, rank=10**9)
    variants = {
        "sft": (None, "grad", 1),
        "rpsft_every1": (anchor, "grad", 1),
        "rpsft_every10": (anchor, "grad", 10),
        "rpsft_autograd_every1": (anchor, "autograd", 1),
        "l2_every1": (l2, "grad", 1),
    }
    steps = {k: make_step(copy.deepcopy(base), an, mode, ev, 1.0) for k, (an, mode, ev) in variants.items()}
    times = {k: [] for k in variants}
    names = list(variants)
    for r, batch in enumerate(batches):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate: no variant always runs first
        for k in order:
            t0 = CLOCK()
            steps[k](batch)
            if r >= a.warmup:
                times[k].append(CLOCK() - t0)
    # the penalty operation alone, interleaved with SFT steps' own timing above
    m = copy.deepcopy(base)
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    op_grad, op_auto = [], []
    for _ in range(a.rounds):
        t0 = CLOCK()
        anchor.add_penalty_grad_(m, 1.0)
        op_grad.append(CLOCK() - t0)
        t0 = CLOCK()
        anchor.penalty(m).backward()
        op_auto.append(CLOCK() - t0)
    sft_total, sft_med = sum(times["sft"]), statistics.median(times["sft"])
    out = {k: sum(v) / sft_total for k, v in times.items()}
    # per-round ratios to the same round's SFT step: median (every 1) and mean (every 10, amortised)
    per_round = {k: [t / s for t, s in zip(v, times["sft"])] for k, v in times.items()}
    out["median_round_ratio"] = {k: statistics.median(v) for k, v in per_round.items()}
    out["mean_round_ratio"] = {k: statistics.mean(v) for k, v in per_round.items()}
    out["op_closed_form_over_sft_step"] = statistics.median(op_grad) / sft_med
    out["op_autograd_over_sft_step"] = statistics.median(op_auto) / sft_med
    out["op_autograd_over_closed_form"] = statistics.median(op_auto) / statistics.median(op_grad)
    out["sft_step_median_s"] = sft_med
    out["rounds"] = a.rounds
    out["tokens_per_step"] = a.batch * a.seq
    out["anchor"] = repr(anchor)
    return out


def power_law(model) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in select_parameters(model):
            u, _, vh = torch.linalg.svd(torch.randn(p.shape, generator=g), full_matrices=False)
            s = 1.0 / torch.arange(1, u.shape[1] + 1, dtype=torch.float32)
            p.copy_(u @ torch.diag(s) @ vh)


def bench_svd(a, model, label: str) -> dict:
    res = {}
    t0 = time.perf_counter()
    exact = SubspaceAnchor.from_model(model, rank=a.rank)
    res["exact_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    approx = SubspaceAnchor.from_model(
        model, rank=a.rank, svd="randomized", generator=torch.Generator().manual_seed(0)
    )
    res["randomized_s"] = time.perf_counter() - t0
    overlaps = [
        float((e.u.T @ r.u).pow(2).sum()) / e.rank for e, r in zip(exact.entries, approx.entries) if not e.fallback
    ]
    res["time_ratio_randomized_over_exact"] = res["randomized_s"] / res["exact_s"]
    res["overlap_mean"] = statistics.mean(overlaps)
    res["overlap_min"] = min(overlaps)
    res["svd_residual_max"] = max(r.svd_residual for r in approx.entries)
    res["weights"] = label
    return res


def bench_big_matrix(shape: tuple[int, int], k: int) -> dict:
    """Exact vs randomized top-k SVD of one larger matrix with a power-law spectrum (time and overlap)."""
    from anchorft.subspace import top_k_bases

    g = torch.Generator().manual_seed(2)
    m, n = shape
    u, _, vh = torch.linalg.svd(torch.randn(m, n, generator=g), full_matrices=False)
    w = u @ torch.diag(1.0 / torch.arange(1, min(m, n) + 1, dtype=torch.float32)) @ vh
    t0 = time.perf_counter()
    ue, _, _ = top_k_bases(w, k, svd="exact")
    te = time.perf_counter() - t0
    t0 = time.perf_counter()
    ur, _, _ = top_k_bases(w, k, svd="randomized", generator=torch.Generator().manual_seed(0))
    tr = time.perf_counter() - t0
    return {
        "shape": [m, n],
        "k": k,
        "exact_s": te,
        "randomized_s": tr,
        "time_ratio": tr / te,
        "overlap": float((ue.T @ ur).pow(2).sum()) / k,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--inter", type=int, default=688)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv_heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--svd_shape", default="4096x1024", help="one larger matrix for the SVD timing ('' to skip)")
    p.add_argument("--svd_rank", type=int, default=128)
    p.add_argument("--rounds", type=int, default=20, help="timed steps per variant (a multiple of 10)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 = least noise on a shared machine)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--wall", action="store_true", help="time steps with wall-clock instead of process CPU time")
    a = p.parse_args()
    global CLOCK
    if a.wall or a.threads > 1:
        CLOCK = time.perf_counter
    torch.set_num_threads(a.threads)
    base = build_model(a)
    print(
        f"model: Llama hidden {a.hidden}, {a.layers} layers, intermediate {a.inter}, vocab {a.vocab}; "
        f"rank k = {a.rank}; {a.batch} x {a.seq} = {a.batch * a.seq} tokens per step; {a.threads} thread(s)"
    )
    steps = bench_steps(a, base)
    print(f"anchor: {steps['anchor']}")
    clock = "wall-clock" if CLOCK is time.perf_counter else "process CPU time"
    print(f"step time / SFT step time ({clock}; {a.rounds} interleaved rounds, order rotated):")
    print(f"  {'variant':<24} {'sum ratio':>10} {'median/round':>13} {'mean/round':>11}")
    for k in ("rpsft_every1", "rpsft_every10", "rpsft_autograd_every1", "l2_every1"):
        print(
            f"  {k:<24} {steps[k]:>10.3f} {steps['median_round_ratio'][k]:>13.3f} "
            f"{steps['mean_round_ratio'][k]:>11.3f}"
        )
    print("penalty operation alone (median) / SFT step (median):")
    print(
        f"  closed form {steps['op_closed_form_over_sft_step']:.4f}, "
        f"autograd {steps['op_autograd_over_sft_step']:.4f}; "
        f"autograd / closed form = {steps['op_autograd_over_closed_form']:.2f}"
    )
    svd = [bench_svd(a, base, "random init")]
    pl = copy.deepcopy(base)
    power_law(pl)
    svd.append(bench_svd(a, pl, "power-law spectrum"))
    print("SVD exact vs randomized (oversample 10, 4 power iterations):")
    for r in svd:
        print(
            f"  {r['weights']:<19} time randomized / exact = {r['time_ratio_randomized_over_exact']:.2f} "
            f"({r['randomized_s']:.2f} s / {r['exact_s']:.2f} s); overlap mean {r['overlap_mean']:.4f}, "
            f"min {r['overlap_min']:.4f}"
        )
    big = None
    if a.svd_shape:
        big = bench_big_matrix(tuple(int(x) for x in a.svd_shape.split("x")), a.svd_rank)
        print(
            f"  {a.svd_shape} k={a.svd_rank} power-law: time randomized / exact = {big['time_ratio']:.2f} "
            f"({big['randomized_s']:.2f} s / {big['exact_s']:.2f} s); overlap {big['overlap']:.4f}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "steps": steps, "svd": svd, "svd_big": big}, f, indent=1)


if __name__ == "__main__":
    main()
