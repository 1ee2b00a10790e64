"""`anchorft train` into a folder it wrote: the same run resumes or is reused, another run is refused;
a low-rank anchor that falls back to L2 says so."""

from __future__ import annotations

import json
import logging
import os
import shutil

from anchorft.cli import command
from anchorft.rpsft.train import train

train_main = command("train")  # the command as `anchorft train` runs it


def _argv(model_dir, jsonl, out, *extra):
    return [
        "--model_name_or_path", model_dir, "--dataset_name", jsonl, "--out", str(out), "--method", "rpsft",
        "--anchor_rank", "4", "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2",
        "--per_device_train_batch_size", "2", "--max_length", "32", "--report_to", "none", "--disable_tqdm", "true",
        "--learning_rate", "1e-2", *extra,
    ]  # fmt: skip


def test_rerun_reuses_resumes_or_refuses(model_dir, jsonl, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(_argv(model_dir, jsonl, out)) == 0
    first = capsys.readouterr().out
    assert "model.safetensors" in first and "metrics.json" in first
    marker = json.loads((out / "anchorft-run.json").read_text())
    assert marker["command"] == "train" and marker["status"] == "complete"
    final = (out / "model.safetensors").read_bytes()

    # the same finished run: reused, nothing trained; so with a setting outside the run's hash (output only)
    assert train_main(_argv(model_dir, jsonl, out)) == 0
    assert "already holds this finished run" in capsys.readouterr().out
    assert train_main([*_argv(model_dir, jsonl, out), "--disable_tqdm", "false"]) == 0
    assert "already holds this finished run" in capsys.readouterr().out
    assert (out / "model.safetensors").read_bytes() == final

    # the same run, stopped after its checkpoint at step 2: resumes from it, to the same weights
    shutil.rmtree(out / "checkpoint-4")
    (out / "model.safetensors").unlink()
    (out / "anchorft-run.json").write_text(json.dumps({**marker, "status": "interrupted"}))
    # ... with a setting inside the hash: refused, the interrupted run left as it was
    assert train_main(_argv(model_dir, jsonl, out, "--learning_rate", "2e-2")) == 2
    assert "holds another run" in capsys.readouterr().err
    assert json.loads((out / "anchorft-run.json").read_text())["status"] == "interrupted"
    # ... the same, or with a setting outside the hash: resumes from its checkpoint
    assert train_main([*_argv(model_dir, jsonl, out), "--disable_tqdm", "false"]) == 0
    assert "checkpoint-2" in capsys.readouterr().out
    assert (out / "model.safetensors").read_bytes() == final

    # another run into the same folder: refused before anything is loaded, unless --overwrite
    assert train_main(_argv(model_dir, jsonl, out, "--anchor_rank", "3")) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert train_main(_argv(model_dir, jsonl, out, "--anchor_rank", "3", "--overwrite")) == 0
    assert json.loads((out / "rpsft_config.json").read_text())["anchor_rank"] == 3


def test_folder_of_another_tool_is_refused(model_dir, jsonl, tmp_path, capsys):
    out = tmp_path / "old"
    (out / "checkpoint-9").mkdir(parents=True)
    assert train_main(_argv(model_dir, jsonl, out)) == 2
    assert "not empty" in capsys.readouterr().err
    assert train_main(_argv(model_dir, jsonl, out, "--overwrite")) == 2  # --overwrite never empties it
    assert (out / "checkpoint-9").is_dir()


def test_short_help_lists_the_project_flags_first(capsys):
    assert train_main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--config", "--dry-run", "--estimate", "--out", "--overwrite", "--anchor_rank", "--dataset_name"):
        assert flag in text
    assert len(text.splitlines()) < 120 and "--help-all" in text
    assert train_main(["--help-all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) > 300


def test_fallback_to_l2_warns_and_is_in_metrics(rp, tokenizer, dataset, tmp_path, caplog):
    model = rp.tiny_model("llama", len(tokenizer))
    with caplog.at_level(logging.WARNING, logger="anchorft"):
        train(rp.base_args(str(tmp_path / "all"), max_steps=1, anchor_rank=32), model, dataset, tokenizer=tokenizer)
    assert "every matrix" in caplog.text
    m = json.loads((tmp_path / "all" / "metrics.json").read_text())["anchor"]
    assert m["fallback"] == m["matrices"] == 16 and len(m["fallback_names"]) == 16  # 14 + embeddings, lm_head
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="anchorft"):
        train(rp.base_args(str(tmp_path / "some"), max_steps=1, anchor_rank=30), model, dataset, tokenizer=tokenizer)
    # hidden 32, intermediate 48, 2 key/value heads of 8: k_proj and v_proj (32 x 16) fall back at rank 30
    assert "4 of 16 matrices" in caplog.text
    m = json.loads((tmp_path / "some" / "metrics.json").read_text())["anchor"]
    assert m["fallback"] == 4 and all(n.endswith(("k_proj.weight", "v_proj.weight")) for n in m["fallback_names"])
    assert oct(os.stat(tmp_path / "some" / "metrics.json").st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    u = os.umask(0)
    os.umask(u)
    return u
