"""GPU check on stand-ins of the paper's models (every visible GPU, no downloads, sized for <= 8 min; not timed here).

Part 1, the real entry points (`--only launch`): `anchorft train` started through `accelerate launch` with
configs/accelerate/{zero2,zero3,fsdp2}.yaml, one process per visible GPU (`--nproc`; NCCL), at `--launch_lr`
(1e-4: the recipes' 1e-6 barely moves bf16 weights, so the anchor would not act) without warm-up, on a
stand-in at the real widths (hidden, intermediate, heads, vocabulary) and `--layers` (2) layers, saved to a
folder with a stand-in tokenizer, on a few conversational rows:
rpsft under ZeRO-2, l2 under ZeRO-3, iw_sft under FSDP2, lora and osf under ZeRO-2 (`--matrix full`: rpsft, l2,
iw_sft and lora under every config, osf under ZeRO-2 and FSDP2 (refused under ZeRO-3)), each
for `--launch_steps` steps with a checkpoint at the end; then rpsft resumed from that checkpoint in a new run
(anchor read back and fingerprint-checked) to twice the steps. Per run: the exit status, the steps done, the
final loss, step time (train_runtime / steps), for lora and osf the adapter in the checkpoint and a final model
without PEFT keys, the final model loaded with strict keys (no missing, unexpected or mismatched weight), for
rpsft and l2 a penalty that has left 0, and the peak GPU memory of process 0 (metrics.json) against the
per-component estimate of `anchorft train --estimate` (`anchorft.rpsft.estimate.method_memory`) for the same
stage, GPU count, batch and length, within `--memory_tolerance` (20 %). The resumed run's first penalty (computed
on the checkpoint's weights by the engine's processes) is compared with the same penalty computed in this one
process from the checkpoint's model and anchor (relative error <= 1e-4). `--out` writes every row and a summary.
With vLLM installed and a GPU: one GRPO step of `anchorft rl --use_vllm true`
(generation through vLLM). Without a GPU (`--device cpu`), the DeepSpeed and FSDP2 configs are skipped with
the reason printed and each method runs through the launcher with configs/accelerate/ddp.yaml on one CPU
process (`--cpu`), or with `--nproc 2` on two gloo processes (torchrun's launcher); the save and the resume run as
on the GPU.

Part 2, the anchor in a hand loop (`--only anchor`): for each of configs/models/*.json the same stand-in in
bf16; the anchor built there (exact SVD in fp32 of every matrix, embeddings and lm_head included, k = 768); then
`--steps` (10) bf16 steps on random tokens: forward + backward, the penalty's closed-form gradient added to
`.grad` (`SubspaceAnchor.add_penalty_grad_`, lambda 1), AdamW step. Checks: every loss and penalty finite,
the drift at step 0 within fp32 rounding (8 eps sqrt(m + n)), the penalty after the steps over 100 times the
first, the bases on the weights' device. One table: anchor build time and size,
median step time, median penalty time and its share of the step.

Exit status 1 if a check fails.

    python benchmarks/gpu_check.py [--only all|launch|anchor] [--matrix diagonal|full] [--out check.json]
    python benchmarks/gpu_check.py --tiny --device cpu      # the CPU test's tiny configuration (same path)
    python benchmarks/gpu_check.py --tiny --device cpu --nproc 2 --only launch    # 2 CPU processes (gloo)

lr is 1e-4 in the hand loop (not the recipe's 1e-6): bf16 weights of size ~0.02 do not move under steps of 1e-6,
and the check needs the penalty to leave 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    losses, penalties, drifts, step_s, pen_s = [], [], [], [], []
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
        drifts.append(float(stats["drift_max"]))
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
    # At step 0 W = W_0, so U^T W V - S_ref is rounding alone: exactly 0 when the block is recomputed by the kernel
    # that built S_ref (the CPU), not on a GPU, whose fp32 products reduce in another order (seen on an H200:
    # penalty 7.6e-8 against 0.26 after 10 steps). The bound is the random-walk model of two fp32 products of
    # inner size m and n: relative error of the block <= 8 eps sqrt(m + n), for the largest anchored matrix.
    m_plus_n = max(sum(named[e.name].shape) for e in anchor.entries)
    res["drift_first"], res["rounding_bound"] = drifts[0], 8 * torch.finfo(torch.float32).eps * math.sqrt(m_plus_n)
    res["ok"] = bool(
        placed
        and all(map(math.isfinite, losses + penalties))
        and drifts[0] <= res["rounding_bound"]
        and (args.steps < 2 or penalties[-1] > 100 * penalties[0])
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


# ---------------------------------------------------------------- part 1: the real entry points through the launcher
# the LoRA recipes name zero2.yaml; OSF runs under ZeRO-2 and FSDP2 (refused under ZeRO-3)
DIAGONAL = (("zero2", "rpsft"), ("zero3", "l2"), ("fsdp2", "iw_sft"), ("zero2", "lora"), ("zero2", "osf"))
PEFT = ("lora", "osf")
RECIPE_MODEL = "qwen2.5-3b-instruct"  # the stand-in's family and widths (tied embeddings, k/v on the L2 fallback)


def launch_stand_in(folder: Path, layers: int, tiny: bool, seed: int) -> tuple[Path, dict]:
    """A stand-in of RECIPE_MODEL saved with a stand-in tokenizer (trained here), and its config as a dict."""
    from anchorft.rpsft.stand_in import build_stand_in_tokenizer

    cfg = stand_in(ROOT / "configs" / "models" / f"{RECIPE_MODEL}.json", layers, tiny)
    tok = build_stand_in_tokenizer("qwen2", [r["completion"][0]["content"] for r in launch_rows(16)])
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, cfg.to_dict()


def launch_rows(n: int) -> list[dict]:
    from anchorft.data.openr1 import to_conversation
    from anchorft.rpsft.stand_in import example_rows

    return [to_conversation(r["problem"], r["generations"][-1] * 4) for r in example_rows(n)]


def _stage(cfg_name: str, device: str, nproc: int = 1) -> tuple[str, list[str]]:
    """(stage for the estimate, launcher flags) of a launcher config on this device, with `nproc` processes (on
    CUDA one per GPU, NCCL; on the CPU gloo)."""
    if device == "cpu":
        # one process: accelerate's --cpu launcher; several: its torchrun launcher (--cpu would take the simple
        # launcher, which starts one process whatever --num_processes says), the trainer on gloo (`launch_train`)
        stage = "single" if nproc == 1 else "ddp"
        cpu = ["--cpu"] if nproc == 1 else []
        return stage, ["--config_file", str(ROOT / "configs/accelerate/ddp.yaml"), *cpu, "--num_processes",
                       str(nproc), "--mixed_precision", "no"]  # fmt: skip
    return cfg_name, [
        "--config_file",
        str(ROOT / f"configs/accelerate/{cfg_name}.yaml"),
        "--num_processes",
        str(nproc),
    ]


def skip_reason(cfg_name: str, device: str) -> str | None:
    if device == "cpu":
        return f"{cfg_name}: skipped on the CPU (DeepSpeed and FSDP2 need CUDA here); ddp.yaml on the CPU instead"
    if cfg_name.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        return f"{cfg_name}: skipped, DeepSpeed is not installed (pip install 'anchorft[deepspeed]'); ddp.yaml instead"
    return None


def launch_train(cfg_name: str, method: str, model: Path, data: Path, out: Path, a, extra: list[str]) -> dict:
    """`accelerate launch ... -m anchorft.cli train` of the recipe's leaf, on the stand-in; the command, its exit
    status, seconds and what metrics.json holds."""
    stage, flags = _stage(cfg_name, a.device, a.nproc)
    recipe = ROOT / "configs" / "rpsft" / RECIPE_MODEL / f"{method}.yaml"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *flags, "-m", "anchorft.cli", "train",
           "--config", str(recipe), "--model_name_or_path", str(model), "--dataset", str(data),
           "--output_dir", str(out), "--max_steps", str(a.launch_steps), "--save_strategy", "steps",
           "--save_steps", str(a.launch_steps), "--logging_steps", "1", "--effective_batch_size", str(2 * a.nproc),
           "--learning_rate", str(a.launch_lr), "--warmup_steps", "0",
           "--max_length", str(a.launch_seq), "--anchor_rank", str(a.launch_rank), "--seed", str(a.seed),
           *(["--ddp_backend", "gloo"] if a.device == "cpu" and a.nproc > 1 else []), *extra]  # fmt: skip
    shown = "accelerate launch " + " ".join(flags) + " -m anchorft.cli " + " ".join(cmd[cmd.index("train") :])
    print(f"$ {shown}", flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    res = {"config": cfg_name, "stage": stage, "method": method, "rc": proc.returncode, "processes": a.nproc,
           "seconds": time.perf_counter() - t0, "command": shown}  # fmt: skip
    if proc.returncode != 0:
        res["error"] = (proc.stderr or proc.stdout)[-3000:]
        print(res["error"], file=sys.stderr)
        return res
    m = json.loads((out / "metrics.json").read_text())
    hist = m["log_history"]
    losses = [h["loss"] for h in hist if "loss" in h]
    runtime = next((h["train_runtime"] for h in hist if "train_runtime" in h), None)
    res.update(global_step=m["global_step"], resumed=f"resuming from {out.parent}" in proc.stdout,
               penalties={h["step"]: h["anchor/penalty"] for h in hist if "anchor/penalty" in h},
               strict_load=_strict_load(out),
               loss_last=losses[-1] if losses else None, peak_bytes=m.get("cuda_peak_allocated_bytes"),
               step_s=runtime / max(1, a.launch_steps) if runtime else None,
               anchor_saved=(out / f"checkpoint-{a.launch_steps}" / "anchor").is_dir(),
               adapter_saved=(out / f"checkpoint-{a.launch_steps}" / "adapter").is_dir(),
               world=_ranks_saved(out / f"checkpoint-{a.launch_steps}"),
               plain_model=_plain_model(out))  # fmt: skip
    return res


def _ranks_saved(checkpoint: Path) -> int:
    """How many processes the run had: each saves its RNG state in the checkpoint (rng_state_R.pth under several,
    rng_state.pth alone), so a launch that started fewer processes than asked shows here."""
    return len(list(checkpoint.glob("rng_state_*.pth"))) or int((checkpoint / "rng_state.pth").is_file())


def _plain_model(folder: Path) -> bool:
    """The final model folder loads as its base architecture: weights present, none keyed by PEFT (base_model.*)."""
    from safetensors import safe_open

    files = sorted(folder.glob("model*.safetensors"))
    keys = [k for f in files for k in safe_open(str(f), "pt").keys()]
    return bool(keys) and not any(k.startswith("base_model.") or "lora_" in k or "_osf_" in k for k in keys)


def _strict_load(folder: Path) -> str | None:
    """None when the final model folder loads as its architecture with no missing, unexpected or mismatched weights
    (transformers' loading info), else what did not match (or why it did not load)."""
    try:
        _, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    except Exception as e:  # noqa: BLE001 - reported in the row, the check fails
        return f"{type(e).__name__}: {e}"[:300]
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    return None if not bad else json.dumps(bad, default=str)[:300]


def one_process_penalty(checkpoint: Path) -> float:
    """The anchor's penalty (no lambda) on a checkpoint's weights, in this one process: the saved model and the
    saved anchor (`checkpoint/anchor`), in fp32. A run resumed from that checkpoint computes the same penalty at its
    first step, under its own engine and processes."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    anchor = SubspaceAnchor.load(checkpoint / "anchor", model, check_fingerprint=False)
    return float(anchor.drift(model)["penalty"])


def estimate_for(res: dict, cfg: dict, a) -> float:
    from anchorft.rpsft.estimate import method_memory

    gpu = res["stage"] != "single"
    est = method_memory(cfg, res["method"], rank=a.launch_rank, stage=res["stage"], gpus=a.nproc, per_device=2,
                        seq_len=a.launch_seq, weight_bytes=4, activation_bytes=2 if gpu else 4,
                        reference_bytes=2 if gpu else 4, checkpointing=gpu)  # fmt: skip
    return est["total"]


def check_launch(a) -> tuple[list[dict], bool]:
    """Part 1: every planned launch, the resume and (vLLM) one GRPO step; (rows, all ok)."""
    work = Path(tempfile.mkdtemp(prefix="gpu-check-launch-"))
    model, cfg = launch_stand_in(work / "stand-in", a.layers, a.tiny, a.seed)
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in launch_rows(8)))
    full = tuple((c, m) for c in ("zero2", "zero3", "fsdp2") for m in ("rpsft", "l2", "iw_sft", "lora"))
    plan = DIAGONAL if a.matrix == "diagonal" else (*full, ("zero2", "osf"), ("fsdp2", "osf"))
    plan = [(c, m) for c, m in plan if a.launch_methods is None or m in a.launch_methods]
    rows, ok, ran = [], True, set()
    for cfg_name, method in plan:
        reason = skip_reason(cfg_name, a.device)
        if reason is not None:  # the same method through the launcher with ddp.yaml instead
            print(reason, flush=True)
            cfg_name = "ddp"
            if (cfg_name, method) in ran:
                continue
        ran.add((cfg_name, method))
        res = launch_train(cfg_name, method, model, data, work / f"{cfg_name}-{method}", a, [])
        if res["rc"] == 0:
            if method not in PEFT:  # the memory estimate covers the full-fine-tuning methods only
                res["estimate_bytes"] = estimate_for(res, cfg, a)
                if res.get("peak_bytes"):  # measured on CUDA (process 0): within --memory_tolerance of the estimate
                    res["memory_ok"] = abs(res["peak_bytes"] / res["estimate_bytes"] - 1) <= a.memory_tolerance
            if method in PEFT:  # the adapter in the checkpoint, a plain model at the end (no PEFT keys)
                res["ok"] = res["global_step"] == a.launch_steps and res["adapter_saved"] and res["plain_model"]
            else:
                res["ok"] = res["global_step"] == a.launch_steps and (method == "iw_sft" or res["anchor_saved"])
            # the final model loads strictly; as many processes ran as were asked; where the anchor acts (the launch
            # lr), its penalty has left 0
            res["ok"] = res["ok"] and res["strict_load"] is None and res.get("memory_ok", True)
            res["ok"] = res["ok"] and res["world"] == a.nproc
            if method in ("rpsft", "l2"):
                res["ok"] = res["ok"] and max(res["penalties"].values(), default=0.0) > 0
        ok &= bool(res.get("ok"))
        rows.append(res)
    first = next((r for r in rows if r.get("ok") and r["method"] in ("rpsft", "l2")), None)
    if first is not None:  # resume the first anchored run from its checkpoint, in a new folder, to twice the steps
        ckpt = work / f"{first['config']}-{first['method']}" / f"checkpoint-{a.launch_steps}"
        a2 = argparse.Namespace(**{**vars(a), "launch_steps": 2 * a.launch_steps})
        res = launch_train(first["config"], first["method"], model, data, work / "resumed", a2,
                           ["--resume_from_checkpoint", str(ckpt)])  # fmt: skip
        res["method"] = first["method"] + " (resume)"
        res["ok"] = res["rc"] == 0 and res["global_step"] == 2 * a.launch_steps and res["resumed"]
        if res["rc"] == 0:  # its first step's penalty (on the checkpoint's weights) against one process's
            got = res["penalties"].get(a.launch_steps + 1)
            res["penalty_one_process"] = want = one_process_penalty(ckpt)
            res["penalty_rel_err"] = abs(got - want) / max(abs(want), 1e-30) if got is not None else None
            res["ok"] = res["ok"] and got is not None and want > 0 and res["penalty_rel_err"] <= 1e-4
        ok &= res["ok"]
        rows.append(res)
    rows += rl_vllm_step(model, work, a)
    ok &= all(r.get("ok", True) for r in rows)
    if ok and rows:  # the launches' folders are scratch once every row passed; a failure keeps them to inspect
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"launch folders kept for inspection: {work}", flush=True)
    return rows, bool(ok and rows)


def rl_vllm_step(model: Path, work: Path, a) -> list[dict]:
    """One GRPO step of `anchorft rl` with vLLM generating, when vLLM and a GPU are there (else a printed skip)."""
    if a.device == "cpu" or importlib.util.find_spec("vllm") is None:
        print("rl (GRPO, vLLM): skipped, " + ("no GPU" if a.device == "cpu" else "vLLM is not installed"), flush=True)
        return []
    data = work / "rl.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
                                        "answer": str(2 * i)}) + "\n" for i in range(4)))  # fmt: skip
    cmd = [sys.executable, "-m", "anchorft.cli", "rl", "--config", str(ROOT / "configs/rl/dapo.yaml"), "--model",
           str(model), "--dataset", str(data), "--out", str(work / "rl"), "--steps", "1", "--prompts_per_step", "2",
           "--mini_batch_prompts", "2", "--num_generations", "2", "--micro_batch", "2", "--max_completion_length",
           "32", "--overlong_cache", "0", "--rl_warmup_steps", "0", "--use_vllm", "true",
           "--save_model", "false"]  # fmt: skip
    print("$ anchorft " + " ".join(cmd[cmd.index("rl") :]), flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
    return [{"config": "single", "stage": "single", "method": "grpo (vLLM)", "rc": proc.returncode,
             "seconds": time.perf_counter() - t0, "ok": proc.returncode == 0}]  # fmt: skip


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def launch_table(rows: list[dict]) -> str:
    lines = ["| config | method | exit | steps | loss last | step s | peak GB | estimate GB | peak / estimate | "
             "wall s | ok |", "|---" * 11 + "|"]  # fmt: skip
    for r in rows:
        peak, est = r.get("peak_bytes"), r.get("estimate_bytes")
        cells = [r["config"], r["method"], r["rc"], r.get("global_step", "-"), _fmt(r.get("loss_last"), ".3f"),
                 _fmt(r.get("step_s"), ".3f"), _fmt(peak and peak / 1e9, ".2f"), _fmt(est and est / 1e9, ".2f"),
                 _fmt(peak / est if peak and est else None, ".2f"), f"{r['seconds']:.1f}",
                 "yes" if r.get("ok") else "NO"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
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
    p.add_argument("--only", choices=("all", "launch", "anchor"), default="all", help="part 1, part 2 or both")
    p.add_argument("--matrix", choices=("diagonal", "full"), default="diagonal", help="launches: 3 or all 9")
    p.add_argument("--launch_steps", type=int, default=4, help="optimiser steps of each launched run")
    p.add_argument("--launch_methods", nargs="+", default=None, help="launch only these methods (default: the plan's)")
    p.add_argument("--launch_rank", type=int, default=768, help="anchor rank of the launched runs")
    p.add_argument("--launch_seq", type=int, default=1024, help="max_length of the launched runs")
    p.add_argument("--launch_lr", type=float, default=1e-4, help="learning rate of the launched runs (the recipes' "
                   "1e-6 barely moves bf16 weights: the anchor would not act)")  # fmt: skip
    p.add_argument("--nproc", type=int, default=None, help="processes per launch (default: every visible GPU, NCCL; "
                   "on the CPU 1; --nproc 2 --device cpu: gloo)")  # fmt: skip
    p.add_argument("--memory_tolerance", type=float, default=0.2, help="measured peak against the estimate (CUDA)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    if a.tiny:
        a.rank, a.seq, a.launch_rank, a.launch_seq = 4, 32, 4, 256
    if a.nproc is None:
        a.nproc = torch.cuda.device_count() if a.device != "cpu" and torch.cuda.is_available() else 1
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    ok, report = True, {"args": vars(a)}
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if a.only in ("all", "launch"):
        launch_rows_, launch_ok = check_launch(a)
        print(f"anchorft train through the launcher on a {RECIPE_MODEL} stand-in ({a.layers} layers), device {dev}, "
              f"{a.nproc} process(es), {a.launch_steps} steps of 2 x {a.launch_seq} tokens per process at most, "
              f"k = {a.launch_rank}, lr {a.launch_lr}")  # fmt: skip
        print(launch_table(launch_rows_))
        report["launch"] = launch_rows_
        report["summary"] = {"processes": a.nproc, "launches": len(launch_rows_),
                             "failed": [f"{r['config']} {r['method']}" for r in launch_rows_ if not r.get("ok")],
                             "memory_checked": sum("memory_ok" in r for r in launch_rows_),
                             "penalty_rel_err": next((r["penalty_rel_err"] for r in launch_rows_
                                                      if r.get("penalty_rel_err") is not None), None)}  # fmt: skip
        ok &= launch_ok
    if a.only in ("all", "anchor"):
        rows = []
        for path in a.models:
            name = Path(path).stem
            rows.append(check_model(name, stand_in(Path(path), a.layers, a.tiny), a, device, dtype))
            print(f"{name}: done ({rows[-1]['anchor_build_s']:.1f} s anchor, ok={rows[-1]['ok']})", file=sys.stderr)
        print(f"device {dev}, {a.dtype}, k = {a.rank}, {a.steps} steps of {a.batch} x {a.seq} tokens, lr {a.lr}")
        print(table(rows))
        report["rows"] = rows
        ok &= all(r["ok"] for r in rows)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        Path(a.out).write_text(json.dumps({**report, "device": dev}, indent=1, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
