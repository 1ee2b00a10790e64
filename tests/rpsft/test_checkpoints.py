"""A run killed while it saves a checkpoint always resumes, to the weights of the uninterrupted run."""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.rpsft.checkpoints import last_complete_checkpoint
from anchorft.rpsft.trainer import RPSFTTrainer


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler cleans up."""


KW = dict(method="rpsft", anchor_lambda=10.0, max_steps=6, save_strategy="steps", save_steps=2, save_total_limit=1)


def _trainer(rp, model, tokenizer, dataset, out):
    return RPSFTTrainer(
        copy.deepcopy(model), rp.base_args(str(out), **KW), train_dataset=dataset, processing_class=tokenizer
    )


def _weights(tr):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters()}


def _kill_at_anchor_save(monkeypatch, step):
    real = SubspaceAnchor.save

    def save(self, path, write=True):
        if f"checkpoint-{step}" in os.fspath(path):
            raise Killed
        real(self, path, write=write)

    monkeypatch.setattr(SubspaceAnchor, "save", save)


def test_kill_before_anchor_is_written_resumes_to_uninterrupted_weights(rp, tokenizer, dataset, tmp_path, monkeypatch):
    model = rp.tiny_model("llama", len(tokenizer))
    full = _trainer(rp, model, tokenizer, dataset, tmp_path / "full")
    full.train()
    assert [p for p in os.listdir(tmp_path / "full") if p.startswith("checkpoint")] == [
        "checkpoint-6"
    ]  # save_total_limit=1 rotates

    out = tmp_path / "killed"
    with monkeypatch.context() as m:
        _kill_at_anchor_save(m, 4)  # model, optimizer and trainer state of step 4 are on disk; its anchor is not
        with pytest.raises(Killed):
            _trainer(rp, model, tokenizer, dataset, out).train()
    # the previous checkpoint was not rotated away before checkpoint-4 was complete
    assert SubspaceAnchor.exists(out / "checkpoint-2" / "anchor")
    assert not SubspaceAnchor.exists(out / "checkpoint-4" / "anchor")
    assert last_complete_checkpoint(out) == os.path.join(out, "checkpoint-4")

    builds = []
    real_from_model = SubspaceAnchor.from_model.__func__
    monkeypatch.setattr(
        SubspaceAnchor,
        "from_model",
        classmethod(lambda cls, *a, **k: builds.append(1) or real_from_model(cls, *a, **k)),
    )
    resumed = _trainer(rp, model, tokenizer, dataset, out)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 6 and len(builds) == 1  # rebuilt once, from the starting weights
    assert resumed.anchor.fingerprint == full.anchor.fingerprint
    wf, wr = _weights(full), _weights(resumed)
    for n in wf:
        torch.testing.assert_close(wr[n], wf[n], rtol=1e-5, atol=1e-6, msg=f"parameter {n}")
    assert [p for p in os.listdir(out) if p.startswith("checkpoint")] == ["checkpoint-6"]
    # log.jsonl tells the attempts apart: the killed one from step 0, the resumed one from the step it resumed at
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log if "loss" in r]
    assert {(r["attempt"], r["resumed_from"]) for r in log} == {(1, 0), (2, 4)}, log
    assert all(r["step"] > 4 for r in log if r["attempt"] == 2) and max(steps) == 6


def test_rebuild_refuses_other_starting_weights(rp, tokenizer, dataset, tmp_path, monkeypatch):
    model = rp.tiny_model("llama", len(tokenizer))
    out = tmp_path / "killed"
    with monkeypatch.context() as m:
        _kill_at_anchor_save(m, 2)
        with pytest.raises(Killed):
            _trainer(rp, model, tokenizer, dataset, out).train()
    other = rp.tiny_model("llama", len(tokenizer), seed=1)
    with pytest.raises(ValueError, match="not the starting weights"):
        _trainer(rp, other, tokenizer, dataset, out).train(resume_from_checkpoint=True)


def test_checkpoint_without_trainer_state_is_skipped(tmp_path):
    for step, complete in ((2, True), (4, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert last_complete_checkpoint(tmp_path) == os.path.join(tmp_path, "checkpoint-2")
    assert last_complete_checkpoint(tmp_path / "missing") is None
