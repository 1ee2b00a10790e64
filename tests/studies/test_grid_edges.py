"""The grid runner's smaller rules (`anchorft.studies.grid`): the executor each setting builds, what a record line
holds when a result is not plain JSON, a fresh record in a folder that does not exist yet, what `kept` and
`on_result` are handed for a recorded cell, the words of a lost cell's error, and a pool that leaves no process
behind. Written for the mutants `make mutants` left alive in the module (docs/testing.md)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from anchorft.errors import CellLost
from anchorft.studies import grid as g
from anchorft.studies.grid import RECORD, Cell, Grid, InProcess, LocalProcesses, Lost, executor_for


def square(cell: Cell) -> dict:
    """A cell function (top level: spawned workers import it)."""
    return {"y": cell.spec["x"] ** 2}


def started_by(cell: Cell) -> dict:
    """How the worker process was started (top level: spawned workers import it)."""
    return {"method": mp.get_start_method(allow_none=True), "parent_set": g.__dict__.get("_TEST_MARK", "unset")}


def slow_pid(cell: Cell) -> dict:
    """The worker's process id, after a pause long enough for a second worker to take the next cell."""
    time.sleep(0.3)
    return {"pid": os.getpid()}


def _cells(n: int = 3) -> list[Cell]:
    return [Cell(f"x{i}", {"x": i}) for i in range(n)]


def test_executor_for_builds_the_executor_each_setting_names():
    assert executor_for(1, 3) == InProcess(3)
    assert executor_for(2, 3) == LocalProcesses(2, 3)
    cluster = object()  # a stand-in: a real RayCluster needs Ray installed
    ray = executor_for(4, 3, cluster)
    assert type(ray) is g.RayTasks and ray.cluster is cluster and ray.threads == 3
    for args, msg in (((0, 1), "workers: must be >= 1, got 0"), ((1, 0), "threads: must be >= 1, got 0")):
        with pytest.raises(ValueError) as e:
            executor_for(*args)
        assert str(e.value) == msg
    assert LocalProcesses(1, 1).workers == 1  # one spawned worker is a valid pool
    with pytest.raises(ValueError):
        LocalProcesses(0, 1)


def test_a_result_that_is_not_plain_json_is_recorded_as_text(tmp_path):
    got = Grid(tmp_path).run([Cell("a")], lambda c: {"path": Path("out") / "model", "n": 1}, progress=False)
    assert got["a"]["path"] == Path("out") / "model"  # this run hands the value itself on
    (line,) = (tmp_path / RECORD).read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["result"] == {"path": str(Path("out") / "model"), "n": 1}


def test_a_fresh_record_in_a_folder_that_does_not_exist_yet(tmp_path):
    folder = tmp_path / "a" / "b"
    got = Grid(folder).run(_cells(), square, progress=False, resume=False)  # nothing recorded to remove
    assert [r["y"] for r in got.values()] == [0, 1, 4] and len((folder / RECORD).read_text().splitlines()) == 3


def test_kept_and_on_result_are_handed_the_recorded_cell_and_its_result(tmp_path):
    grid = Grid(tmp_path, context="c")
    grid.run(_cells(), square, progress=False)
    asked, seen = [], []

    def kept(cell: Cell, result: dict) -> bool:
        asked.append((cell.name, result))
        return cell.name != "x1"

    grid.run(_cells(), square, progress=False, kept=kept, on_result=lambda c, r: seen.append((c.name, r)))
    assert asked == [("x0", {"y": 0}), ("x1", {"y": 1}), ("x2", {"y": 4})]
    assert sorted(seen) == [("x0", {"y": 0}), ("x1", {"y": 1}), ("x2", {"y": 4})]  # x1 ran again: its new result


class _Losing:
    """An executor that loses the named cells with their worker."""

    def __init__(self, lost: set[str]):
        self.lost = lost

    def map(self, fn, cells):
        for c in cells:
            yield c, (Lost("lost with its worker") if c.name in self.lost else fn(c))


@pytest.mark.parametrize(
    "lost, words",
    [
        ({"x1"}, "cell x1 lost with its worker"),
        ({"x0", "x1", "x2"}, "cell x0 and 2 more (x1, x2) lost with its worker"),
    ],
)
def test_the_lost_cells_error_names_them(tmp_path, lost, words):
    with pytest.raises(CellLost) as e:
        Grid(tmp_path).run(_cells(), square, _Losing(lost), progress=False)
    assert str(e.value) == (
        f"{words}; the other cells are recorded in {tmp_path / RECORD}: rerun the same command to run the lost ones"
    )


def test_workers_are_spawned_and_gone_when_the_map_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(g, "_TEST_MARK", "set in the parent", raising=False)  # a forked worker would inherit it
    got = Grid(tmp_path).run(_cells(2), started_by, LocalProcesses(2, 1), progress=False)
    assert {r["method"] for r in got.values()} == {"spawn"}
    assert {r["parent_set"] for r in got.values()} == {"unset"}
    assert mp.active_children() == []  # the pool waited for its workers


def test_one_worker_means_one_process(tmp_path):
    got = Grid(tmp_path).run(_cells(4), slow_pid, LocalProcesses(1, 1), progress=False)
    assert len({r["pid"] for r in got.values()}) == 1 and os.getpid() not in {r["pid"] for r in got.values()}
