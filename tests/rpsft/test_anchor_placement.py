"""The trainer builds its anchor after `accelerator.prepare`, from the weights as prepared.

Under DeepSpeed and FSDP transformers leaves the model where it was loaded until `accelerator.prepare`,
which moves it to the GPU, casts it (DeepSpeed bf16) or shards it (FSDP2). These tests stand in for that
on a CPU by wrapping `prepare` so that it casts the model, and check that every SVD runs after it and
that the anchor follows the prepared weights (penalty exactly 0 at step 0, tensors beside the weights).
"""

from __future__ import annotations

import pytest
import torch

import anchorft.rpsft.anchor as anchor_mod
import anchorft.rpsft.anchor_store as store_mod
from anchorft.rpsft.anchor import weights_fingerprint
from anchorft.rpsft.trainer import RPSFTTrainer


def _trainer(rp, tokenizer, dataset, out, **kw):
    args = rp.base_args(str(out), method="rpsft", anchor_lambda=5.0, max_steps=2, **kw)
    model = rp.tiny_model("llama", len(tokenizer))
    return RPSFTTrainer(model, args, train_dataset=dataset, processing_class=tokenizer)


def _wrap_prepare(tr, events, cast=None):
    """Record when `accelerator.prepare` runs (and cast the model inside it, as DeepSpeed's engine does)."""
    original = tr.accelerator.prepare

    def prepare(*objs, **kw):
        for o in objs:
            if isinstance(o, torch.nn.Module) and cast is not None:
                o.to(cast)
        out = original(*objs, **kw)
        events.append("prepare")
        return out

    tr.accelerator.prepare = prepare


def _count_svds(monkeypatch, events):
    original = store_mod.top_k_bases

    def counted(*a, **k):
        events.append("svd")
        return original(*a, **k)

    monkeypatch.setattr(store_mod, "top_k_bases", counted)


def test_every_svd_runs_after_prepare(rp, tokenizer, dataset, tmp_path, monkeypatch):
    events: list[str] = []
    _count_svds(monkeypatch, events)
    tr = _trainer(rp, tokenizer, dataset, tmp_path / "a")
    assert tr.anchor is None and "svd" not in events  # nothing computed when the trainer is built
    _wrap_prepare(tr, events)
    tr.train()
    first_prepare = events.index("prepare")
    n_svd = events.count("svd")
    assert n_svd == len(tr.anchor.entries) == 16  # 2 layers x 7 matrices, embeddings, lm_head: one SVD each
    assert all(i > first_prepare for i, e in enumerate(events) if e == "svd"), events


def test_anchor_follows_the_dtype_set_by_prepare(rp, tokenizer, dataset, tmp_path):
    """prepare casts the fp32 model to bf16 (as DeepSpeed bf16 does): the anchor is built from the bf16 weights,
    so the penalty logged at step 0 is exactly 0 and its tensors sit beside the weights; an anchor built before
    prepare (from fp32 weights) would start with a penalty of ||U^T (W_bf16 - W_fp32) V||^2 > 0."""
    events: list[str] = []
    tr = _trainer(rp, tokenizer, dataset, tmp_path / "b", learning_rate=1e-3)
    start_fp32 = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    _wrap_prepare(tr, events, cast=torch.bfloat16)
    tr.train()
    assert next(tr.model.parameters()).dtype == torch.bfloat16
    pens = [h["anchor/penalty"] for h in tr.state.log_history if "anchor/penalty" in h]
    assert len(pens) == 2 and pens[0] == 0.0 and pens[1] > 0
    drift = [h["anchor/drift_max"] for h in tr.state.log_history if "anchor/penalty" in h]
    assert drift[0] == 0.0 and drift[1] > 0  # logged beside the penalty, from the same terms
    bf16_start = [(e.name, start_fp32[e.name].to(torch.bfloat16)) for e in tr.anchor.entries]
    assert tr.anchor.fingerprint == weights_fingerprint(bf16_start)
    params = dict(tr.model.named_parameters())
    for e in tr.anchor.entries:
        for t in e.tensors().values():
            assert t.device == params[e.name].device and t.dtype == torch.float32
    # the same anchor built from the fp32 weights does not start at 0: the check above can fail
    fp32_model = rp.tiny_model("llama", len(tokenizer))
    a32 = anchor_mod.SubspaceAnchor.from_model(fp32_model, rank=4)
    bf16_model = rp.tiny_model("llama", len(tokenizer)).to(torch.bfloat16)
    assert float(a32.penalty(bf16_model)) > 0


@pytest.mark.parametrize("given", [True, False])
def test_given_anchor_is_placed_not_rebuilt(rp, tokenizer, dataset, tmp_path, monkeypatch, given):
    """A precomputed anchor is used as is (no SVD); without one, exactly one anchor is built per train()."""
    events: list[str] = []
    model = rp.tiny_model("llama", len(tokenizer))
    pre = anchor_mod.SubspaceAnchor.from_model(model, rank=4) if given else None
    _count_svds(monkeypatch, events)
    args = rp.base_args(str(tmp_path / "c"), method="rpsft", anchor_lambda=5.0, max_steps=1)
    tr = RPSFTTrainer(model, args, train_dataset=dataset, processing_class=tokenizer, anchor=pre)
    tr.train()
    assert events.count("svd") == (0 if given else 16)
    assert (tr.anchor is pre) == given
