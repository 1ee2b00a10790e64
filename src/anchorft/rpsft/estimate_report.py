"""What `anchorft train --estimate` prints, below its flags: the anchor's memory and FLOPs and the bytes per GPU of
every method from a model's config.json (`anchorft.rpsft.estimate`'s formulas), or, for rank rules, maps, layers,
budgets and targets other than all-linear, the per-matrix ranks resolved on a model folder's weights. A recipe
(`config`) supplies its model config, method, rank, batch, length and dtypes; a value given as a flag wins."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field, fields
from typing import Any

from anchorft.errors import UsageError
from anchorft.eval.loading import load_causal_lm
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.estimate import (
    STAGES,
    estimate,
    estimated_methods,
    format_estimate,
    format_method_memory,
    memory_per_gpu,
    method_memory,
    read_model_config,
)
from anchorft.rpsft.recipes import load_recipe
from anchorft.rpsft.stand_in import find_model_config

__all__ = ["EstimateInputs", "ANCHOR_FLAGS", "estimate_flags", "estimate_report"]

# the anchor options `--estimate` takes as flags (each: the flag, else the recipe's, else AnchorOptions')
ANCHOR_FLAGS = ("anchor_rank", "anchor_rank_rule", "anchor_memory", "anchor_map", "anchor_layers",
                "anchor_lambda_rest", "anchor_targets")  # fmt: skip
_DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


def _defaults(fn) -> dict[str, Any]:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


_MD = _defaults(memory_per_gpu)


@dataclass
class EstimateInputs:
    """The flags of `anchorft train --estimate` (None: the recipe's value, else the default of `estimate` /
    `memory_per_gpu` / AnchorOptions); `anchor`: the anchor options given as flags (`ANCHOR_FLAGS`)."""

    config: str | None = field(
        default=None, metadata={"help": "a recipe: its model config, method, rank, batch, length, dtypes"}
    )
    model_config: list[str] | None = field(default=None, metadata={"help": "config.json path(s) (or model folders)"})
    tokens_per_step: int | None = field(default=None, metadata={"help": "tokens in one optimiser step (assumption)"})
    seq_len: int | None = field(
        default=None, metadata={"help": f"tokens per sequence (None: the recipe's max_length, else {_MD['seq_len']})"}
    )
    anchor_every: int | None = field(default=None, metadata={"help": "optimiser steps between two anchor terms"})
    bytes_per_number: int | None = field(default=None, metadata={"help": "4 = fp32 bases (None: 4), 2 = bf16"})
    no_embeddings: bool = field(default=False, metadata={"help": "exclude embeddings and lm_head"})
    stage: str | None = field(default=None, metadata={"help": "memory per GPU: how the state is split",
                                                      "choices": STAGES})  # fmt: skip
    gpus: int | None = field(default=None, metadata={"help": "memory per GPU: GPUs sharing the partitions"})
    per_device: int | None = field(
        default=None, metadata={"help": f"sequences per device (None: the recipe's, else {_MD['per_device']})"}
    )
    anchor: dict[str, Any] = field(default_factory=dict)


def estimate_flags() -> tuple[tuple[str, ...], dict[str, Any]]:
    """The fields of `EstimateInputs` that are flags, and the defaults the flags show: the functions' own where the
    flag's value is theirs (`estimate`'s tokens per step and anchor interval, `memory_per_gpu`'s stage and GPUs)."""
    ed = _defaults(estimate)
    names = tuple(f.name for f in fields(EstimateInputs) if f.name != "anchor")
    shown = {"tokens_per_step": ed["tokens_per_step"], "anchor_every": ed["anchor_every"], "stage": _MD["stage"],
             "gpus": _MD["gpus"]}  # fmt: skip
    return names, shown


def estimate_report(inp: EstimateInputs) -> str:
    """The text `--estimate` prints for `inp`; a one-line ValueError for a bad recipe, config.json, rule, map or
    model folder."""
    ed, md = _defaults(estimate), _defaults(memory_per_gpu)  # the functions' own defaults, written once
    recipe, method, model_config = {}, None, inp.model_config
    if inp.config:
        recipe, meta = load_recipe(inp.config)
        method = recipe.get("method", "rpsft")
        model = recipe.get("model_name_or_path")
        local = model if model and os.path.isfile(os.path.join(model, "config.json")) else None  # its weights too
        mc = meta.get("_model_config_") or local or find_model_config(model)
        if mc is None:
            raise UsageError(f"--config {inp.config}: no _model_config_ and no configs/models/ file for its model")
        model_config = model_config or [mc]
    if not model_config:
        raise UsageError("--estimate needs --model_config PATH or --config RECIPE")
    opt = {n: inp.anchor[n] if inp.anchor.get(n) is not None else recipe.get(n, getattr(AnchorOptions, n))
           for n in ANCHOR_FLAGS}  # fmt: skip
    opt["anchor_rank"] = int(opt["anchor_rank"])
    embeddings = not (inp.no_embeddings or not recipe.get("anchor_include_embeddings", True))
    seq_len = inp.seq_len or int(recipe.get("max_length") or md["seq_len"])
    per_device = inp.per_device or int(recipe.get("per_device_train_batch_size", md["per_device"]))
    bpn = inp.bytes_per_number or _DTYPE_BYTES.get(recipe.get("anchor_dtype", "float32"), 4)
    stage, gpus = inp.stage or md["stage"], inp.gpus or md["gpus"]
    for flag in ("tokens_per_step", "seq_len", "anchor_every", "bytes_per_number", "gpus", "per_device"):
        if getattr(inp, flag) is not None and getattr(inp, flag) < 1:
            raise UsageError(f"--{flag}: must be >= 1, got {getattr(inp, flag)}")
    batch = recipe.get("effective_batch_size")
    if isinstance(batch, int) and batch % (gpus * per_device):
        raise UsageError(
            f"--gpus {gpus}: the recipe's batch of {batch} sequences ({inp.config}: effective_batch_size) cannot be "
            f"split over {gpus} GPUs x {per_device} per device; use a GPU count that divides {batch // per_device}"
        )
    if any(opt[n] for n in ("anchor_rank_rule", "anchor_memory", "anchor_map", "anchor_layers")) or (
        opt["anchor_targets"] != "all-linear"
    ):
        return _resolved_ranks(model_config, opt, embeddings, bpn)
    bf16 = bool(recipe.get("bf16", stage in ("zero2", "zero3")))
    checkpointing = bool(recipe.get("gradient_checkpointing", True))
    weight_bytes = _DTYPE_BYTES.get((recipe.get("model_init_kwargs") or {}).get("dtype", "float32"), 4)
    lines = []
    for path in model_config:
        cfg = read_model_config(path)
        res = estimate(
            cfg, rank=opt["anchor_rank"], tokens_per_step=inp.tokens_per_step or ed["tokens_per_step"],
            seq_len=seq_len, bytes_per_number=bpn, include_embeddings=embeddings,
            anchor_every=inp.anchor_every or ed["anchor_every"],
        )  # fmt: skip
        lines.append(format_estimate(res, name=path))
        rows = {
            m: method_memory(cfg, m, rank=opt["anchor_rank"], stage=stage, gpus=gpus, per_device=per_device,
                             seq_len=seq_len, weight_bytes=weight_bytes, anchor_bytes=bpn,
                             reference_bytes=2 if bf16 else weight_bytes, activation_bytes=2 if bf16 else None,
                             include_embeddings=embeddings, checkpointing=checkpointing)
            for m in estimated_methods()
        }  # fmt: skip
        mark = f", recipe {inp.config}: method {method}" if method else ""
        title = (f"  bytes per GPU by method ({stage}, {gpus} GPUs, {per_device} x {seq_len} tokens, "
                 f"k = {opt['anchor_rank']}, formulas{mark}):")  # fmt: skip
        lines += [format_method_memory(rows, title), ""]
    return "\n".join(lines) + "\n"


def _resolved_ranks(model_config: list[str], opt: dict, embeddings: bool, bpn: int) -> str:
    """Per-matrix ranks of the rules / map / budget / layers, resolved on the weights of each model folder."""
    import torch  # lazy: the formulas above need no torch

    from anchorft.rpsft.anchor import SubspaceAnchor  # lazy: loads torch
    from anchorft.rpsft.anchor_plan import anchor_numbers, describe, parse_rank_rule  # lazy: loads torch
    from anchorft.rpsft.model_loading import WEIGHT_FILES  # lazy: loads torch

    if opt["anchor_rank_rule"] and parse_rank_rule(opt["anchor_rank_rule"]).kind == "fisher":
        raise UsageError(
            "fisher rules need F_ood G from calibration data (anchorft.rpsft.calibration.fisher_gradient_product); "
            "--estimate resolves energy rules, maps, layers and budgets"
        )
    out = []
    for path in model_config:
        names = set(os.listdir(path)) if os.path.isdir(path) else set()
        if not names & set(WEIGHT_FILES) and not any(n.endswith(".safetensors") for n in names):
            raise UsageError(
                f"{path}: rank rules, maps, layers, budgets and anchor_targets are resolved on the weights: pass a "
                "model folder that holds them (a config.json alone gives only the uniform-rank estimate of all-linear)"
            )
        model = load_causal_lm(path)
        dtype = {4: torch.float32, 2: torch.bfloat16, 8: torch.float64}.get(bpn, torch.float32)
        planned = SubspaceAnchor.plan(
            model, opt["anchor_rank_rule"] or opt["anchor_rank"], targets=opt["anchor_targets"],
            include_embeddings=embeddings, dtype=dtype, rank_map=opt["anchor_map"], layers=opt["anchor_layers"],
            memory=opt["anchor_memory"], lambda_rest=opt["anchor_lambda_rest"],
        )  # fmt: skip
        ranks, shapes = planned.ranks, planned.shapes
        numbers = sum(anchor_numbers(*shapes[n], k, opt["anchor_lambda_rest"] > 0) for n, k in ranks.items())
        out.append(
            f"anchor ranks for {path} (rank {opt['anchor_rank_rule'] or opt['anchor_rank']}, targets "
            f"{opt['anchor_targets']}, map {opt['anchor_map']}, layers {opt['anchor_layers']}, memory "
            f"{opt['anchor_memory']}):"
        )
        out.append(describe(ranks, shapes))
        out.append(f"  stored: {numbers:,} numbers = {numbers * bpn:,} bytes at {bpn} bytes/number")
    return "\n".join(out) + "\n"
