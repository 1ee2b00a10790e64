"""DAPO at the release's scale: fp32 master weights, mini-batched updates, the release's settings, memory estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from anchorft.rpsft.rl import RLSettings, grpo_kwargs, rl_memory_estimate, run_rl

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


def _release() -> RLSettings:
    text = (REPO / "configs" / "rl" / "dapo.yaml").read_text()
    assert text.startswith("# anchorft rl ")
    s = RLSettings(**yaml.safe_load(text))
    s.validate()
    return s


def test_release_settings_map_to_trl(tmp_path):
    s = _release()
    assert (s.prompts_per_step, s.mini_batch_prompts, s.num_generations) == (256, 32, 8)
    assert (s.max_completion_length, s.overlong_cache, s.weight_decay, s.warmup_steps) == (10240, 2048, 0.1, 10)
    kw = grpo_kwargs(s, tmp_path, cuda=True, has_vllm=True, world_size=8)
    # one generation batch = 256 prompts x 8 = 2,048 completions = 8 updates of 32 x 8 = 256 completions
    gen_batch = kw["per_device_train_batch_size"] * 8 * kw["steps_per_generation"]
    assert gen_batch == 256 * 8
    per_update = kw["per_device_train_batch_size"] * 8 * kw["gradient_accumulation_steps"]
    assert per_update == 32 * 8 and kw["steps_per_generation"] // kw["gradient_accumulation_steps"] == 8
    assert kw["max_steps"] == 100 * 8 and kw["warmup_steps"] == 10 * 8
    assert kw["bf16"] and kw["gradient_checkpointing"] and kw["use_vllm"] and kw["vllm_mode"] == "colocate"
    assert kw["delta"] == 10.0 and kw["loss_type"] == "dapo" and kw["beta"] == 0.0
    cpu = grpo_kwargs(s, tmp_path, cuda=False, has_vllm=True, world_size=1)
    assert not cpu["bf16"] and not cpu["gradient_checkpointing"] and not cpu["use_vllm"] and cpu["use_cpu"]
    assert cpu["gradient_accumulation_steps"] == 32  # 256 completions in micro-batches of 8 on one device
    with pytest.raises(ValueError, match="vLLM rollouts need"):
        grpo_kwargs(RLSettings(use_vllm="true"), tmp_path, cuda=False, has_vllm=False)
    with pytest.raises(ValueError, match="micro-batches"):
        grpo_kwargs(
            RLSettings(prompts_per_step=4, num_generations=3, micro_batch=5), tmp_path, cuda=False, has_vllm=False
        )


def test_mini_batched_updates_run(tiny_model_dir, tmp_path):
    # 4 prompts x 2 responses a step, updates over 2 prompts: 2 optimiser steps per RL step
    prompts = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, 9)]
    s = RLSettings(steps=1, num_generations=2, prompts_per_step=4, mini_batch_prompts=2, micro_batch=2,
                   max_completion_length=4, learning_rate=1e-3, save_model=False)  # fmt: skip
    m = run_rl(str(tiny_model_dir), prompts, tmp_path / "rl", s)
    assert m["optimizer_steps"] == 2 and m["steps"] == [1]  # the reward is logged once per generation batch
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert cfg["grpo_config"]["steps_per_generation"] == 4 and cfg["grpo_config"]["gradient_accumulation_steps"] == 2
    assert m["model"].dtype == torch.float32 and cfg["memory"]["bytes_per_param"] == 16


def test_memory_estimate_at_8b(tmp_path, capsys):
    from transformers import LlamaConfig

    from anchorft.commands.rl import main

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
