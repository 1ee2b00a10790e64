"""`anchorft data openr1-math` (release sampler) on local rows written here in wh-zhu/train_openr1_4k's schema."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from anchorft.cli import command
from anchorft.data.openr1 import SYSTEM_PROMPT
from anchorft.data.release import (
    check_release_columns,
    convert_release_rows,
    prepare_release_set,
    release_question,
    release_trace,
)

data_main = command("data")  # the command as `anchorft data` runs it


def _row(i: int, question: str, trace: str, system: bool = False) -> dict:
    prompt = [{"role": "user", "content": question}]
    if system:
        prompt = [{"role": "system", "content": "be brief"}, *prompt]
    return {
        "data_source": "openr1",
        "prompt": prompt,
        "target": [{"role": "assistant", "content": trace}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(i)},
        "extra_info": {"index": i, "split": "train"},
    }


def _rows() -> list[dict]:
    return [
        _row(0, "What is 0 + 0?", "<think>zero</think> \\boxed{0}"),
        _row(1, "  What is 1 x 1?  ", "  <think>one</think> \\boxed{1}\n", system=True),
        _row(2, "", "a trace without a question"),  # skipped
        _row(3, "What is 1 + 2?", ""),  # skipped
        _row(4, "What is 2 + 2?", "<think>four</think> \\boxed{4}"),
    ]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "train_openr1_4k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return path


def test_field_rules_of_the_release_conversion() -> None:
    """Written out from the release's script: question from the last user turn of `prompt` (else the last
    message), trace from the first message of `target`; `content` or `value`; content parts joined by newlines;
    stripped; the first non-empty column in the release's order wins."""
    assert release_question({"prompt": [{"from": "human", "value": " q "}, {"from": "gpt", "value": "a"}]}) == "q"
    assert release_question({"prompt": [{"role": "system", "content": "s"}]}) == "s"
    assert release_question({"prompt": "", "question": "from question", "problem": "p"}) == "from question"
    parts = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert release_trace({"target": [parts]}) == "a\nb"
    assert release_trace({"target": None, "answer": "42", "solution": "long"}) == "42"
    assert release_trace({"solution": "s", "output": "o"}) == "s"


def test_converts_every_row_in_order(source: Path, tmp_path: Path) -> None:
    m = prepare_release_set(tmp_path / "out", source=str(source))
    assert (m["rows"], m["written"], m["skipped"]) == (5, 3, 2)
    rows = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert [r["answer"] for r in rows] == ["0", "1", "4"]
    assert rows[1]["prompt"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "What is 1 x 1?"},
    ]
    assert rows[1]["completion"] == [{"role": "assistant", "content": "<think>one</think> \\boxed{1}"}]
    for name in ("config.json", "metrics.json", "lengths.png"):
        assert (tmp_path / "out" / name).is_file()
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["provenance"]["anchorft"]
    # the same rows from parquet give the same file; --limit reads the first rows only
    pq = tmp_path / "src.parquet"
    datasets.Dataset.from_list(_rows()).to_parquet(str(pq))
    assert prepare_release_set(tmp_path / "pq", source=str(pq))["sha256"] == m["sha256"]
    assert prepare_release_set(tmp_path / "lim", source=str(source), limit=2)["written"] == 2
    msgs, _ = convert_release_rows(_rows(), fmt="messages")
    assert [x["role"] for x in msgs[0]["messages"]] == ["system", "user", "assistant"]


def test_cli_default_is_the_release_sampler(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert data_main(["openr1-math", "--out", str(tmp_path / "o"), "--source", str(source)]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 3
    cfg = json.loads((tmp_path / "o" / "config.json").read_text())
    assert cfg["sampler"] == "release"


def test_other_schemas_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="not in the schema"):
        check_release_columns(["instruction", "response"], "x.jsonl")
    raw = tmp_path / "openr1_220k.jsonl"  # OpenR1-Math-220k's own layout: the release would train on 'answer'
    raw.write_text(json.dumps({"problem": "p", "answer": "1", "solution": "s", "generations": ["g"]}) + "\n")
    rc = data_main(["openr1-math", "--out", str(tmp_path / "o"), "--source", str(raw)])
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("anchorft data openr1-math:")]
    assert rc == 2 and len(ours) == 1 and "--sampler verified" in ours[0]
    assert not (tmp_path / "o").exists()
