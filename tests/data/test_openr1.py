"""`anchorft data openr1-math` on rows written here in OpenR1-Math-220k's schema (config `default`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anchorft.cli import command
from anchorft.data.openr1 import SYSTEM_PROMPT, candidate_traces, last_boxed, prepare_openr1_math, select_verified

data_main = command("data")  # the command as `anchorft data` runs it

PAPER_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def _row(uuid: str, problem: str, answer: str, traces: list[str], message_trace: int = 0) -> dict:
    """One row with every column of open-r1/OpenR1-Math-220k `default`; the dataset's own correctness flags
    are deliberately all True so that a test fails if the code trusts them instead of verifying."""
    return {
        "problem": problem,
        "solution": f"Reference solution. The answer is ${answer}$.",
        "answer": answer,
        "problem_type": "Algebra",
        "question_type": "math-word-problem",
        "source": "olympiads",
        "uuid": uuid,
        "is_reasoning_complete": [True] * len(traces),
        "generations": traces,
        "correctness_math_verify": [True] * len(traces),
        "correctness_llama": None,
        "finish_reasons": None,
        "correctness_count": len(traces),
        "messages": [
            {"role": "user", "content": problem},
            {"role": "assistant", "content": traces[message_trace]},
        ],
    }


def _trace(body: str) -> str:
    return f"<think>\nLet me think. {body}\n</think>\n\n{body}"


def _rows() -> list[dict]:
    rows = [
        # the messages trace verifies (a different but equal form of the answer)
        _row("good-msg", "Compute 1/2.", "\\frac{1}{2}", [_trace("So it is \\boxed{\\dfrac{1}{2}}.")]),
        # the messages trace is wrong, the second generation verifies
        _row(
            "good-gen",
            "Compute 3/4.",
            "\\frac{3}{4}",
            [_trace("Hence \\boxed{\\frac{4}{3}}."), _trace("First \\boxed{1}, corrected: \\boxed{\\frac{3}{4}}.")],
        ),
        # every trace is wrong (flags say otherwise)
        _row("bad-wrong", "Compute 2+2.", "4", [_trace("It is \\boxed{5}."), _trace("It is \\boxed{22}.")]),
        # no \boxed{} anywhere
        _row("bad-nobox", "Compute 3+3.", "6", [_trace("The answer is 6.")]),
        # last boxed is the one that counts: an early correct one does not save a wrong final one
        _row("bad-last", "Compute 5+5.", "10", [_trace("Maybe \\boxed{10}? No: \\boxed{11}.")]),
    ]
    for i in range(20):
        a, b = 10 + i, 7 * i
        rows.append(_row(f"fill-{i}", f"What is {a}+{b}?", str(a + b), [_trace(f"{a}+{b} = \\boxed{{{a + b}}}")]))
    return rows


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    path = tmp_path / "openr1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return path


def _read(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]


def test_last_boxed() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{x^{2}+1}") == "x^{2}+1"
    assert last_boxed("\\fbox{7} then \\boxed{8}") == "8"
    assert last_boxed("\\boxed{8} then \\fbox{7}") == "7"
    assert last_boxed("no box here") is None
    assert last_boxed("\\boxed{3} and \\boxed{unbalanced") == "3"


def test_candidate_order() -> None:
    row = _row("u", "p", "1", ["A", "B"], message_trace=1)
    assert candidate_traces(row) == ["B", "A"]


def test_format_and_filter(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    metrics = prepare_openr1_math(out, source=str(source), size=100, seed=0, progress=False)
    rows = _read(out)
    uuids = {r["uuid"] for r in rows}
    assert uuids == {"good-msg", "good-gen"} | {f"fill-{i}" for i in range(20)}
    assert metrics["kept"] == 22 and metrics["rows_examined"] == 25
    assert metrics["dropped_wrong_answer"] == 2 and metrics["dropped_no_boxed"] == 1
    assert metrics["trace_from_generations"] == 1 and metrics["short_by"] == 78
    src = {r["uuid"]: r for r in _rows()}
    assert SYSTEM_PROMPT == PAPER_PROMPT
    for r in rows:
        assert r["prompt"] == [
            {"role": "system", "content": PAPER_PROMPT},
            {"role": "user", "content": src[r["uuid"]]["problem"]},
        ]
        assert len(r["completion"]) == 1 and r["completion"][0]["role"] == "assistant"
        assert r["answer"] == src[r["uuid"]]["answer"]
    by_id = {r["uuid"]: r for r in rows}
    assert by_id["good-gen"]["completion"][0]["content"].endswith("\\boxed{\\frac{3}{4}}.")
    assert by_id["good-msg"]["completion"][0]["content"] == src["good-msg"]["messages"][1]["content"]
    for name in ("config.json", "metrics.json", "lengths.png"):
        assert (out / name).stat().st_size > 0
    assert "git_commit" in json.loads((out / "metrics.json").read_text())["provenance"]
    # the trainer reads the folder back as a conversational dataset
    import datasets

    ds = datasets.load_dataset(str(out), split="train")
    assert {"prompt", "completion"} <= set(ds.column_names) and len(ds) == 22


def test_messages_format(source: Path, tmp_path: Path) -> None:
    prepare_openr1_math(tmp_path / "m", source=str(source), size=3, seed=1, fmt="messages", progress=False)
    for r in _read(tmp_path / "m"):
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        assert r["messages"][0]["content"] == PAPER_PROMPT


def test_deterministic_seeded_subset(source: Path, tmp_path: Path) -> None:
    prepare_openr1_math(tmp_path / "a", source=str(source), size=8, seed=3, progress=False)
    prepare_openr1_math(tmp_path / "b", source=str(source), size=8, seed=3, progress=False)
    prepare_openr1_math(tmp_path / "c", source=str(source), size=8, seed=4, progress=False)
    a, b, c = ((tmp_path / x / "train.jsonl").read_bytes() for x in "abc")
    assert a == b
    assert a != c
    assert len(_read(tmp_path / "a")) == 8
    sets = [{r["uuid"] for r in _read(tmp_path / x)} for x in "ac"]
    assert sets[0] != sets[1]
    assert (
        json.loads((tmp_path / "a" / "metrics.json").read_text())["sha256"]
        == json.loads((tmp_path / "b" / "metrics.json").read_text())["sha256"]
    )


def test_parquet_source_and_limit(source: Path, tmp_path: Path) -> None:
    import datasets

    pq = tmp_path / "openr1.parquet"
    datasets.Dataset.from_list(_rows()).to_parquet(str(pq))
    prepare_openr1_math(tmp_path / "j", source=str(source), size=5, seed=2, progress=False)
    prepare_openr1_math(tmp_path / "p", source=str(pq), size=5, seed=2, progress=False)
    assert _read(tmp_path / "j") == _read(tmp_path / "p")
    metrics = prepare_openr1_math(tmp_path / "l", source=str(source), size=50, seed=2, limit=5, progress=False)
    assert metrics["rows_available"] == 5
    assert {r["uuid"] for r in _read(tmp_path / "l")} == {"good-msg", "good-gen"}


def test_cli(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = data_main(
        ["openr1-math", "--sampler", "verified", "--out", str(tmp_path / "o"), "--source", str(source), "--size", "4"]
    )
    assert rc == 0 and len(_read(tmp_path / "o")) == 4
    assert json.loads(capsys.readouterr().out)["kept"] == 4


def test_missing_columns(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "p", "solution": "s", "messages": []}) + "\n")
    with pytest.raises(ValueError, match="answer"):
        prepare_openr1_math(tmp_path / "x", source=str(bad), size=1, progress=False)
    rc = data_main(["openr1-math", "--sampler", "verified", "--out", str(tmp_path / "y"), "--source", str(bad)])
    assert rc == 2 and "missing column" in capsys.readouterr().err
    no_traces = tmp_path / "nt.jsonl"
    no_traces.write_text(json.dumps({"problem": "p", "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match="messages or generations"):
        prepare_openr1_math(tmp_path / "z", source=str(no_traces), size=1, progress=False)
    assert not (tmp_path / "x").exists()


def test_bad_arguments(source: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size"):
        prepare_openr1_math(tmp_path / "s", source=str(source), size=0, progress=False)
    with pytest.raises(ValueError, match="no such file"):
        prepare_openr1_math(tmp_path / "s", source=str(tmp_path / "nope.jsonl"), size=1, progress=False)
    with pytest.raises(ValueError, match="format"):
        prepare_openr1_math(tmp_path / "s", source=str(source), size=1, fmt="alpaca", progress=False)


def test_arguments_checked_before_the_source_loads(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="size must be >= 1"):
        prepare_openr1_math(tmp_path / "s", source=missing, size=0, progress=False)
    with pytest.raises(ValueError, match="format must be one of"):
        prepare_openr1_math(tmp_path / "s", source=missing, size=1, fmt="alpaca", progress=False)


def test_drop_reasons_and_trace_origin() -> None:
    """A row is dropped as unboxed only when none of its traces has a box; a kept row counts where its trace came
    from (the assistant turn of `messages`, or `generations`)."""
    rows = [
        _row("mixed", "p1", "4", ["The answer is 4.", "So \\boxed{5}."]),  # one unboxed, one wrong: wrong
        _row("nobox", "p2", "4", ["four", "4 again"]),
        _row("msg", "p3", "4", ["So \\boxed{4}."]),
        _row("gen", "p4", "4", ["So \\boxed{5}.", "So \\boxed{4}."]),
    ]
    out, stats = select_verified(rows, size=10, seed=0, check=lambda gold, pred: gold == pred)
    assert sorted(r["uuid"] for r in out) == ["gen", "msg"]
    assert (stats.dropped_no_boxed, stats.dropped_wrong_answer) == (1, 1)
    assert (stats.trace_from_messages, stats.trace_from_generations) == (1, 1)
    assert {r["uuid"]: r["completion"][0]["content"] for r in out}["gen"] == "So \\boxed{4}."


def test_output_feeds_the_rl_stage(source: Path, tmp_path: Path) -> None:
    from anchorft.rpsft.rl import load_rl_dataset

    prepare_openr1_math(tmp_path / "rl", source=str(source), size=4, seed=5, progress=False)
    rows = load_rl_dataset(tmp_path / "rl" / "train.jsonl")
    assert len(rows) == 4
    assert all(r["prompt"][0]["content"] == PAPER_PROMPT and r["answer"] for r in rows)
