"""`anchorft eval score` on every shipped evaluation file with gold answers: the gold scores 100 %."""

from __future__ import annotations

import json

import pytest

from anchorft.eval.benchmarks import benchmarks_dir, load_bench

ROOT = benchmarks_dir()
FILES = sorted(p for p in ROOT.glob("*/*.jsonl") if not p.stem.startswith("ifeval")) if ROOT.is_dir() else []


def test_every_shipped_file_is_covered():
    if not ROOT.is_dir():
        pytest.skip(f"benchmark files not found at {ROOT} (set ANCHORFT_BENCHMARKS or run `anchorft data benchmarks`)")
    assert len(FILES) >= 18  # 7 ID files, 11 OOD files with gold answers (the IFEval files have none)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_gold_answers_score_100_percent(path, tmp_path, capsys):
    from anchorft.cli import command

    main = command("eval")

    bench = load_bench(path)
    kinds = {it.kind for it in bench.items}
    assert kinds == ({"math"} if path.parent.name == "id" else {"choice"}), kinds  # OOD graded by option letter
    resp = tmp_path / "gold.jsonl"
    resp.write_text("".join(json.dumps({"index": it.index, "responses": [f"\\boxed{{{it.gold}}}"]}) + "\n"
                            for it in bench.items))  # fmt: skip
    assert main(["score", "--bench", str(path), "--responses", str(resp)]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n_items"] == len(bench.items) and m["n_missing"] == 0
    assert m["avg@k"] == 1.0 and m["pass@k"] == 1.0


def test_options_spanning_lines_and_blank_lines_are_parsed():
    from anchorft.eval.answers import extract_choice, parse_choices

    q = (
        "Pick one.\n\nChoices:\nA. Dear Sam,\n\nthanks.\n- item\n1. a step\nB. $$\nn \\sim 3\n$$\n"
        "C. last one\n\nPlease answer with the single correct option letter (e.g., A)."
    )
    ch = parse_choices(q)
    assert list(ch) == ["A", "B", "C"]  # "1. a step" inside A is not an option (not the next label)
    assert ch["A"] == "Dear Sam,\n\nthanks.\n- item\n1. a step" and ch["B"] == "$$\nn \\sim 3\n$$"
    assert ch["C"] == "last one"
    assert extract_choice("so \\boxed{B}", ch) == "B"
