"""Output folders: checked first, claimed with a run marker; the same run is reused or resumed, another refused."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from anchorft.cli import main as cli
from anchorft.errors import UsageError
from anchorft.io import new_file_mode, write_json
from anchorft.runs import MARKER, claim_output, finish, mark_active, read_marker


def _status(out: Path) -> str:
    return json.loads((out / MARKER).read_text())["status"]


def test_claim_new_same_other_and_overwrite(tmp_path):
    out = tmp_path / "run"
    c = claim_output(out, "w2s run", {"a": 1})
    assert not c.resume and _status(out) == "running"
    (out / "metrics.json").write_text("{}")
    mark_active("interrupted")
    assert _status(out) == "interrupted"
    c = claim_output(out, "w2s run", {"a": 1})  # same run, stopped: resume
    assert c.resume and not c.complete
    finish(c)
    c = claim_output(out, "w2s run", {"a": 1})  # same run, finished: reused, marker left as it was
    assert c.resume and c.complete and _status(out) == "complete"
    with pytest.raises(UsageError, match="holds another run"):
        claim_output(out, "w2s run", {"a": 2})
    with pytest.raises(UsageError, match="holds another run"):
        claim_output(out, "w2s sweep", {"a": 1})
    c = claim_output(out, "w2s run", {"a": 2}, overwrite=True)
    visible = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert not c.resume and visible == [MARKER]  # the old outputs are set aside
    mark_active("failed")  # ... and come back when the new run fails
    assert (out / "metrics.json").exists() and _status(out) == "complete"
    assert read_marker(out)["config"] == {"a": 1} and read_marker(out)["files"] == ["metrics.json"]
    c = claim_output(out, "w2s run", {"a": 2}, overwrite=True)
    (out / "new.json").write_text("{}")
    finish(c)  # the new run finished: the old one is gone
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [MARKER, "new.json"]
    (out / "new.json").unlink()
    # a run that stopped before writing anything does not hold the folder
    assert not claim_output(out, "w2s run", {"a": 3}).resume
    mark_active("failed")


def test_folder_not_written_by_anchorft(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    for overwrite in (False, True):
        with pytest.raises(UsageError, match="not empty"):
            claim_output(tmp_path / "mine", "eval", {}, overwrite=overwrite)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    (tmp_path / "empty").mkdir()
    assert not claim_output(tmp_path / "empty", "eval", {}).resume
    mark_active("failed")


def test_atomic_writes_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        assert new_file_mode() == 0o640
        write_json(tmp_path / "m.json", {"a": 1})
        assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


W2S = ["w2s", "run", "--preset", "paper", "--n-seeds", "1", "--steps", "4", "--quiet", "d=32", "s=4"]
W2S += ["group_sizes=4,4", "weak_neurons=4", "batch_size=4", "n_log=2", "chunk=4"]


def test_w2s_run_claims_its_folder_once(tmp_path, monkeypatch):
    """The command claims the folder and the experiment works inside that claim (no second marker write); the
    library entry alone claims it itself."""
    import anchorft.runs as runs
    import anchorft.studies.w2s.experiments as ex

    calls = []
    real = runs.claim_output

    def counted(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(runs, "claim_output", counted)  # the one claim of both: `runs.run_claimed`
    assert cli([*W2S, "--out", str(tmp_path / "a")]) == 0
    assert calls == ["w2s run"] and _status(tmp_path / "a") == "complete"
    from anchorft.w2s.config import load_config

    small = ["d=32", "s=4", "group_sizes=4,4", "weak_neurons=4", "steps=4", "n_seeds=1", "batch_size=4", "n_log=2"]
    ex.run_experiment(load_config("paper", [*small, "chunk=4"]), tmp_path / "b", progress=False)
    assert calls == ["w2s run", "w2s run"] and _status(tmp_path / "b") == "complete"


def test_w2s_run_rerun(tmp_path, capsys, monkeypatch):
    out = tmp_path / "w"
    assert cli([*W2S, "--out", str(out)]) == 0
    assert _status(out) == "complete"
    first = (out / "metrics.json").read_bytes()
    import anchorft.studies.w2s.experiments as ex

    monkeypatch.setattr(ex, "run_experiment", lambda *a, **k: pytest.fail("a finished run was run again"))
    capsys.readouterr()
    assert cli([*W2S, "--out", str(out)]) == 0
    assert "already holds this finished run" in capsys.readouterr().out
    assert cli([*W2S, "rho=0.5", "--out", str(out)]) == 2
    assert "holds another run" in capsys.readouterr().err
    assert (out / "metrics.json").read_bytes() == first
    monkeypatch.undo()
    assert cli([*W2S, "rho=0.5", "--out", str(out), "--overwrite"]) == 0
    assert (out / "metrics.json").read_bytes() != first


def test_toy_compare_command_resumes_the_same_comparison(tmp_path, monkeypatch, capsys):
    import anchorft.studies.testbed.compare as compare

    calls = []

    def fake(cfg, out, methods=None, sweep=None, workers=1, resume=False, cluster=None):
        calls.append(resume)
        (Path(out) / "results.json").write_text("{}")

    monkeypatch.setattr(compare, "run_compare", fake)
    out = str(tmp_path / "c")
    argv = ["toy", "compare", "--preset", "smoke", "--out", out, "--methods", "sft"]
    monkeypatch.setattr("anchorft.runs.finish", lambda claim: None)  # as if stopped part-way
    assert cli(argv) == 0 and cli(argv) == 0
    assert calls == [False, True]
    assert cli([*argv[:-1], "l2"]) == 2  # another selection of methods: refused
    assert "holds another run" in capsys.readouterr().err


def test_second_demo_reuses_the_first(tmp_path, monkeypatch, capsys):
    import anchorft.studies.testbed.compare as compare
    import anchorft.studies.w2s.experiments as ex
    from anchorft import demo

    calls = {"w2s": 0, "toy": 0}

    def fake_w2s(config, out, progress=True, header=None, **kw):
        calls["w2s"] += 1
        Path(out, "metrics.json").write_text("{}")
        return {"diverged": None}

    def fake_toy(cfg, out, **kw):
        calls["toy"] += 1
        Path(out, "results.json").write_text("{}")

    monkeypatch.setattr(ex, "run_experiment", fake_w2s)
    monkeypatch.setattr(compare, "run_compare", fake_toy)
    monkeypatch.setattr(demo, "_announce_toy", lambda preset: None)
    for _ in range(2):
        assert demo.main(["--out", str(tmp_path / "demo"), "--toy-preset", "smoke"]) == 0
    assert calls == {"w2s": 1, "toy": 1}
    assert capsys.readouterr().out.count("already holds this finished run") == 2


def test_testbed_cache_is_per_user_not_per_directory(tmp_path, monkeypatch):
    from platformdirs import user_cache_dir

    from anchorft.toy.pretrain import cache_root

    monkeypatch.delenv("ANCHORFT_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cache_root() == Path(user_cache_dir("anchorft")) / "toy" and cache_root().is_absolute()
    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c" / "toy"


def _fake(calls: list, out_of, result=None, name: str = "result.json"):
    """A stand-in for a command's work: counts its calls, writes a file into the folder `out_of(args, kwargs)`."""

    def fake(*a, **k):
        calls.append(1)
        out = Path(out_of(a, k))
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("{}")
        return result if result is not None else {}

    return fake


def _fake_pretrained(calls: list):
    def fake(cfg, progress=True):
        calls.append(1)
        src = Path(f"cache{len(calls)}")
        src.mkdir()
        (src / "metrics.json").write_text(json.dumps({"params": 1, "greedy_accuracy": {}}))
        return src

    return fake


_SECOND = lambda a, k: a[1]  # noqa: E731
_THIRD = lambda a, k: a[2]  # noqa: E731
_FIRST = lambda a, k: a[0]  # noqa: E731
# (argv writing folder "out", the argument pair that makes it another run, module, function, its stand-in)
RERUNS = [
    (["toy", "pretrain", "--preset", "smoke"], ["--seed", "7"], "anchorft.toy.pretrain", "pretrained_model",
     _fake_pretrained),
    (["toy", "rl", "--compare", "cmp"], ["--seed", "3"], "anchorft.studies.testbed.rl_stage", "run_rl_stage",
     lambda c: _fake(c, _SECOND)),
    (["w2s", "sweep", "--kind", "ablation", "--quick"], ["--kind", "race"], "anchorft.studies.w2s.sweeps", "run_sweep",
     lambda c: _fake(c, _SECOND, {"rows": []}, "table.md")),
    (["w2s", "sweep", "--kind", "chi", "--quick"], ["--kind", "overlap"], "anchorft.studies.w2s.sweeps", "run_sweep",
     lambda c: _fake(c, _SECOND)),
    (["eval", "--model", "model", "--bench", "good.jsonl"], ["--seed", "1"], "anchorft.eval.runner", "run_eval",
     lambda c: _fake(c, _THIRD)),
    (["rl", "--model", "model", "--dataset", "good.jsonl"], ["--limit", "1"], "anchorft.rpsft.rl", "run_rl",
     lambda c: _fake(c, _THIRD, {"reward_first": 0.0, "reward_last": 0.0})),
    (["data", "openr1-math", "--source", "good.jsonl"], ["--limit", "1"], "anchorft.data.release",
     "prepare_release_set", lambda c: _fake(c, _FIRST)),
    (["data", "dapo-math", "--source", "good.jsonl"], ["--limit", "1"], "anchorft.data.dapo", "prepare_dapo_math",
     lambda c: _fake(c, _FIRST)),
    (["analyze", "--base", "model"], ["--seed", "1"], "anchorft.analysis.run", "run_analysis",
     lambda c: _fake(c, lambda a, k: a[0].out, {"rank": 1, "rotation": {}, "figures": []})),
]  # fmt: skip


@pytest.mark.parametrize("argv,other,module,func,make", RERUNS, ids=[" ".join(r[0][:4]) for r in RERUNS])
def test_rerun_of_every_folder_writing_command(argv, other, module, func, make, tmp_path, monkeypatch, capsys):
    """The same command again reuses the finished run (no work done); another run into the folder is refused
    (exit 2, one line) unless --overwrite, which runs it. (train, toy compare / report, w2s run, eval suite and
    the demo: their own rerun tests.)"""
    import importlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANCHORFT_DEBUG", raising=False)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "good.jsonl").write_text('{"prompt": "a", "completion": "b", "answer": "1"}\n')
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "results.json").write_text(json.dumps({"methods": {}}))
    calls: list = []
    mod = importlib.import_module(module)  # the stand-in keeps the function's signature (a parser reads its defaults)
    monkeypatch.setattr(mod, func, functools.update_wrapper(make(calls), getattr(mod, func)))
    argv = [*argv, "--out", "out"]
    assert cli(argv) == 0 and len(calls) == 1
    assert _status(tmp_path / "out") == "complete"
    capsys.readouterr()
    assert cli(argv) == 0 and len(calls) == 1  # reused, nothing run
    assert "already holds this finished run" in capsys.readouterr().out
    if other[0] in argv:  # replace the flag's value
        i = argv.index(other[0])
        changed = [*argv[:i], *other, *argv[i + 2 :]]
    else:
        changed = [*argv, *other]
    assert cli(changed) == 2 and len(calls) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds another run" in err and "--overwrite" in err, err
    assert cli([*changed, "--overwrite"]) == 0 and len(calls) == 2
    assert _status(tmp_path / "out") == "complete"


def test_a_claim_that_fails_keeps_its_error_when_another_launch_took_the_new_folder(tmp_path, monkeypatch):
    """The claim made the folder and fails; before it removes the folder another launch locks it (its lock file
    inside). The folder stays for that launch, and the first error is the one raised (not rmdir's OSError)."""
    from anchorft import runs

    unlock = runs._unlock

    def unlock_then_another_launch(out, remove=False):
        unlock(out, remove)
        (out / runs.LOCK).write_text("another launch")

    def refuse(*args, **kwargs):
        raise ValueError("refused")

    monkeypatch.setattr(runs, "_claim_locked", refuse)
    monkeypatch.setattr(runs, "_unlock", unlock_then_another_launch)
    with pytest.raises(ValueError, match="^refused$"):
        claim_output(tmp_path / "new", "test", {})
    assert (tmp_path / "new" / runs.LOCK).read_text() == "another launch"


def test_a_refused_rerun_names_the_fields_that_differ(tmp_path, capsys):
    from anchorft.runs import config_diff

    assert config_diff({"a": 1, "p": {"s": 2, "t": 3}}, {"a": 1, "p": {"s": 5, "t": 3}, "n": None}) == (
        "n: (unset) -> null; p.s: 2 -> 5"
    )
    assert config_diff({"a": 1}, {"a": 1}) == "another config" and config_diff(None, {"a": 1}) == "another config"
    many = config_diff({f"k{i}": i for i in range(6)}, {f"k{i}": -i for i in range(1, 6)} | {"k0": 9})
    assert many.endswith("; 2 more") and many.count("->") == 4
    out = tmp_path / "w"
    assert cli([*W2S, "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli([*W2S, "rho=0.5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds another run ('w2s run' with rho: 0.3 -> 0.5)" in err and len(err.strip().splitlines()) == 1, err
