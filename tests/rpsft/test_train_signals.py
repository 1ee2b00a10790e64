"""SIGTERM always stops `anchorft train`, even where library code swallows it (a bare `except:`).

Fault injection, no sleeps: the signal is sent to this process (os.kill) from inside code that swallows the
exception its handler raises, at a named point of the run: the datasets' tokenization (inside `datasets`' own
fingerprinting, whose bare `except:` is the real culprit), the model's loading, a training step, the report's
writing. Each run ends with exit 143, marked interrupted (an `--overwrite`'s old run put back byte for byte), and a
training step's stop writes a complete checkpoint that the rerun resumes to the uninterrupted run's weights. The
2-process run (rank 0 alone records the signal; both ranks stop at the same step) is slow: run with -m slow.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from anchorft import stop
from anchorft.cli import Terminated
from anchorft.cli import main as cli
from anchorft.rpsft.checkpoints import last_complete_checkpoint
from anchorft.rpsft.stopping import StopOnSignal
from anchorft.runs import LOCK, claim_output, finish, read_marker

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")


def _argv(model_dir, jsonl, out, *extra):
    return [
        "train", "--model_name_or_path", model_dir, "--dataset_name", jsonl, "--output_dir", str(out),
        "--method", "rpsft", "--anchor_rank", "4", "--max_steps", "4", "--save_strategy", "steps",
        "--save_steps", "100", "--per_device_train_batch_size", "2", "--max_length", "32", "--report_to", "none",
        "--disable_tqdm", "true", "--logging_steps", "1", "--learning_rate", "1e-2", "--lr_scheduler_type", "constant",
        *extra,
    ]  # fmt: skip


def _sigterm_swallowed(fired: list) -> None:
    """SIGTERM to this process, and the exception its handler raises swallowed, as a bare `except:` would."""
    fired.append(True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except:  # noqa: E722 - the library code this stands for
        pass


def _sigterm_raw(fired: list) -> None:
    fired.append(True)
    os.kill(os.getpid(), signal.SIGTERM)


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != LOCK}


def _stopped(capsys, out: Path, fired: list) -> None:
    err = capsys.readouterr().err
    assert fired, "the fault was never injected"
    assert "anchorft train: terminated" in err, err[-2000:]
    assert read_marker(out)["status"] == "interrupted"


def test_the_callback_stops_at_the_step_end_with_a_checkpoint():
    """`StopOnSignal` alone: nothing recorded, nothing asked; recorded, save and stop (no checkpoint when the run
    saves none); a safe point between evaluation batches."""
    stop.clear()
    cb = StopOnSignal()
    args = SimpleNamespace(device="cpu", save_strategy="steps")
    control = SimpleNamespace(should_training_stop=False, should_save=False)
    cb.on_step_end(args, None, control)
    assert not control.should_training_stop and not control.should_save
    stop.record(signal.SIGTERM)
    cb.on_step_end(args, None, control)
    assert control.should_training_stop and control.should_save
    control = SimpleNamespace(should_training_stop=False, should_save=False)
    cb.on_step_end(SimpleNamespace(device="cpu", save_strategy="no"), None, control)
    assert control.should_training_stop and not control.should_save  # a run that saves no checkpoints saves none
    with pytest.raises(Terminated):
        cb.on_prediction_step(args, None, control)
    stop.clear()


def test_during_tokenization_inside_datasets_hashing_with_overwrite(model_dir, jsonl, tmp_path, capsys, monkeypatch):
    """The signal lands in `datasets`' fingerprinting of the trainer's `Dataset.map` (its bare `except:` swallows
    it) during an --overwrite: exit 143, and the old run is back byte for byte."""
    from datasets.fingerprint import Hasher

    out = tmp_path / "out"
    old = claim_output(out, "train", {"old": 1})
    (out / "model.safetensors").write_bytes(b"the old run's weights")
    (out / "metrics.json").write_text('{"loss": 0.5}')
    finish(old)
    before = _snapshot(out)
    real, fired = Hasher.hash.__func__, []

    def hash_(cls, value):
        names = set()
        frame = sys._getframe(1)
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        # a transform's argument (the tokenizing function), hashed inside update_fingerprint's `try`
        if not fired and callable(value) and {"update_fingerprint", "_prepare_dataset"} <= names:
            _sigterm_raw(fired)  # no `except` here: datasets' own bare `except:` is the one that swallows it
        return real(cls, value)

    monkeypatch.setattr(Hasher, "hash", classmethod(hash_))
    assert cli(_argv(model_dir, jsonl, out, "--overwrite")) == 143
    err = capsys.readouterr().err
    assert fired and "anchorft train: terminated" in err, err[-2000:]
    assert _snapshot(out) == before and read_marker(out)["status"] == "complete"


def test_during_model_loading(model_dir, jsonl, tmp_path, capsys, monkeypatch):
    from transformers import AutoModelForCausalLM

    real, fired = AutoModelForCausalLM.from_pretrained.__func__, []

    def load(cls, *a, **k):
        model = real(cls, *a, **k)
        _sigterm_swallowed(fired)
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(load))
    out = tmp_path / "out"
    assert cli(_argv(model_dir, jsonl, out)) == 143
    _stopped(capsys, out, fired)
    assert not (out / "model.safetensors").exists()


def test_during_training_stops_after_a_checkpoint_that_resumes(model_dir, jsonl, tmp_path, capsys, monkeypatch):
    """Swallowed in step 2: training stops at that step's end with a complete checkpoint-2; the rerun resumes from it
    to the weights of a run never stopped."""
    from anchorft.rpsft.trainer import RPSFTTrainer

    real, fired = RPSFTTrainer.training_step, []

    def step(self, *a, **k):
        if self.state.global_step == 1 and not fired:
            _sigterm_swallowed(fired)
        return real(self, *a, **k)

    monkeypatch.setattr(RPSFTTrainer, "training_step", step)
    out = tmp_path / "out"
    assert cli(_argv(model_dir, jsonl, out)) == 143
    _stopped(capsys, out, fired)
    assert last_complete_checkpoint(out) == str(out / "checkpoint-2")
    assert (out / "checkpoint-2" / "anchor").is_dir() and not (out / "model.safetensors").exists()
    monkeypatch.setattr(RPSFTTrainer, "training_step", real)
    assert cli(_argv(model_dir, jsonl, out)) == 0
    assert "resuming" in capsys.readouterr().out and read_marker(out)["status"] == "complete"
    ref = tmp_path / "ref"
    assert cli(_argv(model_dir, jsonl, ref)) == 0
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()


def test_a_raw_sigterm_in_one_process_saves_at_the_step_end_and_the_resumed_run_counts_the_whole_run(
    model_dir, jsonl, tmp_path, capsys, monkeypatch
):
    """A SIGTERM not swallowed, in the middle of step 2 of a single process: inside training the handler only
    records, so the step completes, checkpoint-2 is saved (save_steps is 100: only the stop saves it) and the run
    exits 143; the rerun repeats no saved step, ends at the weights of a run never stopped, and its metrics.json
    has the whole run's train_loss and token count, equal to that run's."""
    from anchorft.rpsft.trainer import RPSFTTrainer

    real, fired = RPSFTTrainer.training_step, []

    def step(self, *a, **k):
        if self.state.global_step == 1 and not fired:
            _sigterm_raw(fired)
        return real(self, *a, **k)

    monkeypatch.setattr(RPSFTTrainer, "training_step", step)
    out = tmp_path / "out"
    assert cli(_argv(model_dir, jsonl, out)) == 143
    _stopped(capsys, out, fired)
    assert last_complete_checkpoint(out) == str(out / "checkpoint-2")
    monkeypatch.setattr(RPSFTTrainer, "training_step", real)
    steps_run = []
    monkeypatch.setattr(
        RPSFTTrainer,
        "training_step",
        lambda self, *a, **k: steps_run.append(self.state.global_step) or real(self, *a, **k),
    )
    assert cli(_argv(model_dir, jsonl, out)) == 0
    assert steps_run == [2, 3]  # steps 3 and 4 only: the saved steps are not repeated
    ref = tmp_path / "ref"
    assert cli(_argv(model_dir, jsonl, ref)) == 0
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (out, ref))
    assert got["train_loss_steps"] == want["train_loss_steps"] == 4 and got["resumed_at_step"] == 2
    assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-6)
    tokens = [[h["num_tokens"] for h in m["log_history"] if "num_tokens" in h][-1] for m in (got, want)]
    assert tokens[0] == tokens[1] > 0


def test_during_report_writing(model_dir, jsonl, tmp_path, capsys, monkeypatch):
    import anchorft.rpsft.train as train_mod

    real, fired = train_mod.save_figure, []

    def save(*a, **k):
        _sigterm_swallowed(fired)
        return real(*a, **k)

    monkeypatch.setattr(train_mod, "save_figure", save)
    out = tmp_path / "out"
    assert cli(_argv(model_dir, jsonl, out)) == 143
    _stopped(capsys, out, fired)


@pytest.mark.slow
def test_two_processes_stop_at_the_same_step_and_resume(rp, tokenizer_dir, tmp_path):
    """torchrun, 2 CPU processes (gloo): only rank 0 records SIGTERM, in step 2 (its handler only records in a group).
    Both ranks stop at the end of step 2 (the callback's MAX all-reduce), a complete checkpoint-2 is written, both
    exit 143 with the run marked interrupted; the same launch again resumes from it and finishes."""
    from anchorft.eval.loading import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    model = tmp_path / "llama"
    rp.tiny_model("llama", len(tok)).save_pretrained(model)
    tok.save_pretrained(model)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rp.make_texts(16)))
    out = tmp_path / "out"
    argv = _argv(str(model), str(data), out, "--ddp_backend", "gloo")
    res = rp.torchrun(WORKER, "signal", str(tmp_path / "ranks"), "1", *argv, timeout=600)
    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rc"] for r in ranks] == [143, 143], res.stdout[-3000:] + res.stderr[-6000:]
    assert [r["step"] for r in ranks] == [2, 2] and [r["signalled"] for r in ranks] == [True, False]
    assert read_marker(out)["status"] == "interrupted"
    assert last_complete_checkpoint(out) == str(out / "checkpoint-2") and (out / "checkpoint-2" / "anchor").is_dir()
    res = rp.torchrun(WORKER, "signal", str(tmp_path / "ranks2"), "0", *argv, timeout=600)
    ranks = [json.loads((tmp_path / "ranks2" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rc"] for r in ranks] == [0, 0], res.stdout[-3000:] + res.stderr[-6000:]
    assert [r["step"] for r in ranks] == [4, 4]
    said = res.stdout.count(f"resuming from {out / 'checkpoint-2'}")
    assert said == 1, res.stdout[-3000:]  # once, by process 0
    assert read_marker(out)["status"] == "complete" and (out / "model.safetensors").is_file()
