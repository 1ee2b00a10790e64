"""RPSFT's penalty on a PEFT adapter's effective update (`anchorft.rpsft.adapter_anchor`).

The reference is independent of PEFT's `get_delta_weight`: the merged weight W = W_0 + sum_a (alpha_a / r_a)
B_a A_a (transposed for a fan_in_fan_out layer) formed here from the adapter's parameters, the bases from
`torch.linalg.svd` of W_0, the penalty on W - W_0 written out, and its gradient taken by autograd."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

from anchorft.rpsft.adapter_anchor import AdapterAnchor, adapter_modules


def _reference(model, k: int, kind: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(R, {param name: dR/dparam}) from the merged weights, by autograd."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = torch.zeros(())
    for _, mod in adapter_modules(model):
        w0 = mod.get_base_layer().weight.detach()
        delta = torch.zeros_like(w0)
        for a in mod.active_adapters:
            if a not in mod.lora_A:
                continue
            ba = mod.lora_B[a].weight @ mod.lora_A[a].weight * (mod.lora_alpha[a] / mod.r[a])
            delta = delta + (ba.T if mod.fan_in_fan_out else ba)
        w = w0 + delta  # the merged weight
        u_full, _, vh_full = torch.linalg.svd(w0, full_matrices=False)
        u, v = u_full[:, :k], vh_full[:k].T
        d = w - w0
        block = (u.T @ d @ v).pow(2).sum()
        if kind == "block":
            total = total + block
        else:  # ||P_U D||^2 + ||D P_V||^2 - ||P_U D P_V||^2
            total = total + (u.T @ d).pow(2).sum() + (d @ v).pow(2).sum() - block
    grads = torch.autograd.grad(total, list(params.values()), allow_unused=True)
    return total.detach(), {n: g for n, g in zip(params, grads) if g is not None}


def _lora(model, targets, fan_in_fan_out=False, names=("default",), seed=0):
    cfgs = [LoraConfig(r=3 + i, lora_alpha=5.0 + i, target_modules=targets, fan_in_fan_out=fan_in_fan_out) for i in
            range(len(names))]  # fmt: skip
    peft_model = get_peft_model(model, cfgs[0], adapter_name=names[0])
    for name, cfg in zip(names[1:], cfgs[1:]):
        peft_model.add_adapter(name, cfg)
    if len(names) > 1:
        peft_model.base_model.set_adapter(list(names))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:  # B = 0 at init: a random B gives a non-zero update
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    for p in peft_model.parameters():
        p.grad = None
    return peft_model


def _gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2)).float()


@pytest.mark.parametrize("kind", ["block", "subspace"])
@pytest.mark.parametrize("case", ["llama", "llama-two-adapters", "gpt2-fan-in-fan-out"])
def test_gradient_matches_autograd_on_merged_weights(rp, kind, case):
    if case.startswith("gpt2"):
        model = _lora(_gpt2(), ["c_attn", "c_fc"], fan_in_fan_out=True)
    else:
        names = ("first", "second") if "two" in case else ("default",)
        model = _lora(rp.tiny_model("llama", 60), ["q_proj", "down_proj", "v_proj"], names=names)
    k = 4
    anchor = AdapterAnchor.from_model(model, k, kind)
    assert len(anchor.entries) == len(adapter_modules(model)) > 0
    ref_pen, ref_grads = _reference(model, k, kind)
    assert float(ref_pen) > 1e-3
    scale = 0.7
    out = anchor.add_penalty_grad_(model, scale)
    assert out["penalty"] == pytest.approx(float(ref_pen), rel=1e-5)
    assert out["drift_max"] > 0
    got = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert set(ref_grads) <= set(got)
    for n, g in ref_grads.items():
        torch.testing.assert_close(got[n], scale * g, rtol=1e-4, atol=1e-6)
    # the differentiable terms (the loss form under DeepSpeed) give the same value
    assert float(anchor.penalty(model).detach()) == pytest.approx(float(ref_pen), rel=1e-5)


@pytest.mark.parametrize("kind", ["block", "subspace"])
def test_regathered_terms_match_autograd(rp, monkeypatch, kind):
    """The ZeRO-3 form (`_Regathered`: the factors whole only inside `gathered`, gathered again in the backward),
    with every parameter taken for a partitioned one and the gather counted: the loss form's gradient equals the
    reference, and the backward gathered each matrix's factors once more."""
    import contextlib

    from anchorft.rpsft import adapter_anchor as aa

    model = _lora(rp.tiny_model("llama", 60), ["q_proj", "down_proj"])
    anchor = AdapterAnchor.from_model(model, 4, kind)
    ref_pen, ref_grads = _reference(model, 4, kind)
    entered = []

    @contextlib.contextmanager
    def counted(params):
        entered.append(len(params))
        yield

    monkeypatch.setattr(aa, "is_zero3", lambda p: True)
    monkeypatch.setattr(aa, "gathered", counted)
    pen = anchor.penalty(model)
    assert len(entered) == len(anchor.entries)
    (0.7 * pen).backward()
    assert len(entered) == 2 * len(anchor.entries)  # the backward gathered each adapter again
    assert float(pen) == pytest.approx(float(ref_pen), rel=1e-5)
    for n, p in model.named_parameters():
        if n in ref_grads:
            torch.testing.assert_close(p.grad, 0.7 * ref_grads[n], rtol=1e-4, atol=1e-6)


def test_penalty_is_the_full_weight_anchor_on_the_merged_model(rp):
    from anchorft.rpsft.anchor import SubspaceAnchor

    plain = rp.tiny_model("llama", 60)
    k = 4
    full = SubspaceAnchor.from_model(plain, rank=k, targets=r"q_proj|o_proj", include_embeddings=False)
    model = _lora(copy.deepcopy(plain), ["q_proj", "o_proj"])
    pen = AdapterAnchor.from_model(model, k, "block").drift(model)["penalty"]
    merged = copy.deepcopy(model).merge_and_unload()
    assert full.drift(merged)["penalty"] == pytest.approx(pen, rel=1e-4)


def test_zero_at_initialisation(rp):
    model = get_peft_model(rp.tiny_model("llama", 60), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    for kind in ("block", "subspace"):
        anchor = AdapterAnchor.from_model(model, 4, kind)
        out = anchor.add_penalty_grad_(model, 1.0)
        assert out["penalty"] == 0.0 and out["drift_max"] == 0.0
        assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters() if p.requires_grad)


def test_full_rank_is_l2_on_the_update(rp):
    plain = rp.tiny_model("llama", 60)
    model = _lora(copy.deepcopy(plain), ["q_proj"])
    anchor = AdapterAnchor.from_model(model, 10_000, "block")
    assert all(e.full for e in anchor.entries)
    merged = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    expect = sum(float((merged[n] - p).pow(2).sum()) for n, p in plain.named_parameters() if "q_proj" in n)
    assert anchor.drift(model)["penalty"] == pytest.approx(expect, rel=1e-4)


def test_needs_an_adapter(rp):
    with pytest.raises(ValueError, match="no active PEFT adapter"):
        AdapterAnchor.from_model(rp.tiny_model("llama", 60), 4)
    with pytest.raises(ValueError, match="anchor_kind"):
        AdapterAnchor.from_model(_lora(rp.tiny_model("llama", 60), ["q_proj"]), 4, "diagonal")


def _train(rp, model, tokenizer, out, **kw):
    from anchorft.rpsft.trainer import RPSFTTrainer

    args = rp.base_args(str(out), method="lora", lora_rank=4, lora_alpha=8.0, max_steps=3, **kw)
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=rp.pc_dataset(16), processing_class=tokenizer)
    tr.train(resume_from_checkpoint=kw.get("resume_from_checkpoint"))
    return tr


def _update(tr) -> dict[str, torch.Tensor]:
    from anchorft.rpsft.adapter_anchor import adapter_delta

    return {n: adapter_delta(m).detach().clone() for n, m in adapter_modules(tr.model)}


def test_lora_anchor_in_training(rp, tokenizer, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    plain = _update(_train(rp, model, tokenizer, tmp_path / "plain"))
    free = _train(rp, model, tokenizer, tmp_path / "free", lora_anchor=True, anchor_lambda=0.0, anchor_rank=4)
    assert all(torch.equal(plain[n], d) for n, d in _update(free).items())  # lambda 0: plain LoRA exactly
    kw = dict(lora_anchor=True, anchor_lambda=100.0, anchor_rank=4, save_strategy="steps", save_steps=1)
    held = _train(rp, model, tokenizer, tmp_path / "held", **kw)
    logged = [h["anchor/penalty"] for h in held.state.log_history if "anchor/penalty" in h]
    assert logged and logged[0] == 0.0  # zero at the first step (B = 0)
    anchor = held.adapter_anchor
    # the anchored run moves its updates' top-k blocks less than plain LoRA does
    mods = dict(adapter_modules(held.model))
    for e in anchor.entries:
        d_held, d_plain = _update(held)[e.name], plain[e.name]
        assert anchor.term(e, d_held) < anchor.term(e, d_plain)
    assert mods
    # resumed from its step-1 checkpoint: the same adapters as the uninterrupted run
    ckpt = str(tmp_path / "held" / "checkpoint-1")
    res = _train(rp, model, tokenizer, tmp_path / "res", resume_from_checkpoint=ckpt, **kw)
    assert res.state.global_step == 3
    for n, d in _update(res).items():
        torch.testing.assert_close(d, _update(held)[n], rtol=0, atol=1e-6)


def test_lora_anchor_only_on_lora(rp, tmp_path):
    with pytest.raises(ValueError, match="lora_anchor: only for method 'lora'"):
        rp.base_args(str(tmp_path), method="sft", lora_anchor=True)


@pytest.mark.parametrize(
    "option",
    [
        dict(anchor_rank_rule="energy:0.9"),
        dict(anchor_map="q_proj: 2"),
        dict(anchor_layers="0"),
        dict(anchor_memory=10_000),
        dict(anchor_lambda_rest=0.5),
        dict(anchor_targets="q_proj"),
        dict(anchor_include_embeddings=False),
    ],
)
def test_lora_anchor_refuses_the_options_it_would_not_read(rp, tmp_path, option):
    """The adapter anchor anchors every adapted matrix at anchor_rank: a rank rule, map, layer selection, budget,
    remainder weight or target selection set with it is refused in one line naming it, not silently ignored."""
    name = next(iter(option))
    with pytest.raises(ValueError, match=rf"lora_anchor: .*{name}=.* would be ignored"):
        rp.base_args(str(tmp_path), method="lora", lora_anchor=True, anchor_rank=4, **option)
    read = dict(anchor_rank=4, anchor_lambda=0.1, anchor_kind="subspace")  # what it reads: accepted
    rp.base_args(str(tmp_path), method="lora", lora_anchor=True, **read)
