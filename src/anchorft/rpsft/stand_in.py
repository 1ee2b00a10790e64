"""Stand-in models of the RPSFT paper's recipes, and the dry run of a recipe on one (`anchorft train --dry-run`,
whose command-line side is in `anchorft.commands.train`); docs/recipes.md, section 5, lists what a stand-in keeps
of the real config.json (2 layers, 2 key/value heads at the real GQA ratio, head_dim 8, ...) and what the dry run
changes of the recipe (model and data, output_dir, max_steps, logging_steps, the anchor rank, the CPU overrides).

The anchor rank scales with the width (k * hidden_standin / hidden_real, e.g. 768 -> 12 for Llama-3.1-8B) so that
every matrix takes the same branch as at full size: SVD block, or the ||W - W0||^2 fallback when k >= min(m, n).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from anchorft.data.openr1 import select_verified
from anchorft.errors import UsageError
from anchorft.eval.answers import math_equal
from anchorft.provenance import write_metrics
from anchorft.resources import configs_dir
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.estimate import read_model_config
from anchorft.rpsft.recipes import known_fields, load_recipe

__all__ = [
    "FAMILIES",
    "load_model_config",
    "find_model_config",
    "stand_in_config",
    "stand_in_rank",
    "build_stand_in",
    "build_stand_in_tokenizer",
    "example_rows",
    "dry_run",
]

_LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
_QWEN2_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    """What a stand-in keeps of a model family: its chat-format tokens (bos, eos, pad) and template."""

    model_type: str
    specials: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str
    chat_template: str


FAMILIES: dict[str, Family] = {
    "llama": Family(
        "llama",
        (
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
        ),
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        _LLAMA_TEMPLATE,
    ),
    "qwen2": Family(
        "qwen2", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), None, "<|im_end|>", "<|endoftext|>", _QWEN2_TEMPLATE
    ),
}


def load_model_config(path: str | os.PathLike) -> dict[str, Any]:
    """A model's config.json (a file, or a folder holding one), checked to be of a supported family."""
    p = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    cfg = read_model_config(path, text_only=False)
    family = cfg.get("model_type")
    if family not in FAMILIES:
        raise ValueError(
            f"model config {p}: model_type {family!r} is not a supported family; supported: {sorted(FAMILIES)}"
        )
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if not isinstance(cfg.get(key), int) or cfg[key] < 1:
            raise ValueError(f"model config {p}: {key} must be a positive integer, got {cfg.get(key)!r}")
    return cfg


def find_model_config(name: str | None) -> str | None:
    """config.json for `name`: a local model folder, or configs/models/<hub name's last part, lower case>.json of
    this repository (e.g. meta-llama/Llama-3.1-8B-Instruct -> configs/models/llama-3.1-8b-instruct.json)."""
    if not name:
        return None
    if (Path(name) / "config.json").is_file():
        return str(Path(name) / "config.json")
    candidate = configs_dir("models") / f"{Path(name).name.lower()}.json"
    return str(candidate) if candidate.is_file() else None


def stand_in_config(real: dict[str, Any], vocab_size: int, layers: int = 2, kv_heads: int = 2, head_dim: int = 8):
    """A tiny config of the real model's family (the scaling rules: docs/recipes.md, section 5).

    Returns (transformers config, width scale hidden_standin / hidden_real)."""
    from transformers import AutoConfig  # lazy: loads transformers

    heads, hidden = real["num_attention_heads"], real["hidden_size"]
    kv = real.get("num_key_value_heads") or heads
    if heads % kv:
        raise ValueError(f"model config: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    real_head_dim = real.get("head_dim") or hidden // heads
    s_kv = min(kv, kv_heads)
    s_heads = s_kv * (heads // kv)
    s_hidden = max(1, round(hidden * s_heads * head_dim / (heads * real_head_dim)))
    s_inter = max(8, 8 * round(s_hidden * real["intermediate_size"] / hidden / 8))
    cfg = {k: v for k, v in real.items() if k not in ("architectures", "layer_types", "_name_or_path")}
    cfg.update(
        hidden_size=s_hidden,
        num_hidden_layers=min(layers, real["num_hidden_layers"]),
        num_attention_heads=s_heads,
        num_key_value_heads=s_kv,
        head_dim=head_dim,
        intermediate_size=s_inter,
        vocab_size=vocab_size,
    )
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = min(cfg["max_window_layers"], cfg["num_hidden_layers"])
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg.pop(key, None)  # set from the stand-in tokenizer
    model_type = cfg.pop("model_type")
    return AutoConfig.for_model(model_type, **cfg), s_hidden / hidden


def stand_in_rank(rank: int, scale: float) -> int:
    """The anchor rank scaled with the width (at least 1)."""
    return max(1, round(rank * scale))


def build_stand_in(config, tokenizer, seed: int = 0):
    """A randomly initialised model from `config` (seeded locally: the global RNG state is restored)."""
    import torch  # lazy: loads torch
    from transformers import AutoModelForCausalLM  # lazy: loads transformers

    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if hasattr(model, "generation_config") and model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_stand_in_tokenizer(family: str, texts: Iterable[str], vocab_size: int = 384):
    """A byte-level BPE tokenizer trained on `texts`, with the family's special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast  # lazy: loads transformers

    if family not in FAMILIES:
        raise ValueError(f"family {family!r} is not supported; supported: {sorted(FAMILIES)}")
    spec = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(spec.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        chat_template=spec.chat_template,
    )


def example_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` synthetic rows in OpenR1-Math's schema (arithmetic with R1-style traces; a few have a wrong trace
    first, so the verification path is exercised)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(2, 99, size=2))
        good = (
            f"<think>\nWe need {a} times {b}. {a} * {b} = {a * b}.\n</think>\n\nSo the product is \\boxed{{{a * b}}}."
        )
        bad = good.replace(f"\\boxed{{{a * b}}}", f"\\boxed{{{a * b + 1}}}")
        gens = [bad, good] if i % 3 == 2 else [good]
        rows.append(
            {
                "problem": f"Compute {a} \\times {b}.",
                "solution": f"${a} \\times {b} = {a * b}$",
                "answer": str(a * b),
                "problem_type": "Algebra",
                "question_type": "math-word-problem",
                "source": "synthetic",
                "uuid": f"standin-{i}",
                "is_reasoning_complete": [True] * len(gens),
                "generations": gens,
                "correctness_math_verify": [g is good for g in gens],
                "correctness_llama": None,
                "finish_reasons": None,
                "correctness_count": 1,
                "messages": [
                    {"role": "user", "content": f"Compute {a} \\times {b}."},
                    {"role": "assistant", "content": gens[0]},
                ],
            }
        )
    return rows


# ----------------------------------------------------------------------------------------------------------------
# dry run


def _matrix_branches(model, rank: int) -> dict[str, bool]:
    """{generic parameter name: True if k >= min(m, n) (L2 fallback)} for the anchored matrices."""
    return {re.sub(r"\.\d+\.", ".*.", n): rank >= min(p.shape) for n, p in model.named_parameters() if p.dim() == 2}


def dry_run(
    config: str | os.PathLike,
    output_dir: str | os.PathLike,
    steps: int = 2,
    overrides: dict[str, Any] | None = None,
    dataset: str | None = None,
    seed: int = 0,
    model_config: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Run the recipe `config` for `steps` optimiser steps on a stand-in of its model; return a summary
    (also written to `output_dir/dry_run.json`, beside the trained stand-in and its tokenizer). Raises ValueError
    on a bad recipe, model config or dataset."""
    import datasets  # lazy: loads datasets (and pyarrow)
    import torch  # lazy: loads torch
    from transformers import AutoConfig, AutoModelForCausalLM, HfArgumentParser  # lazy: loads transformers

    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch
    from anchorft.rpsft.data import load_sft_dataset, validate_sft_dataset  # lazy: loads datasets (and pyarrow)

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    t0 = time.perf_counter()
    args, meta = load_recipe(config)
    if overrides:
        fields = known_fields()
        bad = [k for k in overrides if k not in fields]
        if bad:
            raise ValueError(f"unknown field(s) {bad} in the command-line overrides")
        args.update(overrides)
    # the real model's config.json
    mc = model_config or meta.get("_model_config_") or find_model_config(args.get("model_name_or_path"))
    if mc is None:
        raise ValueError(
            f"{config}: no _model_config_ (path to the real config.json), and model_name_or_path "
            f"{args.get('model_name_or_path')!r} is neither a local folder nor one of configs/models/; "
            "the dry run needs the model's config.json (pass --model_config PATH)"
        )
    real = load_model_config(mc)
    family = real["model_type"]
    # data: the configured dataset's columns are checked when it is on disk; training uses stand-in rows
    pd_bs = int(args.get("per_device_train_batch_size", 8))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accum = int(args.get("gradient_accumulation_steps", 1))
    if args.get("effective_batch_size") is not None:  # as RPSFTConfig derives it; an unreachable batch stops here
        from anchorft.rpsft.config import accumulation_for  # lazy: loads torch

        accum = accumulation_for(args["effective_batch_size"], pd_bs, world, accum)
    n_rows = steps * pd_bs * accum * world  # enough for `steps` under DDP too
    data_src = dataset or args.get("dataset")
    checked_dataset = None
    if data_src is not None and (dataset is not None or Path(str(data_src)).exists()):
        ds_real = load_sft_dataset(str(data_src), field="dataset")
        validate_sft_dataset(ds_real, None, field=f"dataset ({data_src})")
        checked_dataset = str(data_src)
    if dataset is not None:
        train_ds = ds_real.select(range(min(n_rows, len(ds_real))))
    else:
        rows, _ = select_verified(
            example_rows(n_rows + n_rows // 2 + 2, seed), size=n_rows, seed=seed, check=math_equal
        )
        train_ds = datasets.Dataset.from_list(rows)
    # tokenizer and model
    texts = []
    for r in train_ds:
        for key in ("prompt", "completion", "messages"):
            if isinstance(r.get(key), list):
                texts += [m["content"] for m in r[key]]
            elif isinstance(r.get(key), str):
                texts.append(r[key])
    tokenizer = build_stand_in_tokenizer(family, texts)
    s_cfg, scale = stand_in_config(real, vocab_size=len(tokenizer))
    model = build_stand_in(s_cfg, tokenizer, seed=seed)
    real_rank = int(args.get("anchor_rank", AnchorOptions.anchor_rank))
    script_fields = {f.name for f in dataclasses.fields(ScriptArguments)}
    t_args = {k: v for k, v in args.items() if k not in script_fields}
    # every other setting is the recipe's; logging every step records each step's loss
    changed = dict(output_dir=str(output_dir), max_steps=steps, logging_steps=1)
    changed["anchor_rank"] = stand_in_rank(real_rank, scale)
    t_args.update(changed)
    (rpsft_args,) = HfArgumentParser(RPSFTConfig).parse_dict(t_args)
    real_cfg_obj = AutoConfig.for_model(family, **{k: v for k, v in real.items() if k != "model_type"})
    with torch.device("meta"):  # the real model's shapes, no weights
        real_model = AutoModelForCausalLM.from_config(real_cfg_obj)
    branches_real = _matrix_branches(real_model, real_rank)
    branches_stand = _matrix_branches(model, rpsft_args.anchor_rank)
    from anchorft.rpsft.train import train  # lazy: loads torch

    trainer = train(rpsft_args, model, train_ds, tokenizer=tokenizer)
    trainer.save_model(str(output_dir))  # the stand-in and its tokenizer, so that later commands can read them
    tokenizer.save_pretrained(str(output_dir))
    hist = trainer.state.log_history
    losses = [h["loss"] for h in hist if "loss" in h]
    summary = {
        "config": str(config),
        "method": rpsft_args.method,
        "family": family,
        "model_config": str(mc),
        "stand_in": {
            k: getattr(s_cfg, k)
            for k in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "tie_word_embeddings",
            )
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "anchor_rank": {"recipe": real_rank, "stand_in": rpsft_args.anchor_rank, "scale": scale},
        "same_branches_as_real": branches_real == branches_stand,
        "branch_mismatches": sorted(k for k in branches_real if branches_real[k] != branches_stand.get(k)),
        "fallback_matrices": sorted(k for k, v in branches_stand.items() if v),
        "matrix_names_match": set(branches_real) == set(branches_stand),
        "changed_settings": changed,
        "rows": len(train_ds),
        "checked_dataset": checked_dataset,
        "global_step": trainer.state.global_step,
        "losses": losses,
        "log_history": hist,
        "bf16": rpsft_args.bf16,
        "use_cpu": rpsft_args.use_cpu,
        "seconds": time.perf_counter() - t0,
    }
    if not losses or not all(math.isfinite(x) for x in losses):
        raise RuntimeError(f"dry run of {config}: non-finite or missing losses {losses}")
    write_metrics(Path(output_dir) / "dry_run.json", summary, indent=1, default=str)
    return summary


def check_recipe_data(config: str, overrides: dict) -> None:
    """The dataset the recipe (or an override) names exists: a local file is read, a hub name left to training."""
    from anchorft.rpsft.data import check_sft_source  # lazy: loads `datasets` (seconds)

    data = overrides.get("dataset", load_recipe(config)[0].get("dataset"))
    if data is None:
        return
    try:
        check_sft_source(str(data), f"dataset (from {config})")
    except UsageError as err:
        raise UsageError(
            f"{err}; prepare it first (the recipe's comments name the command), give --dataset FILE, or pass "
            "--no-data-check to check the recipe alone"
        ) from err


def dry_run_summary(s: dict[str, Any], out: str | os.PathLike) -> str:
    """`dry_run`'s summary `s` in one line (what `anchorft train --dry-run` prints)."""
    si = s["stand_in"]
    return (
        f"dry run OK: {s['config']} ({s['method']}, {s['family']}) on a stand-in of {s['parameters']:,} parameters "
        f"(hidden {si['hidden_size']}, {si['num_hidden_layers']} layers, {si['num_attention_heads']}/"
        f"{si['num_key_value_heads']} heads, intermediate {si['intermediate_size']}, vocab {si['vocab_size']}); "
        f"anchor_rank {s['anchor_rank']['recipe']} -> {s['anchor_rank']['stand_in']}; "
        f"{s['global_step']} steps, losses {[round(x, 4) for x in s['losses']]}; {s['seconds']:.1f} s; "
        f"summary in {out}/dry_run.json"
    )
