"""--executor, --address and --retries on every study command: refused in one line before any work (an output
folder is never made), Ray missing named by its extra. The cluster itself: tests/studies/test_grid_ray.py."""

from __future__ import annotations

import importlib.util

import pytest

from anchorft.cli import main
from anchorft.studies.grid import RayCluster, RayTasks, executor_for

STUDIES = {  # each study command, with what it needs besides the executor flags
    "toy compare": ["toy", "compare", "--preset", "smoke"],
    "toy interpolate": ["toy", "interpolate", "--compare", "nowhere", "--runs", "sft"],
    "toy rl": ["toy", "rl", "--compare", "nowhere"],
    "w2s sweep": ["w2s", "sweep", "--kind", "overlap", "--quick"],
    "eval suite": ["eval", "suite", "--models", "base=nowhere"],
}


@pytest.mark.parametrize("command", sorted(STUDIES))
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--address", "10.0.0.1:6379"], "--address: only with --executor ray"),
        (["--retries", "2"], "--retries: only with --executor ray"),
        (["--executor", "ray", "--retries", "-1"], "--retries: must be >= 0, got -1"),
        (["--executor", "slurm"], "invalid choice: 'slurm'"),
    ],
)
def test_bad_executor_flags_are_refused_in_one_line(command, flags, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*STUDIES[command], "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err.splitlines()[0], err
    assert not out.exists()


@pytest.mark.parametrize("command", sorted(STUDIES))
def test_ray_missing_names_the_extra(command, tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    out = tmp_path / "out"
    assert main([*STUDIES[command], "--out", str(out), "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'anchorft[ray]'" in err.splitlines()[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--cell-gpus", "1"], "--cell-gpus: only with --executor ray"),
        (["--cell-cpus", "2"], "--cell-cpus: only with --executor ray"),
        (["--executor", "ray", "--cell-cpus", "0"], "--cell-cpus: must be >= 1, got 0"),
        (["--executor", "ray", "--cell-gpus", "-1"], "gpus: must be >= 0, got -1"),
    ],
)
def test_eval_suite_cell_resources_are_checked_in_one_line(flags, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*STUDIES["eval suite"], "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err.splitlines()[0], err
    assert not out.exists()


def test_executor_for_a_cluster_is_ray_tasks_on_the_cells_threads():
    pytest.importorskip("ray")
    ex = executor_for(4, 3, RayCluster("auto", retries=1))
    assert isinstance(ex, RayTasks) and ex.threads == 3 and ex.cluster == RayCluster("auto", 1)
    with pytest.raises(ValueError, match="retries"):
        RayCluster(retries=-1)
    with pytest.raises(ValueError, match="threads"):
        executor_for(1, 0)
