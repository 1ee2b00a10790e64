"""The lm-eval bridge on a tiny local model and a custom task whose data is a local file."""

from __future__ import annotations

import json

import pytest

from anchorft.eval.lm_eval_bridge import lm_eval_available, resolve_tasks, run_lm_eval

needs_lm_eval = pytest.mark.skipif(
    not lm_eval_available(), reason="lm-evaluation-harness is not installed (pip install 'anchorft[lmeval]')"
)

TASK_YAML = """task: anchorft_tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: choices
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _task(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "choices": [str(2 * i), str(2 * i + 1)], "label": 0} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_mc.yaml").write_text(TASK_YAML.format(data=data))
    return tasks / "tiny_mc.yaml"


def test_resolve_tasks(tmp_path):
    yaml_file = _task(tmp_path)
    assert resolve_tasks([str(yaml_file), "hellaswag"]) == (["anchorft_tiny_mc", "hellaswag"], [str(yaml_file.parent)])
    with pytest.raises(ValueError, match="does not exist"):
        resolve_tasks([str(tmp_path / "missing.yaml")])
    with pytest.raises(ValueError, match="no task"):
        resolve_tasks([" "])


@needs_lm_eval
def test_custom_task_on_tiny_model_skips_builtin_index(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    yaml_file = _task(tmp_path)
    out = run_lm_eval(tiny_model_dir, [str(yaml_file)], tmp_path / "out", limit=4, batch_size=4)
    assert out["builtin_index"] is False
    acc = out["results"]["anchorft_tiny_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0
    assert json.loads((tmp_path / "out" / "lm_eval_results.json").read_text())["tasks"] == ["anchorft_tiny_mc"]


@needs_lm_eval
def test_eval_command_lm_eval(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from anchorft.cli import command

    main = command("eval")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    yaml_file = _task(tmp_path)
    argv = ["--model", str(tiny_model_dir), "--lm-eval", "anchorft_tiny_mc", "--include-path", str(yaml_file.parent)]
    assert main(argv + ["--out", str(tmp_path / "o"), "--limit", "2", "--batch_size", "2"]) == 0
    assert "anchorft_tiny_mc" in json.loads(capsys.readouterr().out)
