"""The autograd anchor path under gradient accumulation with a model that takes no loss kwargs: Trainer then
divides each micro-batch's loss by the accumulation steps itself, so the penalty's coefficient must be multiplied
back (the branch a model that takes loss kwargs never runs). Checked against the closed-form ("grad") mode."""

from __future__ import annotations

import copy

import pytest
import torch

from anchorft.rpsft.trainer import RPSFTTrainer


def _train(rp, model, tokenizer, dataset, out, **kw):
    args = rp.base_args(str(out), **kw)
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer)
    tr.train()
    return tr


@pytest.mark.parametrize("optim", ["sgd", "adamw_torch"])
def test_autograd_equals_closed_form_for_a_model_without_loss_kwargs(rp, tokenizer, dataset, tmp_path, optim):
    model = rp.tiny_model("llama", len(tokenizer))
    model.accepts_loss_kwargs = False  # as a model whose forward takes no num_items_in_batch
    kw = dict(method="rpsft", anchor_lambda=20.0, max_steps=3, per_device_train_batch_size=2,
              gradient_accumulation_steps=3, optim=optim, learning_rate=5e-2)  # fmt: skip
    a = _train(rp, model, tokenizer, dataset, tmp_path / "a", anchor_mode="grad", **kw)
    b = _train(rp, model, tokenizer, dataset, tmp_path / "b", anchor_mode="autograd", **kw)
    assert b.model_accepts_loss_kwargs is False and b.loss_is_scaled_for_ga is None  # the branch under test
    free = _train(rp, model, tokenizer, dataset, tmp_path / "c", anchor_mode="grad", **{**kw, "anchor_lambda": 0.0})
    wa = {n: p.detach() for n, p in a.model.named_parameters()}
    wb = {n: p.detach() for n, p in b.model.named_parameters()}
    wf = {n: p.detach() for n, p in free.model.named_parameters()}
    moved = max(float((wa[n] - wf[n]).abs().max()) for n in wa)
    diff = max(float((wa[n] - wb[n]).abs().max()) for n in wa)
    assert diff < 1e-3 * moved, (diff, moved)  # the penalty matters, and both modes apply it alike
    for n in wa:
        torch.testing.assert_close(wa[n], wb[n], rtol=1e-4, atol=1e-5, msg=n)
