"""The rerun matrix of every command that reuses finished work (docs/testing.md, "Reruns"): a folder left
finished or interrupted (Ctrl-C during the work), then the command again with the same settings, with a setting
outside the run's hash (one that cannot change the result), and with one inside it; the exit code, whether the
work runs again (and resumes), and the marker left. The work itself is a stand-in; the numbers of the commands
that resume part-way are checked in their own tests (tests/toy/test_compare_boundary.py,
tests/eval/test_suite_boundary.py, tests/rpsft/test_train_reruns.py)."""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path

import pytest

from anchorft.cli import main as cli
from anchorft.runs import MARKER


def _status(out: Path) -> str:
    return json.loads((out / MARKER).read_text())["status"]


def _stand_in(calls: list, out_of, result: dict, state: dict):
    """The command's work: writes a file into its folder, then (when `state["stop"]`) is interrupted."""

    def fake(*a, **k):
        calls.append(k.get("resume"))
        out = Path(out_of(a, k))
        out.mkdir(parents=True, exist_ok=True)
        (out / "part.json").write_text("{}")
        if state["stop"]:
            raise KeyboardInterrupt
        (out / "results.json").write_text("{}")
        return dict(result)

    return fake


_1 = lambda a, k: a[0]  # noqa: E731
_2 = lambda a, k: a[1]  # noqa: E731
_3 = lambda a, k: a[2]  # noqa: E731
# (argv writing "out", a change outside the run's hash, a change inside it, module, function, its folder, result)
COMMANDS = [
    (["toy", "compare", "--preset", "smoke", "--methods", "sft"], ["--workers", "1"], ["--seeds", "5"],
     "anchorft.studies.testbed.compare", "run_compare", _2, {}),
    (["toy", "rl", "--compare", "cmp"], ["--threads", "1"], ["--seed", "3"], "anchorft.studies.testbed.rl_stage",
     "run_rl_stage", _2, {}),
    (["w2s", "sweep", "--kind", "chi", "--quick"], ["--quiet"], ["--kind", "overlap"], "anchorft.studies.w2s.sweeps",
     "run_sweep", _2, {}),
    (["eval", "--model", "model", "--bench", "good.jsonl"], ["--timeout", "3"], ["--seed", "1"],
     "anchorft.eval.runner", "run_eval", _3, {}),
    (["rl", "--model", "model", "--dataset", "good.jsonl"], ["--skip_bad", "true"], ["--top_k", "3"],
     "anchorft.rpsft.rl", "run_rl", _3, {"reward_first": 0.0, "reward_last": 0.0}),
    (["data", "openr1-math", "--source", "good.jsonl"], ["--no-progress"], ["--limit", "1"], "anchorft.data.release",
     "prepare_release_set", _1, {}),
    (["analyze", "--base", "model"], ["--threads", "1"], ["--seed", "1"], "anchorft.analysis.run", "run_analysis",
     lambda a, k: a[0].out, {"rank": 1, "rotation": {}, "figures": []}),
    (["w2s", "run", "--preset", "paper"], ["--quiet"], ["--steps", "5"], "anchorft.studies.w2s.experiments",
     "run_experiment", _2, {"diverged": None}),
    (["toy", "pretrain", "--preset", "smoke", "--no-cache"], ["--threads", "1"], ["--steps", "5"],
     "anchorft.toy.pretrain", "pretrain", _2, {"greedy_accuracy": {}, "params": 1}),
    (["toy", "interpolate", "--compare", "cmp", "--runs", "sft"], ["--threads", "1"], ["--alphas", "0.5"],
     "anchorft.studies.testbed.interpolate", "run_interpolate", lambda a, k: a[3], {"methods": {}}),
]  # fmt: skip
# (state before, change, exit code, the work runs again, the marker after)
MATRIX = [
    ("finished", "same", 0, False, "complete"),
    ("finished", "outside", 0, False, "complete"),
    ("finished", "inside", 2, False, "complete"),
    ("interrupted", "same", 0, True, "complete"),
    ("interrupted", "outside", 0, True, "complete"),
    ("interrupted", "inside", 2, False, "interrupted"),
]


def _with(argv: list[str], change: list[str]) -> list[str]:
    if change[0] in argv:
        i = argv.index(change[0])
        return [*argv[:i], *change, *argv[i + 2 :]]
    return [*argv, *change]


@pytest.mark.parametrize("before,change,rc,again,status", MATRIX, ids=["-".join(m[:2]) for m in MATRIX])
@pytest.mark.parametrize(
    "argv,outside,inside,module,func,out_of,result", COMMANDS, ids=[" ".join(c[0][:2]) for c in COMMANDS]
)
def test_rerun_matrix(argv, outside, inside, module, func, out_of, result, before, change, rc, again, status,
                      tmp_path, monkeypatch, capsys):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANCHORFT_DEBUG", raising=False)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "good.jsonl").write_text('{"prompt": "a", "completion": "b", "answer": "1"}\n')
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "results.json").write_text(json.dumps({"methods": {}}))
    calls: list = []
    state = {"stop": before == "interrupted"}
    mod = importlib.import_module(module)  # the stand-in keeps the function's signature (a parser reads its defaults)
    stand_in = functools.update_wrapper(_stand_in(calls, out_of, result, state), getattr(mod, func))
    monkeypatch.setattr(mod, func, stand_in)
    argv = [*argv, "--out", "out"]
    assert cli(argv) == (130 if state["stop"] else 0) and len(calls) == 1
    assert _status(tmp_path / "out") == ("interrupted" if state["stop"] else "complete")
    state["stop"] = False
    capsys.readouterr()
    rerun = {"same": argv, "outside": _with(argv, outside), "inside": _with(argv, inside)}[change]
    assert cli(rerun) == rc
    assert len(calls) == (2 if again else 1)
    assert _status(tmp_path / "out") == status
    if again and module == "anchorft.studies.testbed.compare":
        assert calls[-1] is True  # the comparison keeps the fine-tunes it finished
    if rc == 2:
        assert "holds another run" in capsys.readouterr().err


def test_toy_report_recomputes_and_marks_its_rerun(tmp_path, monkeypatch, capsys):
    """`toy report` reuses nothing (it recomputes in seconds): a finished report run again is rewritten, marked
    "running" meanwhile, so an interruption while its files are rewritten leaves "interrupted", not "complete"."""
    import anchorft.studies.testbed.report as report
    import anchorft.studies.testbed.results as results

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / results.RESULTS_FILE).write_text("{}")

    class Parts:
        def to_dict(self):
            return {"methods": {}}

    calls: list = []
    state = {"stop": False}

    def write_report(merged, path):
        calls.append(path)
        Path(path).write_text("partial" if state["stop"] else "report")
        if state["stop"]:
            raise KeyboardInterrupt

    monkeypatch.setattr(report, "load_results", lambda path: Parts())
    monkeypatch.setattr(report, "merge_results", lambda parts: Parts())  # as `write_merged_report` reads them
    monkeypatch.setattr(report, "save_results", lambda merged, path: Path(path).write_text("{}"))
    monkeypatch.setattr(report, "write_report", write_report)
    monkeypatch.setattr(report, "write_tradeoff_plot", lambda *a: None)
    argv = ["toy", "report", "--from", "cmp", "--out", "out"]
    assert cli(argv) == 0 and _status(tmp_path / "out") == "complete" and len(calls) == 1
    assert cli(argv) == 0 and len(calls) == 2  # finished, same settings: written again
    state["stop"] = True
    assert cli(argv) == 130 and len(calls) == 3
    assert _status(tmp_path / "out") == "interrupted"  # the half-rewritten report is not taken as complete
    state["stop"] = False
    assert cli(argv) == 0 and len(calls) == 4 and _status(tmp_path / "out") == "complete"
    assert (tmp_path / "out" / "report.md").read_text() == "report"
    capsys.readouterr()
    assert cli([*argv, "--front", "sft"]) == 2 and len(calls) == 4  # another run: refused
    assert "holds another run" in capsys.readouterr().err and _status(tmp_path / "out") == "complete"


def test_config_hash_is_canonical_json():
    """The hash does not depend on key order or spacing: SHA-256 of the sorted, compact JSON (first 16 hex)."""
    import hashlib

    from anchorft.runs import config_hash

    cfg = {"b": [1, 2.5, None], "a": {"y": "s", "x": Path("p")}}
    text = '{"a":{"x":"p","y":"s"},"b":[1,2.5,null]}'
    assert config_hash(cfg) == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert config_hash({"a": {"x": "p", "y": "s"}, "b": [1, 2.5, None]}) == config_hash(cfg)


def test_a_failed_run_keeps_its_marker_when_it_wrote_something(tmp_path):
    """A run that fails after writing keeps its folder, marked "failed"; one that wrote nothing leaves nothing."""
    from anchorft.runs import claim_output, fail

    out = tmp_path / "o"
    claim = claim_output(out, "x", {"a": 1})
    (out / "partial.json").write_text("{}")
    fail(claim)
    assert _status(out) == "failed" and (out / "partial.json").is_file()
    empty = tmp_path / "e"
    fail(claim_output(empty, "x", {"a": 1}))
    assert not empty.exists()
