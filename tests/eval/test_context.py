"""Prompts longer than the model's context are an error (named), not a silent run; missing responses a warning."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from anchorft.cli import command
from anchorft.eval.context import check_prompt_lengths, context_length

main = command("eval")  # the command as `anchorft eval` runs it


class WordTokenizer:
    """One token per whitespace-separated word (the count is checked against str.split, independently)."""

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [list(range(len(t.split()))) for t in texts]}


def test_prompt_past_the_context_is_an_error_and_answer_room_a_warning(caplog):
    prompts = [["a b c", "a b c d e f"], ["a"]]
    assert check_prompt_lengths(WordTokenizer(), prompts, ["x", "y"], None, 100) == [6, 1]
    with pytest.raises(ValueError, match=r"--bench x: item 1 has a prompt of 6 tokens, the model's context is 6"):
        check_prompt_lengths(WordTokenizer(), prompts, ["x", "y"], 6, 1)
    with caplog.at_level(logging.WARNING, logger="anchorft"):
        assert check_prompt_lengths(WordTokenizer(), prompts, ["x", "y"], 8, 4) == [6, 1]
    assert "--bench x" in caplog.text and "--bench y" not in caplog.text


def test_eval_command_refuses_prompts_past_the_context(tiny_model_dir, tmp_path, capsys):
    model = tmp_path / "short"
    shutil.copytree(tiny_model_dir, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["max_position_embeddings"] = 4
    (model / "config.json").write_text(json.dumps(cfg))
    assert context_length(model) == 4
    bench = tmp_path / "b.jsonl"
    row = {"prompt": [{"role": "user", "content": "what is one plus one"}], "reward_model": {"ground_truth": "2"}}
    bench.write_text(json.dumps(row) + "\n")
    argv = ["--model", str(model), "--bench", str(bench), "--n", "1", "--max_new_tokens", "2", "--backend", "hf"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "context is 4" in err and len(err.splitlines()) == 1


def test_score_warns_on_missing_items(tmp_path, capsys):
    bench = tmp_path / "b.jsonl"
    rows = [
        {"prompt": [{"role": "user", "content": f"q{i}"}], "reward_model": {"ground_truth": "1"}} for i in range(3)
    ]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    resp = tmp_path / "r.jsonl"
    resp.write_text(json.dumps({"index": 0, "responses": [r"\boxed{1}"]}) + "\n")
    assert main(["score", "--bench", str(bench), "--responses", str(resp)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_missing"] == 2
    assert "no responses for 2 of 3 items" in captured.err
