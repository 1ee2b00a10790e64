"""The methods table: a contract every method meets, and a worked example of adding a method.

The contract (PEFT-style, parametrised over every row of `anchorft.rpsft.methods.METHODS`): the trainer
builds, trains two steps and moves the weights; an anchored method at lambda = 0 is SFT; a run saved after
one step and resumed ends where the uninterrupted run ends.
"""

from __future__ import annotations

import copy

import pytest
import torch

from anchorft.rpsft import methods as mt
from anchorft.rpsft.losses import nll_loss
from anchorft.rpsft.trainer import RPSFTTrainer, frozen_copy

ALL = list(mt.METHODS)  # collected before any test registers a method of its own


def run(rp, model, tokenizer, dataset, out, resume=None, **kw):
    args = rp.base_args(str(out), **kw)
    ref = frozen_copy(model) if args.method_spec.needs_reference else None
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer, ref_model=ref)
    tr.train(resume_from_checkpoint=resume)
    return tr


def weights(tr):
    """The model's weights by name; for a PEFT method, those of the adapters merged into a copy of the model."""
    from anchorft.rpsft.peft_methods import merge_adapter_model

    model = merge_adapter_model(copy.deepcopy(tr.model)) if tr.args.method_spec.peft else tr.model
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def max_diff(a, b):
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture(scope="module")
def model(rp, tokenizer):
    return rp.tiny_model("llama", len(tokenizer))


@pytest.fixture(scope="module")
def sft_two_steps(rp, model, tokenizer, tmp_path_factory):
    return weights(run(rp, model, tokenizer, rp.pc_dataset(16), tmp_path_factory.mktemp("sft"), method="sft",
                       max_steps=2))  # fmt: skip


def test_table_rows_are_consistent():
    for m in mt.METHODS.values():
        assert m.name and m.help
        assert not m.full_rank or m.anchored
        assert set(m.sweep_keys) <= set(mt.RUN_KEYS) and "learning_rate" in m.sweep_keys
        if m.peft is None:  # a PEFT method reads anchor_rank itself (osf's rank, lora's adapter anchor)
            assert ("anchor_rank" in m.sweep_keys) == m.uses_rank
            assert any(k.startswith("anchor_") for k in m.sweep_keys) == m.anchored
    with pytest.raises(ValueError, match="method must be one of"):
        mt.get_method("nope")
    with pytest.raises(ValueError, match="already registered"):
        mt.register(mt.Method("sft", "again"))


@pytest.mark.parametrize("name", ALL)
def test_method_contract(rp, model, tokenizer, sft_two_steps, name, tmp_path):
    spec = mt.get_method(name)
    ds = rp.pc_dataset(16)
    kw = dict(method=name, max_steps=2, anchor_lambda=10.0, save_strategy="steps", save_steps=1)
    full = run(rp, model, tokenizer, ds, tmp_path / "full", **kw)
    assert full.args.anchored == spec.anchored and full.args.loss_type == spec.loss_type
    assert (full._anchor is not None) == spec.anchored
    losses = [h["loss"] for h in full.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    start = {n: p.detach() for n, p in model.named_parameters()}
    assert max_diff(weights(full), start) > 1e-4  # two steps moved the weights
    if spec.anchored:
        # the anchor is on: at lambda 10 the run differs from SFT, at lambda 0 it is SFT exactly
        assert max_diff(weights(full), sft_two_steps) > 1e-5
        free = run(rp, model, tokenizer, ds, tmp_path / "free", method=name, max_steps=2, anchor_lambda=0.0)
        assert max_diff(weights(free), sft_two_steps) == 0.0
    # save after one step, resume: the same weights as the uninterrupted run
    resumed = run(rp, model, tokenizer, ds, tmp_path / "res", resume=str(tmp_path / "full" / "checkpoint-1"), **kw)
    assert resumed.state.global_step == 2
    assert max_diff(weights(full), weights(resumed)) <= 1e-6


# ---------------------------------------------------------------- worked example: adding a method
# A method is one row: here NLL written as a custom loss on per-token log-probabilities, with the full-rank
# anchor, and a per-sequence quantity to log. Nothing else in the package changes.


def _nll_and_length(args, log_probs, mask, num_items, ref_log_probs):
    return nll_loss(log_probs, mask, num_items), {"tokens/per_sequence": mask.sum(-1).float()}


EXAMPLE = mt.Method(
    "l2_custom",
    "NLL as a custom loss, plus lambda ||W - W0||^2",
    loss=_nll_and_length,
    anchored=True,
    full_rank=True,
    sweep_keys=("anchor_lambda", "learning_rate"),
)


@pytest.fixture
def example_method():
    mt.register(EXAMPLE)
    yield EXAMPLE
    del mt.METHODS[EXAMPLE.name]


def test_worked_example_a_method_defined_here_trains(rp, model, tokenizer, tmp_path, example_method):
    ds = rp.pc_dataset(16)
    mine = run(rp, model, tokenizer, ds, tmp_path / "mine", method="l2_custom", anchor_lambda=10.0, max_steps=2)
    l2 = run(rp, model, tokenizer, ds, tmp_path / "l2", method="l2", anchor_lambda=10.0, max_steps=2)
    # the table's full_rank: every matrix anchored at full rank (stored W_0), as l2
    assert mine.anchor.entries and all(e.fallback for e in mine.anchor.entries)
    assert [e.name for e in mine.anchor.entries] == [e.name for e in l2.anchor.entries]
    # the same objective through the custom-loss path and through TRL's loss: the same weights
    assert max_diff(weights(mine), weights(l2)) < 1e-4
    logged = [h for h in mine.state.log_history if "tokens/per_sequence" in h]
    assert logged and all(h["tokens/per_sequence"] > 0 for h in logged)
