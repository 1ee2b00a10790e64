"""Each method's loss against TRL's and against explicit formulas on the same batch."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from trl import SFTConfig, SFTTrainer

from anchorft.rpsft.losses import dft_loss, iw_sft_loss, iw_sft_weights, nll_loss
from anchorft.rpsft.trainer import RPSFTTrainer


def token_logps(model, inputs, grad=False):
    """Independent per-token log-probabilities from the full logits."""
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits[:, :-1]
    labels = inputs["labels"][:, 1:]
    mask = labels != -100
    logp = torch.log_softmax(logits.float(), -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask


def first_batch(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer._prepare_inputs(batch)


def test_pure_losses_against_formulas():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 5, generator=g) * 3
    mask = torch.rand(3, 5, generator=g) > 0.3
    mask[2] = False
    lp = lp * mask
    ref = lp - 0.5 * torch.randn(3, 5, generator=g) * mask
    n = int(mask.sum())
    assert float(nll_loss(lp, mask)) == pytest.approx(float(-lp[mask].sum() / n))
    assert float(dft_loss(lp, mask, num_items=7)) == pytest.approx(float(-(lp * lp.exp())[mask].sum() / 7))
    w = iw_sft_weights(lp, ref, mask, temperature=0.5, clip=1.3)
    for i in range(3):
        cnt = int(mask[i].sum())
        if cnt == 0:
            assert float(w[i]) == 1.0
            continue
        mean = sum(float(lp[i, t] - ref[i, t]) for t in range(5) if mask[i, t]) / cnt
        assert float(w[i]) == pytest.approx(min(max(math.exp(0.5 * mean), 0.0), 1.3), rel=1e-6)
    loss, w2 = iw_sft_loss(lp, ref, mask, temperature=0.5, clip=1.3)
    assert torch.equal(w, w2)
    assert float(loss) == pytest.approx(float(sum(w[i] * -lp[i][mask[i]].sum() for i in range(3)) / n), rel=1e-6)
    # DFT's gradient is sg(p) times NLL's gradient
    x = lp.clone().requires_grad_(True)
    dft_loss(x, mask).backward()
    torch.testing.assert_close(x.grad, -(lp.exp() * mask) / n)


def test_iw_sft_gradient_through_the_weight():
    """As released, the gradient also flows through w_i: d loss / d log p_{i,t} = (-w_i + w_i (T / n_i) NLL_i) / N
    on rows below the clip, -w_i / N on clipped rows (clamp passes no gradient) and with detach_weight=True."""
    g = torch.Generator().manual_seed(1)
    lp = -torch.rand(4, 6, generator=g) * 2
    mask = torch.rand(4, 6, generator=g) > 0.25
    mask[:, 0] = True
    lp = lp * mask
    ref = (lp - 0.4 * torch.randn(4, 6, generator=g)) * mask
    temp, clip, n = 0.5, 1.1, int(mask.sum())
    w = iw_sft_weights(lp, ref, mask, temperature=temp, clip=clip).detach()
    clipped = w >= clip
    assert clipped.any() and (~clipped).any()  # both cases are exercised
    n_i = mask.sum(-1)
    nll_i = -(lp * mask).sum(-1)
    through = torch.where(clipped, torch.zeros_like(w), w * temp / n_i * nll_i)
    want_released = ((-w + through)[:, None] * mask) / n
    want_detached = (-w[:, None] * mask) / n
    for detach, want in ((False, want_released), (True, want_detached)):
        y = lp.clone().requires_grad_(True)
        loss, w_out = iw_sft_loss(y, ref, mask, temperature=temp, clip=clip, detach_weight=detach)
        loss.backward()
        torch.testing.assert_close(y.grad, want, msg=f"detach_weight={detach}")
        assert not w_out.requires_grad
    assert not torch.allclose(want_released, want_detached)


def test_losses_divide_by_num_items_and_iw_defaults():
    """num_items (the whole accumulation batch's token count) is the divisor when given; one target token gives
    -log p itself; no target token gives 0; IW-SFT's defaults are T = 1 and clip 16 (a ratio of e^3 is clipped)."""
    lp = torch.tensor([[-0.5, -1.0, -2.0], [-0.25, -3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    total = -float(lp[mask].sum())
    assert float(nll_loss(lp, mask, num_items=7)) == pytest.approx(total / 7)
    one = torch.zeros_like(mask)
    one[0, 1] = True
    assert float(nll_loss(lp * one, one)) == pytest.approx(1.0)
    assert float(dft_loss(lp * one, one)) == pytest.approx(math.exp(-1.0) * 1.0)
    none = torch.zeros_like(mask)
    assert float(nll_loss(lp * none, none)) == 0.0
    ref = lp - torch.tensor([[3.0], [0.5]], dtype=torch.float64) * mask  # mean log-ratios 3 and 0.5
    loss, w = iw_sft_loss(lp, ref, mask, num_items=7)
    torch.testing.assert_close(w, torch.tensor([16.0, math.exp(0.5)], dtype=torch.float64))
    per_seq = -(lp * mask).sum(-1)
    assert float(loss) == pytest.approx(float((w * per_seq).sum()) / 7)


def test_dft_equals_trl(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    args = rp.base_args(str(tmp_path / "a"), method="dft")
    ours = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer)
    trl_args = SFTConfig(
        output_dir=str(tmp_path / "b"),
        loss_type="dft",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=2,
        max_length=32,
        report_to=[],
        seed=0,
        data_seed=0,
    )
    theirs = SFTTrainer(copy.deepcopy(model), trl_args, train_dataset=dataset, processing_class=tokenizer)
    inputs = first_batch(ours)
    inputs_b = first_batch(theirs)
    assert torch.equal(inputs["input_ids"], inputs_b["input_ids"])
    a = ours.compute_loss(ours.model, dict(inputs))
    b = theirs.compute_loss(theirs.model, dict(inputs))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    logp, mask = token_logps(model, inputs)
    torch.testing.assert_close(a.detach(), dft_loss(logp, mask), rtol=1e-5, atol=1e-6)
    # and method "sft" is TRL's NLL
    sft = RPSFTTrainer(
        copy.deepcopy(model),
        rp.base_args(str(tmp_path / "c"), method="sft"),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    torch.testing.assert_close(
        sft.compute_loss(sft.model, dict(inputs)).detach(), nll_loss(logp, mask), rtol=1e-5, atol=1e-6
    )


def test_iw_sft_loss_in_trainer(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    ref_indep = copy.deepcopy(ref)
    args = rp.base_args(
        str(tmp_path / "a"), method="iw_sft", iw_temperature=0.7, iw_clip=1.5, per_device_train_batch_size=4
    )
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer, ref_model=ref)
    inputs = first_batch(tr)
    tr.model.train()
    loss = tr.compute_loss(tr.model, dict(inputs))
    logp, mask = token_logps(model, inputs)
    ref_logp, _ = token_logps(ref_indep, inputs)
    mean = ((logp - ref_logp) * mask).sum(-1) / mask.sum(-1)
    raw = torch.exp(0.7 * mean)
    assert (raw > 1.5).any() and (raw < 1.5).any()  # the batch exercises both sides of the clip
    w = raw.clamp(0, 1.5)
    want = (w * -(logp * mask).sum(-1)).sum() / mask.sum()
    torch.testing.assert_close(loss.detach(), want, rtol=1e-5, atol=1e-6)
    assert tr._metrics["train"]["iw/weight_mean"][-1] == pytest.approx(float(w.mean()), rel=1e-5)
    # the model's gradient is the autograd gradient of the same loss with the weight undetached (the release's
    # form); detaching the weight (iw_detach_weight=True) gives another gradient
    grads = {}
    for detach in (False, True):
        args.iw_detach_weight = detach
        tr.model.zero_grad()
        tr.compute_loss(tr.model, dict(inputs)).backward()
        grads[detach] = {n: p.grad.clone() for n, p in tr.model.named_parameters()}
    m2 = copy.deepcopy(model)
    logp, mask = token_logps(m2, inputs, grad=True)
    w = torch.exp(0.7 * ((logp - ref_logp) * mask).sum(-1) / mask.sum(-1)).clamp(0, 1.5)
    ((w * -(logp * mask).sum(-1)).sum() / mask.sum()).backward()
    for name, p in m2.named_parameters():
        torch.testing.assert_close(grads[False][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert max(float((grads[False][k] - grads[True][k]).abs().max()) for k in grads[False]) > 1e-4


def test_iw_sft_needs_reference(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    with pytest.raises(ValueError, match="reference model"):
        RPSFTTrainer(
            model, rp.base_args(str(tmp_path), method="iw_sft"), train_dataset=dataset, processing_class=tokenizer
        )
