"""The weight anchor during DAPO under DeepSpeed ZeRO-2 and ZeRO-3 (2 processes on CPU, gloo): a loss term there.

DeepSpeed's engine keeps the gradients and steps inside the backward of the step's last micro-batch, so a gradient
added to `.grad` afterwards (the closed-form path) would be lost. With a constant reward every advantage is 0 and
the policy loss has no gradient: the weights move by the anchor's gradient alone (L2 to another model), with plain
SGD, so the update is lr x that gradient and must equal the one-process run's (closed-form path) in size and
direction: a wrong anchor scale, or the penalty missing on one rank (its gradient averaged with the other's: half
the update), fails. Each rank reports its own penalty after training, compared with one process's.

Why not non-zero advantages: each process samples its completions with its own generator (TRL seeds them by
process), so a 2-process run and a one-process run train on different completions and their weights cannot be
compared; the anchor's arithmetic is what differs between engines, and it is checked exactly here.

Slow (a 2-process launch): `make test-dist`. Needs `deepspeed` (the dev extras).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from matrix_worker import RL_PROMPTS, constant_reward, rl_kwargs  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "matrix_worker.py")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (dev extras)")
def test_rl_anchor_is_a_loss_term_under_deepspeed(rp, tmp_path):
    from anchorft.rpsft.dapo_config import DAPOConfig
    from anchorft.rpsft.rl import run_rl

    base, ref = str(tmp_path / "base"), str(tmp_path / "ref")
    tok = rp.build_tokenizer(base)
    rp.tiny_model("llama", len(tok)).save_pretrained(base)
    rp.tiny_model("llama", len(tok), seed=1).save_pretrained(ref)
    res = rp.torchrun(WORKER, "rl", base, ref, str(tmp_path / "ds"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-5000:]
    one = run_rl(base, RL_PROMPTS, tmp_path / "one", DAPOConfig(**rl_kwargs(1), anchor_reference=ref),
                 reward_fn=constant_reward)  # fmt: skip
    want = load_file(str(tmp_path / "one" / "model" / "model.safetensors"))
    start = load_file(os.path.join(base, "model.safetensors"))
    moved = max(float((want[n] - start[n]).abs().max()) for n in want)
    assert moved > 1e-3 and one["anchor"]["applications"] == 2  # the anchor alone moved the one-process run
    for stage in (2, 3):
        for rank in (0, 1):
            info = json.loads((tmp_path / "ds" / f"zero{stage}" / f"info-rank{rank}.json").read_text())
            assert info["optimizer_steps"] == 2 and info["anchor"]["applications"] == 2
            assert (info["z3_params"] > 0) == (stage == 3)
            assert info["anchor"]["penalty"] == pytest.approx(one["anchor"]["penalty"], rel=1e-4), (stage, rank)
        got = load_file(str(tmp_path / "ds" / f"zero{stage}" / "model" / "model.safetensors"))
        for n, w in want.items():  # the update, relative to its size (SGD: lr x the anchor's gradient)
            moved_n = float((w - start[n]).norm())
            if moved_n > 0:
                assert float((got[n] - w).norm()) / moved_n <= 1e-4, (stage, n)
    assert isinstance(one["model"], torch.nn.Module)
