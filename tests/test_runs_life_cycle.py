"""The run-folder life cycle is written once (`anchorft.runs.run_claimed`), read from the source: a command that
copied the claim -> reused -> work -> finish sequence could forget a step of it (a reused run run again, a failed
one left "running", a refusal that leaves a folder behind), so the sequence may live in one place only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from anchorft.runs import RunClaim, read_marker, run_claimed

SRC = Path(__file__).resolve().parents[1] / "src" / "anchorft"
# where `claim_output` may be called: the successor itself, and `train`, whose processes of a distributed launch
# all run the work while only process 0 claims the folder (the others read the marker), and which finishes the run
# only after every process agreed that no signal arrived during the save
ALLOWED = {("runs.py", "run_claimed"), ("rpsft/train.py", "claim_training_run")}
OUT_FLAGS = {"--out", "--output_dir", "--output-dir"}
SEQUENCE = {"claim_output", "finish", "reused", "fail"}  # the steps a command would copy


def _calls(tree: ast.AST, names: set[str]) -> list[tuple[str, str, int]]:
    """(called name, enclosing top-level or nested function, line) of every call to one of `names`."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                f = child.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in names:
                    found.append((name, where, child.lineno))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def _modules() -> dict[str, ast.AST]:
    return {p.relative_to(SRC).as_posix(): ast.parse(p.read_text(), str(p)) for p in sorted(SRC.rglob("*.py"))}


def _writes_a_folder(tree: ast.AST) -> bool:
    """The module takes an output folder: a parser's `--out` / `--output_dir`, or its parsed arguments' `out` /
    `output_dir` (`rl` reads its flags into dataclasses through TrlParser)."""
    return any(
        (isinstance(n, ast.Attribute) and n.attr in ("out", "output_dir"))
        or (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "add_argument"
            and any(isinstance(a, ast.Constant) and a.value in OUT_FLAGS for a in n.args)
        )
        for n in ast.walk(tree)
    )


def test_claim_output_is_called_from_at_most_two_places():
    sites = [(path, where) for path, tree in _modules().items() for _, where, _ in _calls(tree, {"claim_output"})]
    assert ("runs.py", "run_claimed") in sites  # the reader finds a call
    assert len(sites) <= 2 and set(sites) <= ALLOWED, sites


def test_no_command_copies_the_life_cycle():
    """Outside anchorft.runs, the steps of the sequence are called only by `train` (the justified special case: its
    claim in the library, `rpsft.train.claim_training_run`, its finish in the command after every process agreed)."""
    copies = {
        (path, name, line)
        for path, tree in _modules().items()
        if path not in ("runs.py", "commands/train.py", "rpsft/train.py")
        for name, _, line in _calls(tree, SEQUENCE)
    }
    assert not copies, copies


def test_every_command_that_writes_a_folder_goes_through_run_claimed():
    modules = _modules()
    writers = [p for p, t in modules.items() if p.startswith("commands/") and _writes_a_folder(t)]
    expected = {"analyze", "data", "eval", "eval_suite", "rl", "toy", "toy_rl", "toy_verdict", "train", "w2s"}
    assert {Path(p).stem for p in writers} >= expected, writers
    # the library and study entries that claim their folder themselves (`toy report` -> `report_into`, ...)
    entries = {where for p, t in modules.items() if not p.startswith("commands/") for _, where, _ in
               _calls(t, {"run_claimed"})} - {"<module>", "run_claimed"}  # fmt: skip
    assert {"report_into", "compare_into", "bench_into"} <= entries, entries
    for path in writers:
        if path == "commands/train.py":
            continue
        assert _calls(modules[path], {"run_claimed", *entries}), (
            f"{path} writes a folder without anchorft.runs.run_claimed"
        )


def test_run_claimed_reuses_runs_and_marks_failures(tmp_path, capsys):
    out, calls = tmp_path / "run", []

    def work(claim: RunClaim) -> str:
        calls.append(claim.resume)
        (claim.out / "result.txt").write_text("done")
        return "result"

    assert run_claimed(out, "toy bench", {"a": 1}, work) == "result"
    assert read_marker(out)["status"] == "complete" and read_marker(out)["files"] == ["result.txt"]
    assert run_claimed(out, "toy bench", {"a": 1}, work) is None  # reused: work not called, its line printed
    assert "already holds this finished run" in capsys.readouterr().out and calls == [False]
    assert run_claimed(out, "toy bench", {"a": 1}, work, rerun_finished=True) == "result"
    assert calls == [False, True]

    def fails(claim: RunClaim) -> str:
        (claim.out / "partial.txt").write_text("half")
        raise ValueError("late failure")

    with pytest.raises(ValueError, match="late failure"):
        run_claimed(out, "toy bench", {"a": 2}, fails, overwrite=True)
    assert read_marker(out)["config"] == {"a": 1} and not (out / "partial.txt").exists()  # the old run put back
    with pytest.raises(ValueError, match="late failure"):
        run_claimed(tmp_path / "new", "toy bench", {"a": 2}, fails)
    assert read_marker(tmp_path / "new")["status"] == "failed"
    with pytest.raises(ValueError, match="nothing"):
        run_claimed(tmp_path / "empty", "toy bench", {}, lambda claim: (_ for _ in ()).throw(ValueError("nothing")))
    assert not (tmp_path / "empty").exists()  # refused before anything was written: no folder left behind
    with pytest.raises(TypeError, match="returned None"):
        run_claimed(tmp_path / "none", "toy bench", {}, lambda claim: None)
