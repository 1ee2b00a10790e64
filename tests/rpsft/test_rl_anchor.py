"""The weight anchor during DAPO (`DAPOConfig.anchor_*`): once per optimiser step, and its stated reference."""

from __future__ import annotations

import json

import pytest

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.rpsft.dapo_config import DAPOConfig
from anchorft.rpsft.rl import run_rl

PROMPTS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, 9)]


def _settings(**kw):
    # 4 prompts x 2 responses a step, updates over 2 prompts in micro-batches of 2 completions: 2 optimiser steps,
    # each accumulated over 2 micro-batches
    base = dict(steps=1, num_generations=2, prompts_per_step=4, mini_batch_prompts=2, micro_batch=2,
                max_completion_length=4, learning_rate=1e-3, save_model=False)  # fmt: skip
    return DAPOConfig(**{**base, **kw})


def _varied(completion: str, answer: str) -> float:
    return float(len(completion) % 3)  # rewards that differ within a group: nonzero advantages, the weights move


def test_rl_anchor_counts_once_per_optimiser_step(tiny_model_dir, tmp_path, monkeypatch):
    calls = []
    real = SubspaceAnchor.add_penalty_grad_

    def counting(self, model, scale):
        calls.append(scale)
        return real(self, model, scale)

    monkeypatch.setattr(SubspaceAnchor, "add_penalty_grad_", counting)
    s = _settings(anchor_method="rpsft", anchor_rank=3, anchor_lambda=0.5, anchor_kind="subspace")
    m = run_rl(str(tiny_model_dir), PROMPTS, tmp_path / "rl", s)
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert cfg["dapo_config"]["gradient_accumulation_steps"] == 2
    assert m["optimizer_steps"] == 2
    assert len(calls) == m["optimizer_steps"] == m["anchor"]["applications"]  # not once per micro-batch (4)
    assert calls == [0.5, 0.5]
    assert m["anchor"]["reference"] == "start" and cfg["anchor"]["reference"] == "start"
    assert SubspaceAnchor.load(tmp_path / "rl" / "anchor").kind == "subspace"


def test_rl_anchor_reference_is_a_model_folder_or_start(tiny_model_dir, tmp_path):
    s = _settings(anchor_method="l2", anchor_reference=str(tiny_model_dir), anchor_lambda=0.1)
    m = run_rl(str(tiny_model_dir), PROMPTS, tmp_path / "rl", s, reward_fn=_varied)
    anchor = SubspaceAnchor.load(tmp_path / "rl" / "anchor")
    assert anchor.meta["reference"] == str(tiny_model_dir) and all(e.fallback for e in anchor.entries)
    assert m["anchor"]["penalty"] > 0  # the weights moved away from the reference
    with pytest.raises(ValueError, match="anchor_reference"):
        run_rl(
            str(tiny_model_dir), PROMPTS, tmp_path / "bad", _settings(anchor_method="l2", anchor_reference="nowhere")
        )


def test_rl_anchor_options_checked_like_train():
    for bad, match in [
        (dict(anchor_method="rpsft", anchor_rank_rule="energy:1.2"), r"\[0, 1\]"),
        (dict(anchor_method="lasso"), "anchor_method"),
        (dict(anchor_method="rpsft", anchor_kind="rows"), "anchor_kind"),
    ]:
        with pytest.raises(ValueError, match=match):
            DAPOConfig(**bad)


def test_rl_anchor_as_a_loss_term_moves_the_weights_as_the_closed_form(tiny_model_dir, tmp_path, monkeypatch):
    """The loss-term form (DeepSpeed's, forced here on CPU): applied once per optimiser step, and the same trained
    weights as the closed-form gradient."""
    import torch

    import anchorft.rpsft.rl as rl

    made = rl._anchored

    def as_loss_term(base):
        class LossTerm(made(base)):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self._anchor_mode = "autograd"

        return LossTerm

    def settings():
        return _settings(anchor_method="rpsft", anchor_rank=3, anchor_lambda=50.0)

    grad = run_rl(str(tiny_model_dir), PROMPTS, tmp_path / "grad", settings(), reward_fn=_varied)
    monkeypatch.setattr(rl, "_anchored", as_loss_term)
    loss = run_rl(str(tiny_model_dir), PROMPTS, tmp_path / "loss", settings(), reward_fn=_varied)
    assert loss["anchor"]["applications"] == grad["anchor"]["applications"] == loss["optimizer_steps"] == 2
    assert loss["anchor"]["penalty"] > 0
    for (name, p), (_, q) in zip(grad["model"].named_parameters(), loss["model"].named_parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)
