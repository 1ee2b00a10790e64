"""RPSFTTrainer: once-per-step penalty, equivalences, checkpoints and resume."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.rpsft.trainer import RPSFTTrainer


def run(rp, model, tokenizer, dataset, out, resume=None, **kw):
    args = rp.base_args(str(out), **kw)
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer)
    tr.train(resume_from_checkpoint=resume)
    return tr


def weights(tr):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters()}


def assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
    for n in a:
        torch.testing.assert_close(a[n], b[n], rtol=rtol, atol=atol, msg=f"parameter {n}")


def max_diff(a, b):
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def test_lambda_zero_rpsft_is_sft(rp, tokenizer, dataset, tmp_path, monkeypatch):
    def never(*a, **k):
        raise AssertionError("the penalty gradient is applied at lambda = 0")

    monkeypatch.setattr(SubspaceAnchor, "add_penalty_grad_", never)
    model = rp.tiny_model("llama", len(tokenizer))
    sft = run(rp, model, tokenizer, dataset, tmp_path / "sft", method="sft")
    rps = run(rp, model, tokenizer, dataset, tmp_path / "rps", method="rpsft", anchor_lambda=0.0)
    la = [h["loss"] for h in sft.state.log_history if "loss" in h]
    lb = [h["loss"] for h in rps.state.log_history if "loss" in h]
    assert len(la) == 3 and la == lb
    assert_same_weights(weights(sft), weights(rps), rtol=0, atol=0)


def test_grad_accumulation_counts_penalty_once(rp, tokenizer, tmp_path):
    ds = rp.pc_dataset(24)
    model = rp.tiny_model("llama", len(tokenizer))
    kw = dict(method="rpsft", anchor_lambda=20.0, max_steps=3, learning_rate=3e-2)
    big = run(rp, model, tokenizer, ds, tmp_path / "a", per_device_train_batch_size=8, **kw)
    acc = run(
        rp, model, tokenizer, ds, tmp_path / "b", per_device_train_batch_size=1, gradient_accumulation_steps=8, **kw
    )
    free = run(rp, model, tokenizer, ds, tmp_path / "c", per_device_train_batch_size=8, **{**kw, "anchor_lambda": 0.0})
    wa, wb, wf = weights(big), weights(acc), weights(free)
    assert max_diff(wa, wf) > 100 * max_diff(wa, wb)  # the penalty matters, and 1x8 == 8x1
    assert_same_weights(wa, wb, rtol=1e-4, atol=2e-5)
    pa = [h["anchor/penalty"] for h in big.state.log_history if "anchor/penalty" in h]
    pb = [h["anchor/penalty"] for h in acc.state.log_history if "anchor/penalty" in h]
    assert pa[0] == 0.0 and pa[-1] > 0 and pa == pytest.approx(pb, rel=1e-3)


def test_anchor_every_applies_every_n_steps_with_scale_n(rp, tokenizer, dataset, tmp_path, monkeypatch):
    calls = []
    orig = SubspaceAnchor.add_penalty_grad_

    def spy(self, model, scale):
        calls.append((tr.state.global_step, scale))
        return orig(self, model, scale)

    monkeypatch.setattr(SubspaceAnchor, "add_penalty_grad_", spy)
    model = rp.tiny_model("llama", len(tokenizer))
    args = rp.base_args(
        str(tmp_path),
        method="rpsft",
        anchor_lambda=0.3,
        anchor_every=3,
        max_steps=7,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
    )
    tr = RPSFTTrainer(model, args, train_dataset=dataset, processing_class=tokenizer)
    tr.train()
    # lambda and anchor_every chosen so that lambda * n differs from lambda, n, 1, lambda + n and lambda / n
    assert [t for t, _ in calls] == [0, 3, 6]
    assert [scale for _, scale in calls] == pytest.approx([0.9, 0.9, 0.9], rel=1e-12)


def test_autograd_mode_matches_closed_form(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("qwen2", len(tokenizer), tie=True)
    kw = dict(
        method="rpsft",
        anchor_lambda=20.0,
        max_steps=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_grad_norm=0.5,
    )
    a = run(rp, model, tokenizer, dataset, tmp_path / "a", anchor_mode="grad", **kw)
    b = run(rp, model, tokenizer, dataset, tmp_path / "b", anchor_mode="autograd", **kw)
    assert_same_weights(weights(a), weights(b), rtol=1e-4, atol=1e-5)
    la = [h["loss"] for h in a.state.log_history if "loss" in h]
    lb = [h["loss"] for h in b.state.log_history if "loss" in h]
    assert la == pytest.approx(lb, rel=1e-5)  # the logged loss is the data loss in both modes


def test_autograd_mode_scaling_for_a_model_without_loss_kwargs(rp, tokenizer, dataset, tmp_path):
    """A model that takes no loss kwargs: transformers divides each micro-batch's loss by the accumulation steps
    (2 here), so the autograd-mode penalty term is multiplied back by them; the weights equal the closed form's."""
    model = rp.tiny_model("llama", len(tokenizer))
    model.accepts_loss_kwargs = False
    kw = dict(
        method="rpsft",
        anchor_lambda=20.0,
        max_steps=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_grad_norm=0.0,
    )
    a = run(rp, model, tokenizer, dataset, tmp_path / "a", anchor_mode="grad", **kw)
    b = run(rp, model, tokenizer, dataset, tmp_path / "b", anchor_mode="autograd", **kw)
    assert not a.model_accepts_loss_kwargs and not b.model_accepts_loss_kwargs and b.loss_is_scaled_for_ga is None
    assert b._anchor_last["penalty"] > 0
    assert_same_weights(weights(a), weights(b), rtol=1e-4, atol=1e-5)


def test_resume_matches_uninterrupted_and_reuses_anchor(rp, tokenizer, dataset, tmp_path, monkeypatch):
    model = rp.tiny_model("llama", len(tokenizer))
    kw = dict(method="rpsft", anchor_lambda=10.0, max_steps=4, save_strategy="steps", save_steps=2)
    full = run(rp, model, tokenizer, dataset, tmp_path / "full", **kw)
    ckpt = tmp_path / "full" / "checkpoint-2"
    assert SubspaceAnchor.exists(ckpt / "anchor")
    saved = SubspaceAnchor.load(ckpt / "anchor")
    assert saved.fingerprint == full.anchor.fingerprint

    def no_svd(*a, **k):
        raise AssertionError("SVD recomputed on resume")

    monkeypatch.setattr(SubspaceAnchor, "from_model", no_svd)
    resumed = run(rp, model, tokenizer, dataset, tmp_path / "res", resume=str(ckpt), **kw)
    assert resumed.state.global_step == 4
    assert_same_weights(weights(full), weights(resumed), rtol=1e-5, atol=1e-6)
    # a checkpoint without its anchor nor the fingerprint to rebuild it is refused
    import shutil

    shutil.rmtree(ckpt / "anchor")
    (ckpt / "anchor_meta.json").unlink()
    with pytest.raises(ValueError, match="no anchor"):
        run(rp, model, tokenizer, dataset, tmp_path / "res2", resume=str(ckpt), **kw)


def test_l2_is_full_rank_and_targets_checked_early(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    tr = RPSFTTrainer(
        model,
        rp.base_args(str(tmp_path), method="l2", anchor_targets="mlp", max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    assert tr.anchor is None  # built when training begins
    tr.train()
    assert all(e.fallback for e in tr.anchor.entries) and len(tr.anchor.entries) == 6
    with pytest.raises(ValueError, match="matches no trainable"):
        RPSFTTrainer(
            rp.tiny_model("llama", len(tokenizer)),
            rp.base_args(str(tmp_path), anchor_targets="nothing"),
            train_dataset=dataset,
            processing_class=tokenizer,
        )


def test_checkpoint_files(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    run(rp, model, tokenizer, dataset, tmp_path, method="rpsft", max_steps=1, save_strategy="steps", save_steps=1)
    files = set(os.listdir(tmp_path / "checkpoint-1" / "anchor"))
    assert files == {"anchor.json", "anchor.safetensors"}
    assert (tmp_path / "checkpoint-1" / "anchor_meta.json").is_file()


def test_the_anchor_log_keeps_transformers_throughput_metrics(rp, tokenizer, dataset, tmp_path):
    """The trainer's `log` adds the anchor's keys and hands `start_time` on: with input tokens counted, each
    training log also carries transformers' tokens per second."""
    model = rp.tiny_model("llama", len(tokenizer))
    tr = run(rp, model, tokenizer, dataset, tmp_path / "t", method="rpsft", max_steps=2,
             include_num_input_tokens_seen="all")  # fmt: skip
    logs = [h for h in tr.state.log_history if "anchor/penalty" in h]
    assert len(logs) == 2 and all("train_tokens_per_second" in h and "anchor/drift_max" in h for h in logs)
