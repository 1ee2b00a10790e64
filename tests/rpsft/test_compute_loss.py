"""`RPSFTTrainer.compute_loss` called as transformers calls it: with `return_outputs` (evaluation), with
`num_items_in_batch` (the token count over the accumulated micro-batches), and with the autograd anchor's
coefficient under gradient accumulation when `loss_is_scaled_for_ga` is set, each against what it must return."""

from __future__ import annotations

import pytest
import torch

from anchorft.rpsft.trainer import RPSFTTrainer


def _trainer(rp, tokenizer, dataset, out, ref_model=None, **kw):
    model = rp.tiny_model("llama", len(tokenizer))
    args = rp.base_args(str(out), **kw)
    tr = RPSFTTrainer(model, args, ref_model=ref_model, train_dataset=dataset, processing_class=tokenizer)
    tr.model.train()
    return tr, next(iter(tr.get_train_dataloader()))


def test_return_outputs_gives_the_loss_and_the_models_outputs(rp, tokenizer, dataset, tmp_path):
    tr, batch = _trainer(rp, tokenizer, dataset, tmp_path, method="sft")
    loss = tr.compute_loss(tr.model, batch)
    pair = tr.compute_loss(tr.model, batch, return_outputs=True)
    assert isinstance(pair, tuple) and len(pair) == 2
    assert torch.equal(pair[0], loss) and pair[0].ndim == 0
    assert pair[1].logits.shape[:2] == batch["input_ids"].shape


def test_a_methods_own_loss_divides_by_the_token_count_it_is_given(rp, tokenizer, dataset, tmp_path):
    ref = rp.tiny_model("llama", len(tokenizer), seed=1)
    tr, batch = _trainer(rp, tokenizer, dataset, tmp_path, ref_model=ref, method="iw_sft")
    by_10 = tr.compute_loss(tr.model, batch, num_items_in_batch=torch.tensor(10))
    by_40 = tr.compute_loss(tr.model, batch, num_items_in_batch=torch.tensor(40))
    assert float(by_40) != 0.0
    assert float(by_10) == pytest.approx(4 * float(by_40), rel=1e-6)  # a sum over tokens / num_items
    loss, outputs = tr.compute_loss(tr.model, batch, return_outputs=True)
    assert loss.ndim == 0 and outputs is None  # the method's loss is computed from log-probabilities alone


@pytest.mark.parametrize("scaled, kwargs", [(None, True), (True, True), (False, True), (None, False)])
def test_the_autograd_penalty_follows_loss_is_scaled_for_ga(rp, tokenizer, dataset, tmp_path, scaled, kwargs):
    lam, steps = 3.0, 4
    tr, batch = _trainer(
        rp, tokenizer, dataset, tmp_path, method="rpsft", anchor_lambda=lam, anchor_mode="autograd",
        gradient_accumulation_steps=steps,
    )  # fmt: skip
    tr._anchor_on_train_begin()
    tr.current_gradient_accumulation_steps = steps  # as the training loop sets it
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    params = [p for p in tr.model.parameters() if p.requires_grad]

    def grads(loss):
        return torch.autograd.grad(loss, params, allow_unused=True)

    tr.loss_is_scaled_for_ga = scaled
    tr.model_accepts_loss_kwargs = kwargs
    # with a token count, a model that takes loss kwargs returns a scaled loss, unless the trainer says otherwise
    with_anchor = grads(tr.compute_loss(tr.model, batch, num_items_in_batch=torch.tensor(50)))
    tr.args.anchor_lambda = 0.0
    data_only = grads(tr.compute_loss(tr.model, batch, num_items_in_batch=torch.tensor(50)))
    pen = grads(tr._active_anchor.penalty(tr.model))
    unscaled = scaled is False or (scaled is None and not kwargs)
    coef = lam * (steps if unscaled else 1)  # Trainer divides an unscaled loss by the steps later
    for a, d, p in zip(with_anchor, data_only, pen):
        if p is not None:
            torch.testing.assert_close(a - d, coef * p, rtol=1e-4, atol=1e-7)
