"""What a testbed cell's evaluation costs under the verdict's two presets, and what the shared prefill saves.

    .venv/bin/python benchmarks/bench_base_cost.py [--model DIR] [--repeats 2] [--out cost.json]

One model (default: the default preset's base, pretrained into the cache when absent; pass a fine-tuned model of a
study, models/RUN-seedS, to time what a cell evaluates) is evaluated as a comparison's cell evaluates it, on one
torch thread as a cell runs, under:
- `pilot`: configs/toy/verdict.yaml's settings (8 ID samples a problem, greedy on every item), the prompt of each
  sample prefilled on its own (the decoding loop before the shared prefill) and the evaluation sets rebuilt per cell;
- `pilot-shared`: the same settings with the shared prefill (`eval.hf_backend._prefill`) and the sets built once;
- `verdict2`: configs/toy/verdict2.yaml's settings (greedy only, n_samples 1) with both.
Each setting runs `--repeats` times, interleaved, and its median is kept. Prints one JSON object: seconds per
setting, the ratios pilot / pilot-shared (the shared prefill on the ID samples' pass) and pilot / verdict2 (a cell's
evaluation, before and after), and whether the grades are equal: every greedy grade in all three, and every
sample's grade between pilot and pilot-shared (their samples are drawn from the same generator).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path


def _whole_batch_prefill(model, cache_kw, input_ids, mask, pos):
    """The decoding loop's first step before the shared prefill: every row's prompt run."""
    from anchorft.eval.hf_backend import _cache_of

    res = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: None})
    return res.logits[:, -1, :], _cache_of(res)


def measure(model_dir: Path, repeats: int) -> dict:
    import torch

    from anchorft.eval import hf_backend
    from anchorft.eval.loading import load_causal_lm, load_tokenizer
    from anchorft.studies.testbed import compare_config as cc

    torch.set_num_threads(1)  # as a cell runs (`CompareConfig.threads`)
    model, tok = load_causal_lm(model_dir).eval(), load_tokenizer(str(model_dir))
    cfgs = {"pilot": cc.load_config("verdict"), "verdict2": cc.load_config("verdict2")}
    shared_prefill = hf_backend._prefill

    def one(name: str) -> tuple[float, dict]:
        cfg = cfgs["pilot" if name.startswith("pilot") else name]
        t0 = time.perf_counter()
        if name == "pilot":
            hf_backend._prefill = _whole_batch_prefill
            eval_sets = cc.comparison_eval_sets(cfg)
            sets = eval_sets, cc.comparison_val_sets(cfg, eval_sets)
        else:
            sets = cc.comparison_sets(cfg)
        try:
            metrics = cc.evaluate_comparison(model, tok, cfg, *sets, per_item=True)
        finally:
            hf_backend._prefill = shared_prefill
        return time.perf_counter() - t0, metrics

    cc.comparison_sets(cfgs["pilot"]), cc.comparison_sets(cfgs["verdict2"])  # built once, as a study builds them
    names = ["pilot", "pilot-shared", "verdict2"]
    seconds: dict[str, list[float]] = {n: [] for n in names}
    grades: dict[str, dict] = {}
    for _ in range(repeats):
        for n in names:
            s, metrics = one(n)
            seconds[n].append(s)
            grades[n] = metrics
    med = {n: statistics.median(v) for n, v in seconds.items()}

    def greedy(m: dict) -> dict:
        return {k: v["greedy"] for k, v in m["per_item"].items()} | {
            f"val/{k}": v["greedy"] for k, v in m.get("val", {}).get("per_item", {}).items()
        }

    return {
        "model": model_dir.name,  # the folder's name: a record names no machine's paths
        "repeats": repeats,
        "seconds": {n: [round(x, 2) for x in v] for n, v in seconds.items()},
        "median_seconds": {n: round(v, 2) for n, v in med.items()},
        "pilot / pilot-shared": round(med["pilot"] / med["pilot-shared"], 2),
        "pilot / verdict2": round(med["pilot"] / med["verdict2"], 2),
        "greedy grades equal": greedy(grades["pilot"]) == greedy(grades["pilot-shared"]) == greedy(grades["verdict2"]),
        "sample grades equal (pilot, pilot-shared)": grades["pilot"]["per_item"] == grades["pilot-shared"]["per_item"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None, help="a model folder (default: the default preset's base)")
    p.add_argument("--label", default="", help="what the model is, kept in the output")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = p.parse_args()
    if args.model is None:
        from anchorft.studies.testbed.compare_config import load_config
        from anchorft.toy.pretrain import pretrained_model

        args.model = pretrained_model(load_config("default").pretrain)
    load_before = [round(x, 2) for x in os.getloadavg()]
    res = measure(args.model, args.repeats)
    res["label"] = args.label
    res["provenance"] = {
        # the model as MODEL (`label` says which): a record names no machine's paths
        "command": f"python benchmarks/bench_base_cost.py --model MODEL --repeats {args.repeats}",
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "dirty": bool(subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True).stdout),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    text = json.dumps(res, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
