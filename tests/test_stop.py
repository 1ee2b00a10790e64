"""`anchorft.stop`: a signal is recorded as well as raised, so that one swallowed by library code (a bare
`except:`) still stops the run at the next safe point, marked interrupted, exit 143 (130 for Ctrl-C).

The signal is sent to this process (os.kill) from inside code that swallows what the handler raises; the command
runs in this process (cli.main installs the handler and puts the old one back). `anchorft train`'s points (the
datasets' tokenization, model loading, a training step, the report, two processes) are in
tests/rpsft/test_train_signals.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import types

import pytest

from anchorft import stop
from anchorft.cli import COMMANDS, Terminated
from anchorft.cli import main as cli
from anchorft.runs import ASIDE, LOCK, claim_output, finish, mark_active, read_marker


@pytest.fixture(autouse=True)
def _fresh():
    stop.clear()
    yield
    stop.clear()


def _sigterm_swallowed(fired: list) -> None:
    """SIGTERM to this process, and the exception its handler raises swallowed, as a bare `except:` would."""
    fired.append(True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except:  # noqa: E722 - the library code this stands for
        pass


def test_the_record_raises_at_a_check_and_the_cli_reexports_terminated():
    assert Terminated is stop.Terminated and issubclass(Terminated, KeyboardInterrupt)
    stop.check()  # nothing recorded: nothing happens
    stop.record(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as e:
        stop.check(agree=True)  # in a single process, the agreement is this process's record
    assert not isinstance(e.value, Terminated)
    stop.record(signal.SIGTERM)
    stop.record(signal.SIGINT)  # SIGTERM, the stronger, is kept
    with pytest.raises(Terminated):
        stop.check_alone()
    stop.clear()
    stop.check()


def test_the_handler_only_records_in_a_group_of_processes(monkeypatch):
    """Raising mid-collective on one rank would leave the others waiting: in a group the handler only records."""
    restore = stop.install()
    try:
        monkeypatch.setattr(stop, "distributed", lambda: object())
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested() == signal.SIGTERM
        monkeypatch.setattr(stop, "distributed", lambda: None)
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is not stop._handler


class _GroupOfTwo:
    """`torch.distributed` as a rank of a 2-process group sees it: the all-reduce writes the other rank's value
    into the MAX, then runs `after` (a signal landing on this rank just after the reduction)."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, other: int, after=lambda: None):
        self.other, self.after = other, after

    def get_backend(self) -> str:
        return "gloo"

    def all_reduce(self, flag, op) -> None:
        assert op == self.ReduceOp.MAX
        flag.clamp_(min=self.other)
        self.after()


def test_ranks_stop_on_the_value_they_agreed_even_when_a_signal_lands_after_it(monkeypatch):
    """A rank's answer is the reduction's, the same on every rank: a SIGTERM recorded on one rank just after the
    all-reduce must not stop that rank alone (the other, told 0, would run its next step and wait for it in the
    gradient all-reduce for ever). The late signal stays recorded and stops both at the next agreement."""
    monkeypatch.setattr(stop, "distributed", lambda: _GroupOfTwo(other=0, after=lambda: stop.record(signal.SIGTERM)))
    assert stop.agreed("cpu") == 0  # what the other rank was told too: the group goes on together
    assert stop.requested() == signal.SIGTERM  # kept for the next agreement
    monkeypatch.setattr(stop, "distributed", lambda: _GroupOfTwo(other=0))
    with pytest.raises(Terminated):  # the next step's end: both ranks told SIGTERM
        stop.check(agree=True)
    stop.clear()
    monkeypatch.setattr(stop, "distributed", lambda: _GroupOfTwo(other=signal.SIGINT))
    assert stop.agreed("cpu") == signal.SIGINT and stop.requested() == signal.SIGINT  # the other rank's, recorded


def test_finish_refuses_to_mark_a_stopped_run_complete(tmp_path):
    out = tmp_path / "out"
    old = claim_output(out, "w2s run", {"old": 1})
    (out / "metrics.json").write_text('{"old": true}')
    finish(old)
    claim = claim_output(out, "w2s run", {"new": 1}, overwrite=True)
    (out / "metrics.json").write_text('{"new": true}')
    stop.record(signal.SIGTERM)
    with pytest.raises(Terminated):
        finish(claim)
    assert (out / ASIDE).is_dir() and read_marker(out)["status"] == "running"
    mark_active("interrupted")  # what cli.main does next: the old run is back
    assert json.loads((out / "metrics.json").read_text()) == {"old": True} and read_marker(out)["status"] == "complete"


def test_a_run_swallowing_the_signal_is_not_marked_complete(tmp_path, monkeypatch, capsys):
    """`anchorft.runs.finish`, the net of every command that claims a folder: a run whose work swallowed SIGTERM and
    returned normally exits 143, marked interrupted."""
    import anchorft.studies.w2s.experiments as ex

    fired: list = []

    def run(config, out, **kw):
        (tmp_path / "w" / "metrics.json").write_text("{}")
        _sigterm_swallowed(fired)
        return {"diverged": None}

    monkeypatch.setattr(ex, "run_experiment", run)
    monkeypatch.chdir(tmp_path)
    assert cli(["w2s", "run", "--steps", "3", "--out", "w", "--quiet"]) == 143
    assert fired and "w2s run: terminated" in capsys.readouterr().err
    assert read_marker(tmp_path / "w")["status"] == "interrupted" and stop.requested() == 0  # cleared for the next


def test_a_command_that_returns_after_swallowing_the_signal_exits_143(monkeypatch, capsys):
    """The last net, `anchorft.cli.main` after the command returns (a command that claims no folder)."""
    fired: list = []
    module = types.ModuleType("anchorft_probe_command")
    module.main = lambda argv: _sigterm_swallowed(fired) or 0
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(COMMANDS, "probe", (module.__name__, "a command of this test"))
    assert cli(["probe"]) == 143
    assert fired and "anchorft probe: terminated" in capsys.readouterr().err


def _bench(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"{i}+{i}?"}], "reward_model": {"ground_truth": 2 * i}}
            for i in range(3)]  # fmt: skip
    f = tmp_path / "bench.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_eval_stops_during_generation_and_keeps_the_old_run(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """`anchorft eval --overwrite`: SIGTERM swallowed as generation starts; the per-token safe point stops it, exit
    143, and the old run is back byte for byte."""
    import anchorft.eval.hf_backend as hf

    out = tmp_path / "out"
    old = claim_output(out, "eval", {"old": 1})
    (out / "metrics.json").write_text('{"old": true}')
    finish(old)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != LOCK}
    real, fired = hf.decode, []

    def decode(*a, **k):
        if not fired:
            _sigterm_swallowed(fired)
        return real(*a, **k)

    monkeypatch.setattr(hf, "decode", decode)
    argv = ["eval", "--model", str(tiny_model_dir), "--bench", str(_bench(tmp_path)), "--n", "2", "--k", "2"]
    assert cli([*argv, "--max_new_tokens", "3", "--out", str(out), "--backend", "hf", "--overwrite"]) == 143
    assert fired and "anchorft eval: terminated" in capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != LOCK}
    assert (
        after == before
        and not (out / ASIDE).exists()
        and sorted(p.name for p in out.iterdir()) == sorted([*before, LOCK])
    )
