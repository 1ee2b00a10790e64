"""Memory and FLOPs of the RPSFT anchor from a model's config.json alone (no weights loaded).

Per anchored m x n matrix at rank k (Jin et al., arXiv:2605.10973, eq. 3 and its gradient):
- SVD branch (k < min(m, n)): stores U_0, V_0, S_ref: (m + n) k + k^2 numbers; the penalty and its
  closed-form gradient cost P = U^T W V (2kmn + 2k^2 n), then 2 U (P - S) V^T (2mk^2 + 2kmn):
  4kmn + 2k^2 (m + n) FLOPs per application.
- fallback (k >= min(m, n)): stores W_0 (m n numbers); ||W - W_0||^2 and 2 (W - W_0) cost ~4mn.
A training step costs 6 N T FLOPs for the N matmul parameters (lm_head included, input embedding
lookups excluded) and T tokens, plus causal attention 6 L T s d_attn (scores and values, forward and
backward, s the sequence length).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from anchorft.rpsft.anchor_options import AnchorOptions

__all__ = ["model_matrices", "estimate", "format_estimate", "memory_per_gpu", "format_memory", "read_model_config"]
__all__ += ["parameter_count", "activation_numbers", "method_memory", "format_method_memory", "STAGES"]
__all__ += ["estimated_methods", "state_bytes", "rl_memory_estimate", "format_memory_estimate", "rl_memory_lines"]


def model_matrices(cfg: dict, include_embeddings: bool = True) -> list[tuple[str, int, int, int]]:
    """(kind, m, n, count) of the 2-D weights of a Llama / Qwen2-style decoder config."""
    keys = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    try:
        h, layers, inter, vocab, heads = (cfg[k] for k in keys)
    except KeyError as e:
        raise ValueError(f"model config lacks {e.args[0]!r} (expected a Llama / Qwen2-style config.json)") from None
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    mats = [
        ("q_proj", heads * hd, h, layers),
        ("k_proj", kv * hd, h, layers),
        ("v_proj", kv * hd, h, layers),
        ("o_proj", h, heads * hd, layers),
        ("gate_proj", inter, h, layers),
        ("up_proj", inter, h, layers),
        ("down_proj", h, inter, layers),
    ]
    if include_embeddings:
        mats.append(("embed_tokens", vocab, h, 1))
        if not cfg.get("tie_word_embeddings", False):
            mats.append(("lm_head", vocab, h, 1))
    return mats


def estimate(
    cfg: dict,
    rank: int = AnchorOptions.anchor_rank,
    tokens_per_step: int = 65536,
    seq_len: int = 4096,
    bytes_per_number: int = 4,
    include_embeddings: bool = True,
    anchor_every: int = 1,
) -> dict:
    """Bases memory and penalty FLOPs per step against a training step's FLOPs."""
    if rank < 1:
        raise ValueError(f"anchor_rank must be >= 1, got {rank}")
    if tokens_per_step < 1 or seq_len < 1 or anchor_every < 1:
        raise ValueError("tokens_per_step, seq_len and anchor_every must be >= 1")
    rows, numbers, pen_flops = [], 0, 0.0
    for kind, m, n, count in model_matrices(cfg, include_embeddings):
        fallback = rank >= min(m, n)
        num = m * n if fallback else (m + n) * rank + rank**2
        fl = 4.0 * m * n if fallback else 4.0 * rank * m * n + 2.0 * rank**2 * (m + n)
        rows.append({"matrix": kind, "shape": [m, n], "count": count, "fallback": fallback, "numbers": num * count})
        numbers += num * count
        pen_flops += fl * count
    h, layers, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    matmul_params = sum(m * n * c for k, m, n, c in model_matrices(cfg, True) if k != "embed_tokens")
    if cfg.get("tie_word_embeddings", False):
        matmul_params += cfg["vocab_size"] * h  # the tied lm_head still multiplies
    step_flops = 6.0 * matmul_params * tokens_per_step + 6.0 * layers * tokens_per_step * seq_len * heads * hd
    per_step = pen_flops / anchor_every
    return {
        "rank": rank,
        "matrices": rows,
        "numbers": numbers,
        "bytes": numbers * bytes_per_number,
        "bytes_per_number": bytes_per_number,
        "penalty_flops": pen_flops,
        "penalty_flops_per_step": per_step,
        "train_step_flops": step_flops,
        "ratio": per_step / step_flops,
        "tokens_per_step": tokens_per_step,
        "seq_len": seq_len,
        "anchor_every": anchor_every,
        "matmul_params": matmul_params,
    }


def format_estimate(res: dict, name: str = "") -> str:
    lines = [f"RPSFT anchor estimate{' for ' + name if name else ''}: rank k = {res['rank']}"]
    lines.append(f"  {'matrix':<13}{'shape':>16}{'count':>7}  {'branch':<9}{'numbers':>16}")
    for r in res["matrices"]:
        shape = f"{r['shape'][0]}x{r['shape'][1]}"
        branch = "L2 (W0)" if r["fallback"] else "SVD"
        lines.append(f"  {r['matrix']:<13}{shape:>16}{r['count']:>7}  {branch:<9}{r['numbers']:>16,}")
    gb = res["bytes"] / 1e9
    lines += [
        f"  bases memory: {res['numbers']:,} numbers = {gb:.2f} GB at {res['bytes_per_number']} bytes/number",
        f"  penalty + gradient: {res['penalty_flops']:.3e} FLOPs per application, "
        f"{res['penalty_flops_per_step']:.3e} per step (anchor_every={res['anchor_every']})",
        f"  training step: {res['train_step_flops']:.3e} FLOPs (6 N T, N = {res['matmul_params']:,} matmul params, "
        f"T = {res['tokens_per_step']:,} tokens/step, + attention at seq_len {res['seq_len']})",
        f"  penalty / step = {100 * res['ratio']:.3f} %",
    ]
    return "\n".join(lines)


def state_bytes(params: int, stage: str, gpus: int = 1, weight_bytes: int = 4) -> tuple[float, float, float]:
    """Bytes per GPU of the weights, gradients and AdamW state of `params` parameters P on G = `gpus` GPUs:
    single or ddp: P w, P w, 2 P w (w = `weight_bytes`; AdamW's two moments in the parameters' dtype); zero2: 2P,
    2P / G, 12P / G (bf16 weights, bf16 gradients partitioned, fp32 master weights and moments partitioned); zero3:
    2P / G, 2P / G, 12P / G; fsdp2: P w / G, P w / G, 2 P w / G (ZeRO-3 / FSDP2 full sharding of the single-GPU
    states)."""
    P, w, g = params, weight_bytes, gpus
    return {
        "single": (P * w, P * w, 2 * P * w),
        "ddp": (P * w, P * w, 2 * P * w),
        "zero2": (2 * P, 2 * P / g, 12 * P / g),
        "zero3": (2 * P / g, 2 * P / g, 12 * P / g),
        "fsdp2": (P * w / g, P * w / g, 2 * P * w / g),
    }[stage]


def rl_memory_estimate(n_params: int, n_gpus: int = 1, master_dtype: str = "fp32", vllm_colocate: bool = True) -> dict:
    """Bytes per GPU for the model states of full-parameter RL (an estimate; activations, the KV cache and
    fragmentation come on top): `state_bytes` of one GPU at 4 B (fp32) or 2 B (bf16) a weight, divided over `n_gpus`
    (ZeRO-3 / FSDP2 full sharding); vLLM colocated holds one more bf16 copy per GPU (2 B; tensor parallel would
    divide it)."""
    w = {"fp32": 4, "bf16": 2}[master_dtype]
    per = sum(state_bytes(1, "single", 1, w))
    states = sum(state_bytes(n_params, "single", 1, w)) / n_gpus
    rollout = 2 * n_params if vllm_colocate else 0
    total = states + rollout
    return {
        "n_params": n_params, "n_gpus": n_gpus, "bytes_per_param": per, "model_states_gb": states / 1e9,
        "vllm_weights_gb": rollout / 1e9, "total_gb_per_gpu": total / 1e9,
        "fits_80gb": total / 1e9 < 80, "sharding": "none" if n_gpus == 1 else "ZeRO-3 or FSDP2 (full shard)",
    }  # fmt: skip


def _size(gb: float) -> str:
    """A size given in GB, in the unit that shows it: 24 GB, 3.2 GB, 41 MB, 512 kB (never "0 GB" for a small model)."""
    if gb == 0:
        return "0 GB"
    for unit, scale in (("GB", 1.0), ("MB", 1e3), ("kB", 1e6)):
        v = gb * scale
        if v >= 1 or unit == "kB":
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    raise AssertionError("unreachable")


def _count(n: float) -> str:
    """A parameter count: 7.62B, 494M, 1.08M, 652k."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def format_memory_estimate(est: dict) -> str:
    """One line of `rl_memory_estimate`, with the sharding to use when one 80 GB GPU is not enough."""
    size = _size
    line = (
        f"memory estimate (model states only, an estimate): {_count(est['n_params'])} parameters x "
        f"{est['bytes_per_param']} B / {est['n_gpus']} GPU(s) = {size(est['model_states_gb'])}"
        f" + {size(est['vllm_weights_gb'])} colocated vLLM weights = {size(est['total_gb_per_gpu'])} per GPU"
    )
    if not est["fits_80gb"]:
        line += "; over one 80 GB GPU: shard with ZeRO-3 (accelerate + deepspeed) or FSDP2 (accelerate fsdp_version 2)"
    return line


def memory_per_gpu(
    cfg: dict,
    stage: str = "zero2",
    gpus: int = 8,
    per_device: int = 2,
    seq_len: int = 4096,
    anchor_bytes: float = 0.0,
    reference: bool = False,
) -> dict:
    """Bytes per GPU by kind, from the config alone (formulas, not a measurement), P the parameter count:

    - weights, gradients, optimiser: `state_bytes` (zero2: bf16 weights, partitioned gradients and fp32 AdamW
      state; ddp: fp32 weights loaded, bf16 autocast, everything on every GPU);
    - anchor: `anchor_bytes` (the bases, every GPU); reference (IW-SFT's frozen copy, bf16): 2P;
    - activations under gradient checkpointing, b = per_device sequences of s tokens, L layers, h hidden,
      f intermediate, V vocabulary, bf16: b s h L (each layer's checkpointed input) + b s (10 h + 4 f) (one
      layer recomputed during backward: attention and MLP intermediates, rough) + 6 b s V (bf16 logits and
      their fp32 log-softmax for the loss).
    """
    if stage not in ("zero2", "ddp"):
        raise ValueError(f"stage must be 'zero2' or 'ddp', got {stage!r}")
    if gpus < 1 or per_device < 1 or seq_len < 1:
        raise ValueError("gpus, per_device and seq_len must be >= 1")
    params = sum(m * n * c for _, m, n, c in model_matrices(cfg, True))
    h, layers, f, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    b, t = per_device, seq_len
    weights, grads, optim = (float(x) for x in state_bytes(params, stage, gpus, weight_bytes=4))
    act = 2.0 * (b * t * h * layers + b * t * (10 * h + 4 * f)) + 6.0 * b * t * vocab
    out = {
        "parameters": params,
        "weights": weights,
        "gradients": grads,
        "optimiser": optim,
        "activations": act,
        "anchor": float(anchor_bytes),
        "reference": 2.0 * params if reference else 0.0,
    }
    out["total"] = sum(v for k, v in out.items() if k != "parameters")
    return out


def format_memory(mem: dict, stage: str, gpus: int, per_device: int, seq_len: int) -> str:
    gb = {k: v / 1e9 for k, v in mem.items() if k != "parameters"}
    parts = ", ".join(f"{k} {gb[k]:.1f}" for k in ("weights", "gradients", "optimiser", "activations", "anchor"))
    head = f"  memory per GPU ({stage}, {gpus} GPUs, {per_device} x {seq_len} tokens, formulas), GB: "
    return head + f"{parts}, IW-SFT reference {gb['reference']:.1f}; total {gb['total']:.1f}"


def read_model_config(path: str | os.PathLike, text_only: bool = True) -> dict:
    """A model's config.json (a file, or a folder holding one) as a dict; ValueError naming the path when absent.

    The one reader of model config files (the estimate and the recipes' stand-ins). With `text_only`, a
    multimodal config's `text_config` (the language model's part)."""
    p = os.path.join(path, "config.json") if os.path.isdir(path) else os.fspath(path)
    if not os.path.isfile(p):
        raise ValueError(f"model config: no config.json at {path} (not found)")
    try:
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
    except json.JSONDecodeError as e:
        why = "empty" if not e.doc.strip() else f"not JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise ValueError(f"model config: {p} is {why}") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"model config: {p} is not UTF-8 text") from e
    if not isinstance(cfg, dict):
        raise ValueError(f"model config: {p} holds a JSON {type(cfg).__name__}, not an object")
    return cfg.get("text_config", cfg) if text_only else cfg


def estimated_methods() -> tuple[str, ...]:
    """The methods `method_memory` estimates: every row of the methods table but the PEFT adapters."""
    from anchorft.rpsft.methods import METHODS  # lazy: loads torch

    return tuple(m.name for m in METHODS.values() if m.peft is None)


STAGES = ("single", "ddp", "zero2", "zero3", "fsdp2")


def parameter_count(cfg: dict) -> int:
    """Every parameter of a Llama / Qwen2-style decoder: the 2-D matrices, the RMSNorm weights (2 per layer and a
    final one) and, for Qwen2, the q / k / v biases."""
    mats = sum(m * n * c for _, m, n, c in model_matrices(cfg, True))
    h, layers, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    kv, hd = cfg.get("num_key_value_heads") or heads, cfg.get("head_dim") or h // heads
    bias = (heads + 2 * kv) * hd if cfg.get("model_type") == "qwen2" or cfg.get("attention_bias") else 0
    return mats + layers * (2 * h + bias) + h


def activation_numbers(cfg: dict) -> dict[str, int]:
    """Numbers saved for backward per token (a Llama / Qwen2 decoder in transformers, SDPA attention), counted op
    by op. `layer` = 4h (each RMSNorm's input and output) + 4 d_q (q before the rotary embedding, rotate_half(q),
    the rotated q kept by attention, the attention output fed to o_proj) + 3 d_kv (the key / value buffers the
    rotary embedding and attention keep: 3 is the count measured on transformers 5.24, CPU, not derived) + 4f
    (the MLP: gate, SiLU(gate), up, their product); `head` = 2h (final norm); `logits` = V (the loss's
    log-softmax). With gradient checkpointing a layer keeps only its input h (`layer_input`), and one layer is
    recomputed at a time during backward. Checked against the tensors autograd saves
    (tests/rpsft/test_estimate_memory.py)."""
    h, heads, f = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    kv, hd = cfg.get("num_key_value_heads") or heads, cfg.get("head_dim") or h // heads
    return {"layer": 4 * h + 4 * heads * hd + 3 * kv * hd + 4 * f, "layer_input": h, "head": 2 * h,
            "logits": cfg["vocab_size"]}  # fmt: skip


def method_memory(
    cfg: dict,
    method: str,
    rank: int = AnchorOptions.anchor_rank,
    stage: str = "single",
    gpus: int = 1,
    per_device: int = 2,
    seq_len: int = 4096,
    weight_bytes: int = 4,
    anchor_bytes: int = 4,
    reference_bytes: int | None = None,
    activation_bytes: int | None = None,
    include_embeddings: bool = True,
    checkpointing: bool = True,
) -> dict:
    """Bytes per GPU by component for one method (formulas from the config alone, P = `parameter_count`):

    - parameters / gradients / optimizer_state: `state_bytes` at w = `weight_bytes`;
    - anchor_buffers (an `anchored` row of the methods table, rpsft): per anchored matrix below full rank U_0, V_0,
      S_ref: (m + n) k + k^2 numbers;
    - l2_w0: W_0 of every matrix at full rank (all of them for a `full_rank` row, l2; for rpsft those with
      k >= min(m, n)): m n, held like the weights: divided by G under zero3 and fsdp2 (each rank keeps the part
      of W_0 whose weights it holds, `anchorft.rpsft.sharding.held_part`), whole on every GPU otherwise;
      both at `anchor_bytes` a number (the bases U_0, V_0, S_ref whole on every GPU);
    - anchor_transient: the one matrix the anchor forms at a time (`anchorft.subspace.l2_penalty` keeps no
      D = W - W_0 for the backward, in autograd and closed form alike): the largest anchored m n in fp32 (fp64 for
      8-byte anchors); under zero3 plus that weight gathered whole (2 bytes a number, bf16); under fsdp2 its rows
      on one GPU (the closed form works on the local rows), m n / G;
    - iw_reference (a `needs_reference` row, iw_sft): the frozen copy, P x `reference_bytes` (default: `weight_bytes`),
      divided by G under zero3 and fsdp2 (partitioned like the policy, `anchorft.rpsft.trainer.prepare_reference`),
      whole on every GPU otherwise;
    - activations_per_token: saved for backward without checkpointing, (L layer + head) a + 4 logits (the loss's
      log-softmax in fp32), a = `activation_bytes` (default `weight_bytes`; 2 under bf16);
      activations_per_token_checkpointed: what stays held with checkpointing, (L + 3) h a + 4 logits;
      recompute_per_token: one layer's activations, rebuilt during backward;
    - activations: per_device x seq_len tokens, checkpointed (held + one layer) or not.
    """
    if method not in estimated_methods():
        raise ValueError(f"method must be one of {list(estimated_methods())}, got {method!r}")
    from anchorft.rpsft.methods import get_method  # lazy: loads torch

    spec = get_method(method)
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    if gpus < 1 or per_device < 1 or seq_len < 1 or rank < 1:
        raise ValueError("gpus, per_device, seq_len and rank must be >= 1")
    P, w = parameter_count(cfg), weight_bytes
    params, grads, optim = state_bytes(P, stage, gpus, w)
    svd_numbers = w0_numbers = largest = 0
    if spec.anchored:
        for _, m, n, count in model_matrices(cfg, include_embeddings):
            largest = max(largest, m * n)
            if spec.full_rank or rank >= min(m, n):
                w0_numbers += m * n * count
            else:
                svd_numbers += ((m + n) * rank + rank**2) * count
    sharded = stage in ("zero3", "fsdp2")
    transient = largest * (8 if anchor_bytes > 4 else 4)
    transient = transient / gpus if stage == "fsdp2" else transient + (2 * largest if stage == "zero3" else 0)
    a = activation_bytes or w
    act = activation_numbers(cfg)
    layers = cfg["num_hidden_layers"]
    per_tok = (layers * act["layer"] + act["head"]) * a + 4 * act["logits"]
    held = (layers * act["layer_input"] + act["head"] + act["layer_input"]) * a + 4 * act["logits"]
    recompute = act["layer"] * a
    tokens = per_device * seq_len
    out = {
        "parameter_count": P,
        "parameters": float(params),
        "gradients": float(grads),
        "optimizer_state": float(optim),
        "anchor_buffers": float(svd_numbers * anchor_bytes),
        "l2_w0": float(w0_numbers * anchor_bytes / (gpus if sharded else 1)),
        "anchor_transient": float(transient),
        "iw_reference": float(P * (reference_bytes or w) / (gpus if sharded else 1)) if spec.needs_reference else 0.0,
        "activations_per_token": float(per_tok),
        "activations_per_token_checkpointed": float(held),
        "recompute_per_token": float(recompute),
        "activations": float(tokens * (held + recompute if checkpointing else per_tok)),
    }
    keys = ("parameters", "gradients", "optimizer_state", "anchor_buffers", "l2_w0", "anchor_transient")
    keys += ("iw_reference", "activations")
    out["total"] = sum(out[k] for k in keys)
    return out


def format_method_memory(rows: dict[str, dict], title: str) -> str:
    """One table: a row per component, a column per method (GB, 1e9 bytes; per token: KB); its `total` row is the
    per-GPU total (the one `anchorft train --estimate` prints)."""
    names = list(rows)
    lines = [title, f"  {'component':<36}" + "".join(f"{n:>10}" for n in names)]
    comps = [("parameters", 1e9, "GB"), ("gradients", 1e9, "GB"), ("optimizer_state", 1e9, "GB"),
             ("anchor_buffers", 1e9, "GB"), ("l2_w0", 1e9, "GB"), ("anchor_transient", 1e9, "GB"),
             ("iw_reference", 1e9, "GB"),
             ("activations_per_token", 1e3, "KB"), ("activations_per_token_checkpointed", 1e3, "KB"),
             ("recompute_per_token", 1e3, "KB"), ("activations", 1e9, "GB"), ("total", 1e9, "GB")]  # fmt: skip
    for key, div, unit in comps:
        label = f"{key} ({unit})"
        lines.append(f"  {label:<36}" + "".join(f"{rows[n][key] / div:>10.2f}" for n in names))
    return "\n".join(lines)


def rl_memory_lines(model_dir: str, config) -> list[str]:
    """`anchorft rl --estimate`: the memory of DAPO (`config`) on 1 and 8 GPUs for the model in `model_dir`, its
    parameters counted on the meta device from config.json (no weights loaded)."""
    import torch  # lazy: the rest of this module is read before torch loads (`anchorft train --estimate`)
    from transformers import AutoConfig, AutoModelForCausalLM  # lazy: loads transformers

    if not (Path(model_dir) / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there")
    cfg = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    colocate = config.vllm_requested != "false"  # the GPU node's choice, not this machine's
    return [format_memory_estimate(rl_memory_estimate(n, g, config.master_dtype, colocate)) for g in (1, 8)]
