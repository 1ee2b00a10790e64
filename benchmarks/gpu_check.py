"""GPU check of the RPSFT anchor on stand-ins of the paper's three models (one GPU, no downloads, <= 8 min).

For each of configs/models/*.json: a randomly initialised model of the same family at the real widths
(hidden, intermediate, heads, vocabulary) and reduced depth (`--layers`, default 2), in bf16 on the GPU; the
anchor built there (exact SVD in fp32 of every matrix, embeddings and lm_head included, k = 768); then a
plain training loop of `--steps` (10) bf16 steps on random tokens: forward + backward, the penalty's closed-form
gradient added to `.grad` (`SubspaceAnchor.add_penalty_grad_`, lambda 1), AdamW step. Checks: every loss and
penalty finite, the penalty exactly 0 at step 0 (bases built from the weights the loop moves), > 0 after, the
bases on the weights' device. Prints one table: anchor build time and size, median step time, median penalty
time and its share of the step (steps 1.., after warm-up). Exit status 1 if a check fails.

Imports only torch, transformers and the project's anchor code (`pip install --no-deps -e .` is enough).

    python benchmarks/gpu_check.py [--layers 2] [--steps 10] [--batch 2] [--seq 1024] [--out check.json]
    python benchmarks/gpu_check.py --tiny --device cpu      # the CPU test's tiny configuration

lr is 1e-4 (not the recipe's 1e-6): bf16 weights of size ~0.02 do not move under steps of 1e-6, and the check
needs the penalty to leave 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from anchorft.rpsft.anchor import SubspaceAnchor

ROOT = Path(__file__).resolve().parents[1]
DROP = ("architectures", "torch_dtype", "dtype", "transformers_version", "model_type")


def stand_in(config_path: Path, layers: int, tiny: bool):
    """The real config at `layers` layers (all widths real), or with `tiny` every width divided down."""
    real = json.loads(config_path.read_text())
    kw = {k: v for k, v in real.items() if k not in DROP}
    kw["num_hidden_layers"] = layers
    kw["max_window_layers"] = layers
    if tiny:
        heads, kv = real["num_attention_heads"], real.get("num_key_value_heads", real["num_attention_heads"])
        kw.update(num_attention_heads=4 * (heads // kv), num_key_value_heads=4, head_dim=8)
        kw["hidden_size"] = kw["num_attention_heads"] * 8
        kw["intermediate_size"] = 2 * kw["hidden_size"]
        kw["vocab_size"] = 512
        kw["rope_scaling"] = None
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            kw.pop(k, None)
    return AutoConfig.for_model(real["model_type"], **kw)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_model(name: str, cfg, args, device: torch.device, dtype: torch.dtype) -> dict:
    torch.manual_seed(args.seed)  # transformers' init draws from the global generator (a script, not the library)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    _sync(device)
    t0 = time.perf_counter()
    anchor = SubspaceAnchor.from_model(model, rank=args.rank, dtype=torch.float32)
    _sync(device)
    build_s = time.perf_counter() - t0
    named = dict(model.named_parameters())
    placed = all(t.device == named[e.name].device for e in anchor.entries for t in e.tensors().values())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-7, weight_decay=0.0)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    losses, penalties, step_s, pen_s = [], [], [], []
    for _ in range(args.steps):
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen, device=device)
        _sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        _sync(device)
        t1 = time.perf_counter()
        stats = anchor.add_penalty_grad_(model, args.anchor_lambda)
        _sync(device)
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        t3 = time.perf_counter()
        losses.append(float(loss))
        penalties.append(float(stats["penalty"]))
        step_s.append(t3 - t0)
        pen_s.append(t2 - t1)
    later = slice(1, None) if args.steps > 1 else slice(0, None)
    med_step, med_pen = statistics.median(step_s[later]), statistics.median(pen_s[later])
    res = {
        "model": name,
        "layers": cfg.num_hidden_layers,
        "hidden": cfg.hidden_size,
        "vocab": cfg.vocab_size,
        "parameters": params,
        "matrices": len(anchor.entries),
        "fallback": sum(e.fallback for e in anchor.entries),
        "bases_gb": sum(e.numel for e in anchor.entries) * 4 / 1e9,
        "anchor_build_s": build_s,
        "step_s": med_step,
        "penalty_s": med_pen,
        "penalty_share": med_pen / med_step,
        "losses": losses,
        "penalties": penalties,
        "bases_on_weights_device": placed,
        "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
    }
    res["ok"] = bool(
        placed
        and all(map(math.isfinite, losses + penalties))
        and penalties[0] == 0.0
        and (args.steps < 2 or penalties[-1] > 0)
    )
    del model, anchor, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    return res


def table(rows: list[dict]) -> str:
    head = "| model | layers | params | matrices (L2) | bases fp32 | build s | step s | penalty s | share | "
    head += "loss first -> last | penalty first, last | ok |\n" + "|---" * 12 + "|"
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['parameters'] / 1e9:.3f} G | {r['matrices']} ({r['fallback']}) | "
            f"{r['bases_gb']:.2f} GB | {r['anchor_build_s']:.2f} | {r['step_s']:.3f} | {r['penalty_s']:.4f} | "
            f"{100 * r['penalty_share']:.1f} % | {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f} | "
            f"{r['penalties'][0]:.3g}, {r['penalties'][-1]:.3g} | {'yes' if r['ok'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=sorted(str(x) for x in (ROOT / "configs" / "models").glob("*.json")))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--rank", type=int, default=768)
    p.add_argument("--anchor_lambda", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="widths divided down (CPU test); rank 4, seq 32")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    if a.tiny:
        a.rank, a.seq = 4, 32
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    rows = []
    for path in a.models:
        name = Path(path).stem
        rows.append(check_model(name, stand_in(Path(path), a.layers, a.tiny), a, device, dtype))
        print(f"{name}: done ({rows[-1]['anchor_build_s']:.1f} s anchor, ok={rows[-1]['ok']})", file=sys.stderr)
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {dev}, {a.dtype}, k = {a.rank}, {a.steps} steps of {a.batch} x {a.seq} tokens, lr {a.lr}")
    print(table(rows))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        Path(a.out).write_text(json.dumps({"args": vars(a), "device": dev, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
