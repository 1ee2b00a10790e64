"""`anchorft train`'s metrics.json recomputed from what sits beside it: the log history against the run's
per-step log (log.jsonl), the step count, and the anchor's final penalty and drift from the saved weights and the
starting model's (the L2 anchor: every matrix falls back to ||W - W0||^2)."""

from __future__ import annotations

import json
import math

import pytest
from safetensors.torch import load_file

from anchorft.cli import command

train_main = command("train")  # the command as `anchorft train` runs it


def test_train_metrics_are_the_log_and_the_weights_summarised(rp, tokenizer_dir, tmp_path):
    from anchorft.eval.loading import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    start = tmp_path / "llama"
    rp.tiny_model("llama", len(tok)).save_pretrained(start)
    tok.save_pretrained(start)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rp.make_texts(12)))
    out = tmp_path / "run"
    argv = [
        "--model_name_or_path", str(start), "--dataset_name", str(data), "--out", str(out), "--method", "l2",
        "--anchor_lambda", "0.1", "--max_steps", "4", "--logging_steps", "1", "--per_device_train_batch_size", "2",
        "--max_length", "32", "--report_to", "none", "--disable_tqdm", "true", "--learning_rate", "1e-2",
        "--save_strategy", "no",
    ]  # fmt: skip
    assert train_main(argv) == 0
    m = json.loads((out / "metrics.json").read_text())
    log = [json.loads(ln) for ln in (out / "log.jsonl").read_text().splitlines() if ln.strip()]
    steps = [h for h in m["log_history"] if "loss" in h]
    assert [h["step"] for h in steps] == [1, 2, 3, 4] and m["global_step"] == 4
    logged = [h for h in log if "loss" in h]
    assert [h["loss"] for h in steps] == pytest.approx([h["loss"] for h in logged])
    assert m["method"] == "l2"

    # the anchor's final penalty and drift, from the weights: sum ||W - W0||^2 and max ||W - W0|| / ||W0||
    a = m["anchor"]
    names = a["fallback_names"]
    assert a["matrices"] == a["fallback"] == len(names) > 0  # L2: every anchored matrix
    w = load_file(str(out / "model.safetensors"))
    w0 = load_file(str(start / "model.safetensors"))
    sq, rel = [], []
    for name in names:
        key = name if name in w else f"{name}.weight"
        d = (w[key].double() - w0[key].double()).pow(2).sum().item()
        sq.append(d)
        rel.append(math.sqrt(d) / w0[key].double().norm().item())
    assert max(sq) > 0
    assert a["penalty"] == pytest.approx(sum(sq), rel=1e-4)
    assert a["drift_max"] == pytest.approx(max(rel), rel=1e-4)
