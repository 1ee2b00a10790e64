"""The grid runner (`anchorft.studies.grid`): each cell once, recorded as it finishes, resumed after a stop with no
cell lost or repeated, on its pinned thread count, in one process or in spawned workers."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from anchorft.errors import CellLost
from anchorft.studies.grid import RECORD, Cell, Grid, InProcess, LocalProcesses, Lost, executor_for


def square(cell: Cell) -> dict:
    """A cell function (top level: spawned workers import it): the value, and the torch threads it ran on."""
    return {"y": cell.spec["x"] ** 2, "threads": torch.get_num_threads()}


def _cells(n: int = 4) -> list[Cell]:
    return [Cell(f"x{i}", {"x": i}) for i in range(n)]


def test_every_cell_runs_once_in_order_on_its_pinned_threads(tmp_path):
    before = torch.get_num_threads()
    got = Grid(tmp_path, context={"study": 1}).run(_cells(), square, InProcess(threads=2), progress=False)
    assert list(got) == ["x0", "x1", "x2", "x3"] and [r["y"] for r in got.values()] == [0, 1, 4, 9]
    assert {r["threads"] for r in got.values()} == {2} and torch.get_num_threads() == before
    lines = (tmp_path / RECORD).read_text().splitlines()
    assert [json.loads(x)["name"] for x in lines] == ["x0", "x1", "x2", "x3"]


def test_a_stopped_grid_resumes_without_losing_or_repeating_a_cell(tmp_path):
    calls: list[str] = []

    def stop_after_two(cell: Cell) -> dict:
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C in the third cell
        calls.append(cell.name)
        return square(cell)

    grid = Grid(tmp_path, context="same")
    with pytest.raises(KeyboardInterrupt):
        grid.run(_cells(), stop_after_two, progress=False)
    assert calls == ["x0", "x1"] and len(grid.finished()) == 2

    def counted(cell: Cell) -> dict:
        calls.append(cell.name)
        return square(cell)

    seen = []
    got = grid.run(_cells(), counted, progress=False, on_result=lambda c, r: seen.append(c.name))
    assert calls == ["x0", "x1", "x2", "x3"]  # each cell ran exactly once over the two runs
    assert sorted(seen) == ["x0", "x1", "x2", "x3"]  # the recorded ones reported too
    assert [r["y"] for r in got.values()] == [0, 1, 4, 9]
    assert len((tmp_path / RECORD).read_text().splitlines()) == 4


def test_records_of_another_context_a_changed_cell_or_a_torn_line_are_not_reused(tmp_path):
    Grid(tmp_path, context="a").run(_cells(2), square, progress=False)
    with open(tmp_path / RECORD, "a") as f:
        f.write('{"key": "x", "na')  # a line cut short by a kill
    assert len(Grid(tmp_path, context="a").finished()) == 2
    ran = []

    def counted(cell):
        ran.append(cell.name)
        return square(cell)

    Grid(tmp_path, context="b").run(_cells(2), counted, progress=False)  # another config: every cell again
    assert ran == ["x0", "x1"]
    Grid(tmp_path, context="b").run([Cell("x0", {"x": 5}), Cell("x1", {"x": 1})], counted, progress=False)
    assert ran == ["x0", "x1", "x0"]  # only the cell whose spec changed
    ran.clear()
    Grid(tmp_path, context="b").run(_cells(2), counted, progress=False, resume=False)  # a fresh record
    assert ran == ["x0", "x1"]


@pytest.mark.slow
def test_a_recorded_cell_that_no_longer_stands_runs_again(tmp_path):
    """`kept(cell, result)` rejects a recorded cell (its outputs gone, say): that cell runs again, the others not."""
    grid = Grid(tmp_path, context={"study": 1})
    grid.run(_cells(3), square, progress=False)
    calls: list[str] = []

    def counted(cell: Cell) -> dict:
        calls.append(cell.name)
        return square(cell)

    got = grid.run(_cells(3), counted, progress=False, kept=lambda c, r: c.name != "x1")
    assert calls == ["x1"] and [r["y"] for r in got.values()] == [0, 1, 4]


def test_spawned_workers_give_what_one_process_gives(tmp_path):
    """Two spawned workers, each cell on one thread: the same results as in process (slow: spawning imports torch)."""
    fn = functools.partial(square)
    a = Grid(tmp_path / "a").run(_cells(), fn, InProcess(threads=1), progress=False)
    b = Grid(tmp_path / "b").run(_cells(), fn, LocalProcesses(workers=2, threads=1), progress=False)
    assert a == b


def mark_and_wait(folder: str, cell: Cell) -> dict:
    """A cell function for spawned workers: says it started (a file), then takes a second."""
    import pathlib
    import time

    pathlib.Path(folder, cell.name).touch()
    time.sleep(1.0)
    return {"y": cell.spec["x"]}


def test_a_stop_in_spawned_workers_drops_the_queued_cells(tmp_path):
    """Stopped at the first result (a signal at the grid's safe point), the spawned workers finish the cells they
    run and start no other: the queued ones are dropped, not run unrecorded until the whole grid is done."""
    started = tmp_path / "started"
    started.mkdir()

    def stop_at_first(cell: Cell, result: dict) -> None:
        raise KeyboardInterrupt

    grid = Grid(tmp_path / "grid")
    fn = functools.partial(mark_and_wait, str(started))
    with pytest.raises(KeyboardInterrupt):
        grid.run(_cells(20), fn, LocalProcesses(workers=2, threads=1), progress=False, on_result=stop_at_first)
    assert len(grid.finished()) == 1
    assert len(list(started.iterdir())) <= 8  # of 20: the 2 running and the few the pool had handed out


class LosesSome:
    """An executor that loses the cells named in `lose` (as a cluster does with a dead node, after its retries)."""

    def __init__(self, lose: set[str]):
        self.lose = lose

    def map(self, fn, cells):
        for cell in cells:
            yield cell, Lost("lost after 2 retries (NodeDiedError: gone)") if cell.name in self.lose else fn(cell)


def test_lost_cells_are_recorded_as_failed_the_others_run_and_a_rerun_runs_only_the_lost(tmp_path):
    grid = Grid(tmp_path, context="c")
    seen: list[str] = []
    with pytest.raises(CellLost) as err:
        grid.run(_cells(), square, LosesSome({"x1", "x3"}), progress=False, on_result=lambda c, r: seen.append(c.name))
    assert str(err.value).startswith("cell x1 and 1 more (x3) lost after 2 retries (NodeDiedError: gone)")
    assert "\n" not in str(err.value) and seen == ["x0", "x2"]
    lines = [json.loads(x) for x in (tmp_path / RECORD).read_text().splitlines()]
    assert [(x["name"], "result" in x, x.get("failed", "")[:10]) for x in lines] == [
        ("x0", True, ""), ("x1", False, "lost after"), ("x2", True, ""), ("x3", False, "lost after")
    ]  # fmt: skip
    assert len(grid.finished()) == 2  # a failed line is no result

    calls: list[str] = []

    def counted(cell: Cell) -> dict:
        calls.append(cell.name)
        return square(cell)

    got = grid.run(_cells(), counted, progress=False)
    assert calls == ["x1", "x3"] and [r["y"] for r in got.values()] == [0, 1, 4, 9]


def test_bad_settings_fail_at_once(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        Grid(tmp_path).run([Cell("a"), Cell("a")], square, progress=False)
    with pytest.raises(ValueError, match="workers"):
        executor_for(0)
    with pytest.raises(ValueError, match="workers and threads"):
        LocalProcesses(workers=2, threads=0)
    assert isinstance(executor_for(1, 3), InProcess) and isinstance(executor_for(2), LocalProcesses)


def cell_of_kind(folder: str, cell: Cell) -> dict:
    """A cell function for spawned workers: says it started (a file), then "quick" returns, "sleep" takes 2 s with
    no safe point (it finishes after a signal), "loop" runs 20 s of steps, each a safe point (it stops at one)."""
    import pathlib
    import time

    from anchorft import stop

    pathlib.Path(folder, cell.name).touch()
    if cell.spec["kind"] == "sleep":
        time.sleep(2.0)
    elif cell.spec["kind"] == "loop":
        for _ in range(400):
            stop.check()
            time.sleep(0.05)
    return {"kind": cell.spec["kind"]}


def _kinds_cells() -> list[Cell]:
    return [Cell("q", {"kind": "quick"}), Cell("s", {"kind": "sleep"}), Cell("l", {"kind": "loop"})] + [
        Cell(f"l{i}", {"kind": "loop"}) for i in range(6)
    ]


def test_a_signal_stops_the_workers_promptly_and_records_every_cell_that_finished(tmp_path):
    """SIGTERM to the parent with both workers mid-cell: the queued cells never start, the running ones are told to
    stop (the looping cell stops at its next safe point), the cell that finishes after the signal is recorded, and
    the study raises the signal within seconds."""
    import os
    import signal
    import threading
    import time

    from anchorft import stop

    started = tmp_path / "started"
    started.mkdir()
    fired: list[float] = []

    def fire() -> None:
        while not ((started / "s").exists() and (started / "l").exists()):
            time.sleep(0.02)
        fired.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    grid = Grid(tmp_path / "grid")
    fn = functools.partial(cell_of_kind, str(started))
    restore = stop.install()
    try:
        threading.Thread(target=fire, daemon=True).start()
        with pytest.raises(stop.Terminated):
            grid.run(_kinds_cells(), fn, LocalProcesses(workers=2, threads=1), progress=False)
        took = time.monotonic() - fired[0]
    finally:
        restore()
        stop.clear()
    names = {json.loads(line)["name"] for line in grid.path.read_text().splitlines()}
    assert names == {"q", "s"}  # finished before the signal, and after it (its worker had no safe point)
    assert {p.name for p in started.iterdir()} == {"q", "s", "l"}  # no queued cell started
    assert took < 10, took  # "s" ends 2 s after it started; "l" at its next step


GROUP_SCRIPT = """
import functools, sys
from anchorft import stop
from anchorft.studies.grid import Grid, LocalProcesses
from test_grid import _kinds_cells, cell_of_kind
stop.install()
try:
    Grid(sys.argv[1]).run(_kinds_cells(), functools.partial(cell_of_kind, sys.argv[2]), LocalProcesses(2, 1),
                          progress=False)
except stop.Terminated:
    sys.exit(143)
"""


def test_a_signal_to_the_whole_process_group_stops_parent_and_workers(tmp_path, children):
    """SLURM's `scancel --signal=TERM` and Ctrl-C reach every process of the group: the workers (their handler is the
    pool's initializer) stop their cells as cleanly as when the parent tells them; no worker is left."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    started = tmp_path / "started"
    started.mkdir()
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1] / "src")])}
    p = children.start([sys.executable, "-c", GROUP_SCRIPT, str(tmp_path / "grid"), str(started)], env=env,
                       stderr=subprocess.PIPE, text=True)  # fmt: skip
    err = children.read_stderr(p)
    children.wait_until(p, lambda: (started / "s").exists() and (started / "l").exists(), 120, lambda: "".join(err))
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGTERM)
    assert p.wait(timeout=30) == 143, "".join(err)[-2000:]
    assert time.monotonic() - t0 < 10
    text = "".join(err)
    assert "Traceback" not in text, text[-2000:]
    names = {json.loads(line)["name"] for line in (tmp_path / "grid" / RECORD).read_text().splitlines()}
    assert names == {"q", "s"}
    left = ""
    for _ in range(50):  # the group empties (multiprocessing's resource tracker leaves when the parent's pipe closes)
        left = subprocess.run(["ps", "-o", "pid,args", "-g", str(p.pid)], capture_output=True, text=True).stdout
        if len(left.strip().splitlines()) <= 1:
            break
        time.sleep(0.1)
    assert len(left.strip().splitlines()) <= 1, left  # no worker outlived the study
