"""JSONL reading: every row parsed once, a bad row named by file and line, or skipped and described."""

from __future__ import annotations

import pytest

from anchorft.io import iter_jsonl


def _file(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"a": 1}\n\n[1, 2]\n{"a": -3}\n{oops\n{"a": 5}\n', encoding="utf-8")
    return f


def test_rows_are_numbered_by_index_and_physical_line(tmp_path):
    f = _file(tmp_path)
    bad: list[str] = []
    got = list(iter_jsonl(f, skip_bad=True, bad=bad))
    # non-blank lines are indexed 0, 1, ...; line numbers count the blank line too
    assert got == [(0, 1, {"a": 1}), (2, 4, {"a": -3}), (4, 6, {"a": 5})]
    assert bad == ["line 3: expected a JSON object, got list", f"line 5: {_json_error('{oops')}"]


def test_a_bad_line_names_the_file_the_line_and_the_flag(tmp_path):
    f = _file(tmp_path)
    with pytest.raises(ValueError) as info:
        list(iter_jsonl(f))
    assert str(info.value) == (
        f"{f}: line 3: malformed JSON line (expected a JSON object, got list); pass --skip-bad to skip such lines"
    )
    with pytest.raises(FileNotFoundError, match="no such JSONL file"):
        list(iter_jsonl(tmp_path / "none.jsonl"))


def test_parse_turns_rows_into_values_and_its_refusals_into_bad_lines(tmp_path):
    f = _file(tmp_path)

    def positive(index: int, lineno: int, obj: dict) -> tuple[int, int]:
        if obj["a"] < 0:
            raise ValueError(f"field 'a' must be >= 0, got {obj['a']}")
        return index * 10 + lineno, obj["a"]

    bad: list[str] = []
    got = list(iter_jsonl(f, skip_bad=True, bad=bad, parse=positive))
    assert got == [(0, 1, (1, 1)), (4, 6, (46, 5))]
    assert bad == [
        "line 3: expected a JSON object, got list",
        "line 4: field 'a' must be >= 0, got -3",
        f"line 5: {_json_error('{oops')}",
    ]
    f.write_text('{"a": 1}\n{"a": -3}\n', encoding="utf-8")
    with pytest.raises(ValueError) as info:
        list(iter_jsonl(f, parse=positive))
    assert str(info.value) == f"{f}: line 2: field 'a' must be >= 0, got -3; pass --skip-bad to skip such lines"


def _json_error(line: str) -> str:
    import json

    try:
        json.loads(line)
    except ValueError as e:
        return str(e)
    raise AssertionError(line)
