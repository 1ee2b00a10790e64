"""DAPO at the release's scale: fp32 master weights, mini-batched updates, the release's settings, memory estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from anchorft.rpsft.dapo_config import DAPOConfig, dapo_schedule, resolve_vllm
from anchorft.rpsft.estimate import rl_memory_estimate
from anchorft.rpsft.rl import run_rl

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype,moves", [(torch.bfloat16, False), (torch.float32, True)])
def test_lr_1e6_adamw_step_lands_in_fp32_not_in_bf16(dtype, moves):
    # why fp32 master weights: AdamW's first step moves each weight by about lr = 1e-6, far below the
    # spacing of bf16 numbers near 0.02 (2^-6 * 2^-7 ~ 1.2e-4), so in bf16 the step rounds away
    gen = torch.Generator().manual_seed(0)
    w0 = (torch.randn(256, 256, generator=gen) * 0.02 + 0.02).to(dtype)
    w = torch.nn.Parameter(w0.clone())
    w.grad = torch.randn(256, 256, generator=gen).to(dtype)
    torch.optim.AdamW([w], lr=1e-6, weight_decay=0.0).step()
    moved = w.detach() != w0
    if moves:
        assert moved.float().mean().item() > 0.99
    else:  # only weights within about 1e-4 of zero, where bf16 is fine-grained, can move
        assert not moved[w0.float().abs() > 4e-3].any() and moved.float().mean().item() < 0.05


def _release() -> dict:
    text = (REPO / "configs" / "rl" / "dapo.yaml").read_text()
    assert text.startswith("# anchorft rl ")
    return yaml.safe_load(text)


def test_release_settings_map_to_trl():
    r = _release()
    assert (r["prompts_per_step"], r["mini_batch_prompts"], r["num_generations"]) == (256, 32, 8)
    assert (r["max_completion_length"], r["overlong_cache"], r["weight_decay"], r["rl_warmup_steps"]) == (
        10240, 2048, 0.1, 10
    )  # fmt: skip
    keys = ("steps", "prompts_per_step", "num_generations", "mini_batch_prompts", "micro_batch", "rl_warmup_steps")
    kw = dapo_schedule(**{k: r[k] for k in keys}, world_size=8)
    # one generation batch = 256 prompts x 8 = 2,048 completions = 8 updates of 32 x 8 = 256 completions
    gen_batch = kw["per_device_train_batch_size"] * 8 * kw["steps_per_generation"]
    assert gen_batch == 256 * 8
    per_update = kw["per_device_train_batch_size"] * 8 * kw["gradient_accumulation_steps"]
    assert per_update == 32 * 8 and kw["steps_per_generation"] // kw["gradient_accumulation_steps"] == 8
    assert kw["max_steps"] == 100 * 8 and kw["warmup_steps"] == 10 * 8
    assert kw["lr_scheduler_type"] == "constant_with_warmup"
    assert resolve_vllm("auto", cuda=True, has_vllm=True) and not resolve_vllm("auto", cuda=False, has_vllm=True)
    cpu = dapo_schedule(**{k: r[k] for k in keys}, world_size=1)
    assert cpu["gradient_accumulation_steps"] == 32  # 256 completions in micro-batches of 8 on one device
    # the whole YAML builds the config (here on the CPU: no bf16, no checkpointing, no vLLM)
    c = DAPOConfig(**r)
    assert (c.max_steps, c.warmup_steps, c.gradient_accumulation_steps) == (800, 80, 32)
    # as released: no vLLM importance-sampling correction (TRL's default is on), prompts over 2,048 tokens dropped
    assert r["vllm_importance_sampling_correction"] is False and c.vllm_importance_sampling_correction is False
    assert r["max_prompt_length"] == 2048 and c.max_prompt_length == 2048
    assert DAPOConfig().vllm_importance_sampling_correction is False  # also the default
    assert (c.delta, c.loss_type, c.beta, c.epsilon_high) == (10.0, "dapo", 0.0, 0.28)
    assert c.use_cpu and not c.bf16 and not c.gradient_checkpointing and c.use_vllm is False
    with pytest.raises(ValueError, match="vLLM rollouts need"):
        resolve_vllm("true", cuda=False, has_vllm=False)
    with pytest.raises(ValueError, match="micro-batches"):
        DAPOConfig(prompts_per_step=4, num_generations=3, micro_batch=5)
    with pytest.raises(ValueError, match="set steps instead"):
        DAPOConfig(steps=3, max_steps=7)
    with pytest.raises(ValueError, match="rl_warmup_steps or rl_warmup_ratio instead"):
        DAPOConfig(warmup_steps=10)


def test_mini_batched_updates_run(tiny_model_dir, tmp_path):
    # 4 prompts x 2 responses a step, updates over 2 prompts: 2 optimiser steps per RL step
    prompts = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, 9)]
    s = DAPOConfig(steps=1, num_generations=2, prompts_per_step=4, mini_batch_prompts=2, micro_batch=2,
                   max_completion_length=4, learning_rate=1e-3, save_model=False)  # fmt: skip
    m = run_rl(str(tiny_model_dir), prompts, tmp_path / "rl", s)
    assert m["optimizer_steps"] == 2 and m["steps"] == [1]  # the reward is logged once per generation batch
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert cfg["dapo"]["steps_per_generation"] == 4 and cfg["dapo"]["gradient_accumulation_steps"] == 2
    assert m["model"].dtype == torch.float32 and cfg["memory"]["bytes_per_param"] == 16


def test_memory_estimate_at_8b(tmp_path, capsys):
    from transformers import LlamaConfig

    from anchorft.cli import command

    main = command("rl")

    # Llama-3.1-8B's shapes (config only: the command counts parameters on the meta device)
    shapes = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32)
    LlamaConfig(**shapes, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False).save_pretrained(
        tmp_path
    )
    assert main(["--model", str(tmp_path), "--estimate", "--config", str(REPO / "configs" / "rl" / "dapo.yaml")]) == 0
    one, eight = capsys.readouterr().out.strip().splitlines()
    assert "8.03B" in one and "ZeRO-3" in one and "FSDP2" in one
    assert "ZeRO-3" not in eight
    est = rl_memory_estimate(8_030_261_248, 1)
    assert est["total_gb_per_gpu"] == pytest.approx(8.03 * 18, rel=1e-3) and not est["fits_80gb"]
    assert rl_memory_estimate(8_030_261_248, 8)["fits_80gb"]


def test_the_rl_memory_line_shows_small_models_in_their_unit():
    """A tiny model's estimate is not "0 GB per GPU": sizes and counts in the unit that shows them."""
    from anchorft.rpsft.estimate import _count, _size, format_memory_estimate

    assert [_size(x) for x in (24.3, 3.21, 0.0412, 0.000512, 0.0)] == ["24 GB", "3.2 GB", "41 MB", "512 kB", "0 GB"]
    assert [_count(x) for x in (7.62e9, 494e6, 652224, 12)] == ["7.62B", "494M", "652k", "12"]
    est = {"n_params": 652224, "bytes_per_param": 16, "n_gpus": 1, "model_states_gb": 0.0104,
           "vllm_weights_gb": 0.0, "total_gb_per_gpu": 0.0104, "fits_80gb": True}  # fmt: skip
    assert format_memory_estimate(est).endswith("652k parameters x 16 B / 1 GPU(s) = 10 MB + 0 GB colocated vLLM "
                                                "weights = 10 MB per GPU")  # fmt: skip
