"""Runs never destroy results: a finished run in the output folder survives every bad or stopped launch into it.

Each row of DESTRUCTIVE starts from a folder holding a finished run (its files, its marker) and launches a
command into it (mostly with --overwrite) that must fail; afterwards every byte of the old run is still there.
The concurrent launch, SIGTERM and a user's file in the folder are rows of their own below.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anchorft.cli import main as cli
from anchorft.runs import ASIDE, LOCK, MARKER, claim_output, finish, read_marker

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every file under `out` (the lock file aside: it holds the PID of the last run that locked it)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != LOCK}


def _finished_run(out: Path, command: str = "w2s run", config: dict | None = None) -> dict[str, bytes]:
    """A finished run in `out` (a model folder and a metrics file, as a run writes them); its snapshot."""
    claim = claim_output(out, command, config or {"old": 1})
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "model.safetensors").write_bytes(b"weights of step 2")
    (out / "metrics.json").write_text('{"loss": 0.5}')
    finish(claim)
    return _snapshot(out)


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """Good and bad inputs; the tests run in `tmp_path`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANCHORFT_DEBUG", raising=False)
    (tmp_path / "no_weights").mkdir()
    (tmp_path / "no_weights" / "config.json").write_text("{}")
    (tmp_path / "good.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": \n')
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    return tmp_path


def _offline_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))


W2S_RUN = "anchorft.studies.w2s.experiments.run_experiment"


def _fails_late(exc):
    """A stand-in for w2s's run_experiment: it writes into the folder, then fails (or is interrupted)."""

    def run(config, out, **kw):
        (Path(out) / "metrics.json").write_text('{"new": true}')
        (Path(out) / "alignment.png").write_bytes(b"new plot")
        raise exc

    return run


def _no_work(target: str):
    """A setup that fails the test if the command starts its work (`target`): the input is refused before."""

    def setup(monkeypatch, tmp_path):
        monkeypatch.setattr(target, lambda *a, **k: pytest.fail(f"{target} ran before the input was refused"))

    return setup


NO_TRAIN = _no_work("anchorft.rpsft.train.train")
NO_PRETRAIN = _no_work("anchorft.studies.testbed.compare.pretrained_model")
TRAIN = ["train", "--dataset", "good.jsonl", "--model_name_or_path", "no_weights"]
# (id, argv into folder "out" (which holds a finished run), a piece of the one-line error, exit code, setup)
DESTRUCTIVE = [
    ("train model without weights", [*TRAIN, "--overwrite"], "holds no weights", 2, NO_TRAIN),
    ("train bad dataset", ["train", "--dataset", "bad.jsonl", "--model_name_or_path", "no_weights", "--overwrite"],
     "bad.jsonl:2", 2, NO_TRAIN),
    ("train config typo", [*TRAIN, "--learning_rate", "abc", "--overwrite"], "invalid float value", 2, NO_TRAIN),
    ("data dapo-math offline", ["data", "dapo-math", "--overwrite"], "--source PATH", 2, _offline_hub),
    ("toy compare rank -1", ["toy", "compare", "--preset", "smoke", "--sweep", "anchor_rank=-1", "--overwrite"],
     "anchor_rank must be an integer >= 1", 2, NO_PRETRAIN),
    ("toy compare lambda -1", ["toy", "compare", "--preset", "smoke", "--sweep", "anchor_lambda=-1", "--overwrite"],
     "anchor_lambda must be >= 0", 2, NO_PRETRAIN),
    ("toy compare seed -1", ["toy", "compare", "--preset", "smoke", "--seeds", "-1", "--overwrite"], "seeds", 2,
     NO_PRETRAIN),
    ("w2s empty preset", ["w2s", "run", "--preset", "empty.yaml", "--overwrite"], "is empty", 2, None),
    ("w2s bad override", ["w2s", "run", "--overwrite", "steps=0"], "steps", 2, None),
    ("w2s another run, no --overwrite", ["w2s", "run", "--steps", "3"], "holds another run", 2, None),
    ("w2s fails after writing", ["w2s", "run", "--steps", "3", "--overwrite"], "late failure", 2,
     lambda mp, tmp: mp.setattr(W2S_RUN, _fails_late(ValueError("late failure")))),
    ("w2s interrupted after writing", ["w2s", "run", "--steps", "3", "--overwrite"], "interrupted", 130,
     lambda mp, tmp: mp.setattr(W2S_RUN, _fails_late(KeyboardInterrupt()))),
]  # fmt: skip


@pytest.mark.parametrize("name,argv,expected,code,setup", DESTRUCTIVE, ids=[r[0] for r in DESTRUCTIVE])
def test_a_failed_launch_loses_nothing(name, argv, expected, code, setup, inputs, monkeypatch, capsys):
    out = inputs / "out"
    before = _finished_run(out)
    if setup is not None:
        setup(monkeypatch, inputs)
    rc = cli([*argv, "--out", "out"])
    err = capsys.readouterr().err.strip()
    assert rc == code, err
    assert expected in err and "Traceback" not in err, err
    assert len(err.splitlines()) <= 2, err
    assert _snapshot(out) == before  # every file of the old run, byte for byte
    assert read_marker(out)["status"] == "complete" and read_marker(out)["config"] == {"old": 1}
    assert not (out / ASIDE).exists()


def test_overwrite_replaces_only_when_the_new_run_finishes(inputs, monkeypatch, capsys):
    out = inputs / "out"
    _finished_run(out)

    def finishes(config, out, **kw):
        assert (Path(out) / ASIDE / "metrics.json").read_text() == '{"loss": 0.5}'  # set aside while it runs
        (Path(out) / "metrics.json").write_text("{}")
        return {"diverged": None}

    monkeypatch.setattr("anchorft.studies.w2s.experiments.run_experiment", finishes)
    assert cli(["w2s", "run", "--steps", "3", "--overwrite", "--out", "out"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([LOCK, MARKER, "metrics.json"])
    assert read_marker(out)["files"] == ["metrics.json"]


def test_a_users_file_is_never_deleted(inputs, capsys):
    out = inputs / "out"
    _finished_run(out)
    (out / "my-notes.txt").write_text("mine")
    before = _snapshot(out)
    assert cli(["w2s", "run", "--steps", "3", "--overwrite", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "my-notes.txt" in err and "did not write" in err, err
    assert _snapshot(out) == before


def _child(code: str, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True, **kw)


def test_a_second_launch_into_a_live_run_is_refused(inputs, capsys):
    """The live run holds the folder's lock: the same command again, and an --overwrite, are refused naming the
    PID and host of the live run; its files stay."""
    out = inputs / "out"
    env = {**os.environ, "PYTHONPATH": SRC}
    code = (
        "import sys, time; from anchorft.runs import claim_output; from anchorft.w2s.config import load_config\n"
        "c = load_config('paper', ['steps=3'])\n"
        f"claim_output({str(out)!r}, 'w2s run', {{**c.to_dict(), 'ode': False}})\n"
        f"open({str(out / 'partial.json')!r}, 'w').write('{{}}'); print('ready', flush=True); time.sleep(120)"
    )
    live = _child(code, env, stdout=subprocess.PIPE)
    try:
        assert live.stdout.readline().strip() == "ready"
        before = _snapshot(out)
        for extra in ([], ["--overwrite"], ["--overwrite", "steps=4"]):
            assert cli(["w2s", "run", "--steps", "3", "--out", "out", *extra]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1, err
            assert f"PID {live.pid} on {socket.gethostname()}" in err and "in use by a live run" in err, err
        assert _snapshot(out) == before
    finally:
        live.kill()
        live.wait()
    assert cli(["w2s", "run", "--steps", "3", "--out", "out", "--overwrite", "--quiet"]) == 0  # the lock went with it


def test_sigterm_marks_interrupted_restores_and_cleans_the_cache(inputs, children):
    """SIGTERM (SLURM, Kubernetes) during an --overwrite: exit 143, the old run back, no NAME.tmpPID in the cache.
    The signal is sent once the loop provably runs: its temporary folder exists and the bar has counted a step."""
    out = inputs / "out"
    before = _finished_run(out, "toy pretrain")
    cache = inputs / "cache"
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "ANCHORFT_CACHE": str(cache)}
    argv = ["toy", "pretrain", "--preset", "smoke", "--steps", "100000", "--overwrite", "--out", str(out)]
    p = children.start([sys.executable, "-m", "anchorft", *argv], env=env, stderr=subprocess.PIPE, text=True)
    err = children.read_stderr(p)
    stepped = re.compile(r"toy pretrain:.*\b[1-9]\d*/100000")
    children.wait_until(
        p, lambda: list((cache / "toy").glob("*.tmp*")) and stepped.search("".join(err)), 240, lambda: "".join(err)
    )
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    took = time.monotonic() - t0
    text = "".join(err)
    assert p.returncode == 143, text[-2000:]
    assert took < 10, took  # one step and the clean-up
    assert "terminated" in text.strip().splitlines()[-1] and "Traceback" not in text
    assert not list((cache / "toy").glob("*.tmp*"))
    assert _snapshot(out) == before and read_marker(out)["status"] == "complete"


def test_sigterm_marks_a_new_run_interrupted(inputs):
    out = inputs / "w"
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    code = (
        "import os, signal, sys\nimport anchorft.studies.w2s.experiments as ex\n"
        "def run(config, out, **kw):\n    open(os.path.join(out, 'metrics.json'), 'w').write('{}')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n    raise SystemExit('SIGTERM not handled')\n"
        "ex.run_experiment = run\nfrom anchorft.cli import main\n"
        f"sys.exit(main(['w2s', 'run', '--steps', '3', '--out', {str(out)!r}]))"
    )
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 143, p.stderr[-2000:]
    assert len(p.stderr.strip().splitlines()) == 1 and "marked incomplete" in p.stderr
    assert read_marker(out)["status"] == "interrupted" and read_marker(out)["files"] == ["metrics.json"]


def test_a_signal_while_the_old_run_is_set_aside_puts_it_back(inputs, monkeypatch):
    out = inputs / "out"
    before = _finished_run(out)
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(1)
        if len(calls) == 2:  # the second entry of the old run: SIGTERM arrives
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        claim_output(out, "w2s run", {"new": 1}, overwrite=True)
    monkeypatch.setattr(os, "replace", real)
    assert _snapshot(out) == before and not (out / ASIDE).exists()
    assert claim_output(out, "w2s run", {"old": 1}).complete  # and the folder is not left locked
