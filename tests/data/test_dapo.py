"""`anchorft data dapo-math` on local rows in DAPO-Math-17k's schemas."""

from __future__ import annotations

import json

import pytest

from anchorft.data.dapo import SYSTEM_PROMPT, dapo_row, problem_text

WRAP = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{p}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def _verl_row(problem: str, gold: str, idx: str) -> dict:
    return {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": WRAP.format(p=problem)}],
        "ability": "MATH",
        "reward_model": {"ground_truth": gold, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": idx},
    }


def test_problem_text_strips_dapo_wrapper():
    assert (
        problem_text([{"role": "user", "content": WRAP.format(p="Find $x$ if $2x = 4$.")}]) == "Find $x$ if $2x = 4$."
    )
    assert problem_text("What is 1 + 1?") == "What is 1 + 1?"
    assert problem_text([{"role": "system", "content": "s"}]) is None


def test_rows_in_both_schemas():
    row = dapo_row(_verl_row("Find $x$.", "2", "a"))
    assert row["prompt"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Find $x$."}]
    assert row["reward_model"]["ground_truth"] == "2"
    flat = dapo_row({"prompt": "What is 3 + 4?", "solution": 7})
    assert flat["reward_model"]["ground_truth"] == "7" and flat["prompt"][1]["content"] == "What is 3 + 4?"
    orig = dapo_row(_verl_row("Find $x$.", "2", "a"), prompt_style="original")
    assert orig["prompt"][0]["content"].startswith("Solve the following")
    assert dapo_row({"prompt": "no answer"}) is None


def test_command_writes_rl_prompts_and_counts(tmp_path, capsys):
    from anchorft.cli import command

    main = command("data")
    from anchorft.rpsft.rl import load_rl_dataset

    rows = [
        _verl_row("Find $x$.", "2", "a"),
        _verl_row("Find $x$.", "2", "b"),
        _verl_row("Find $y$.", "\\frac{1}{2}", "c"),
        {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "q"}], "reward_model": {}},
    ]
    src = tmp_path / "dapo.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["dapo-math", "--source", str(src), "--out", str(out)]) == 0
    stats = json.loads((out / "metrics.json").read_text())
    assert stats.pop("provenance")["anchorft"]  # the code that wrote the file
    assert stats == {"rows_read": 4, "kept": 2, "dropped_no_problem_or_answer": 1, "dropped_duplicate": 1}
    data = load_rl_dataset(out / "train.jsonl")
    assert [d["answer"] for d in data] == ["2", "\\frac{1}{2}"]
    assert data[1]["prompt"][1]["content"] == "Find $y$."
    assert main(["dapo-math", "--source", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert "none.jsonl does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("style", ["boxed", "original"])
def test_parquet_source(tmp_path, style):
    pd = pytest.importorskip("pandas")
    from anchorft.data.dapo import prepare_dapo_math

    src = tmp_path / "dapo.parquet"
    pd.DataFrame([_verl_row("Find $z$.", "5", "a")]).to_parquet(src)
    stats = prepare_dapo_math(tmp_path / "o", source=str(src), prompt_style=style)
    assert stats["kept"] == 1
