"""Peak memory of `anchorft analyze`'s rotation part: streamed from safetensors vs whole models in memory.

    .venv/bin/python benchmarks/analysis_memory.py [--hidden 512 --layers 8 --vocab 8192]

Builds a base and a perturbed Llama checkpoint (random weights), then runs the rotation analysis in a
fresh child process per mode and reports the rise of the peak resident set size (VmHWM, reset through
/proc/self/clear_refs after the imports) over the RSS before the analysis, in MB and as a ratio to the
largest matrix (fp32 bytes) and to one model (fp32 bytes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1]) / 1024.0  # kB -> MB
    raise RuntimeError(field)


def child(mode: str, base: str, tuned: str, k: int, svd: str, dtype: str) -> None:
    import torch

    from anchorft.analysis.run import analyze_rotation
    from anchorft.analysis.streaming import InMemoryWeights, SafetensorsWeights, analysed_matrices

    torch.set_num_threads(1)
    names = analysed_matrices(SafetensorsWeights(base))
    torch.linalg.svd(torch.randn(8, 8, dtype=torch.float64))  # load LAPACK before the baseline
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    rss0 = _status("VmRSS")
    t = time.perf_counter()
    if mode == "stream":
        b, tu = SafetensorsWeights(base), {"t": SafetensorsWeights(tuned)}
    else:
        from transformers import AutoModelForCausalLM

        b = InMemoryWeights.from_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32))
        tu = {"t": InMemoryWeights.from_model(AutoModelForCausalLM.from_pretrained(tuned, dtype=torch.float32))}
    res = analyze_rotation(b, tu, names, k, svd, getattr(torch, dtype), progress=False)
    secs = time.perf_counter() - t
    peak = _status("VmHWM")
    angle = sum(s["angle_u_mean_deg"] for s in res["t"].values()) / len(names)
    print(json.dumps({"rise_mb": peak - rss0, "baseline_mb": rss0, "seconds": secs, "mean_angle_u": angle}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--child", nargs=6, default=None)
    a = ap.parse_args()
    if a.child:
        mode, base, tuned, k, svd, dtype = a.child
        child(mode, base, tuned, int(k), svd, dtype)
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=int(a.hidden * 2.75),
        num_hidden_layers=a.layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    largest = max(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(Path(d) / "base")
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * p.std() * torch.randn_like(p))
        model.save_pretrained(Path(d) / "tuned", max_shard_size="50MB")  # sharded: index.json path
        del model
        print(
            f"model: {n_params / 1e6:.1f}M params = {n_params * 4 / 2**20:.0f} MB fp32; "
            f"largest matrix {largest / 1e6:.2f}M = {largest * 4 / 2**20:.1f} MB fp32"
        )
        for mode, svd, dtype in (
            ("stream", "exact", "float64"),
            ("stream", "exact", "float32"),
            ("stream", "randomized", "float32"),
            ("memory", "exact", "float64"),
        ):
            argv = [mode, f"{d}/base", f"{d}/tuned", str(a.rank), svd, dtype]
            cmd = [sys.executable, __file__, "--child", *argv]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            print(
                f"{mode:6s} svd={svd:10s} {dtype}: peak rise {out['rise_mb']:7.1f} MB = "
                f"{out['rise_mb'] / (largest * 4 / 2**20):5.2f} x largest matrix, "
                f"{out['rise_mb'] / (n_params * 4 / 2**20):5.2f} x one model; {out['seconds']:.1f} s; "
                f"mean angle {out['mean_angle_u']:.4f} deg"
            )


if __name__ == "__main__":
    main()
