"""The completions `anchorft data openr1-math` writes are checked against the columns the release's order passes
over: a file of {"problem", "solution", "answer"} rows is refused naming both columns (the release takes `answer`
first, and each completion would be the short answer), no folder made; the same rows with `solution` renamed to
`target` convert; short completions with nothing passed over are written, with a warning."""

from __future__ import annotations

import json
import logging

import pytest

from anchorft.cli import command
from anchorft.data.release import check_trace_layout

data_main = command("data")
SOLUTION = "We add the two numbers one unit at a time and count every step of the way. So the sum is \\boxed{{{}}}."


def _rows(n: int = 8, solution: str = "solution") -> list[dict]:
    return [
        {"problem": f"What is {i} + {i}?", solution: SOLUTION.format(2 * i), "answer": str(2 * i)} for i in range(n)
    ]


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_answers_taken_over_their_solutions_are_refused_naming_both_columns(tmp_path, capsys):
    src = _write(tmp_path / "rows.jsonl", _rows())
    out = tmp_path / "out"
    assert data_main(["openr1-math", "--source", src, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "takes each completion from 'answer'" in err and "passes over 'solution'" in err, err
    assert "in 8 of 8 rows" in err and "rename 'solution' to 'target'" in err, err
    assert not out.exists()


def test_the_solutions_as_target_convert(tmp_path, capsys):
    src = _write(tmp_path / "rows.jsonl", _rows(solution="target"))
    out = tmp_path / "out"
    assert data_main(["openr1-math", "--source", src, "--out", str(out)]) == 0, capsys.readouterr().err
    first = json.loads((out / "train.jsonl").read_text().splitlines()[0])
    assert first["completion"][0]["content"].startswith("We add the two numbers")


def test_a_few_rows_with_a_longer_column_are_no_layout_error():
    rows = [{"problem": "p", "answer": "x" * 100}] * 19 + _rows(1)  # 1 row in 20: under a tenth
    check_trace_layout(rows, "f.jsonl")
    with pytest.raises(ValueError, match="passes over 'solution'"):
        check_trace_layout(rows[:9] + _rows(1), "f.jsonl")  # 1 in 10


def test_short_completions_with_nothing_passed_over_are_written_with_a_warning(tmp_path, caplog):
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(6)]
    with caplog.at_level(logging.WARNING, logger="anchorft.data.release"):
        check_trace_layout(rows, "short.jsonl")
    assert "short.jsonl: the completions are short (median 1 characters" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="anchorft.data.release"):
        check_trace_layout(_rows(solution="target"), "long.jsonl")
    assert caplog.text == ""
