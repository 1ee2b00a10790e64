"""The command's thread policy (anchorft.threads): an equal share of the cores per concurrent process, passive
OpenMP waiting, the user's settings kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from anchorft.threads import available_cores, choose_threads, count_processes

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_choose_threads_shares_the_cores():
    assert [choose_threads(2, n) for n in (1, 2, 3)] == [2, 1, 1]
    assert [choose_threads(16, n) for n in (1, 2, 3, 5)] == [16, 8, 5, 3]
    assert choose_threads(1, 0) == 1


def test_count_processes_registers_and_prunes_dead_ones(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / str(dead.pid)).touch()  # a process that exited without removing its entry
    (tmp_path / "notes.txt").touch()
    assert count_processes(folder=tmp_path) == 1  # this process alone
    assert not (tmp_path / str(dead.pid)).exists() and (tmp_path / str(os.getpid())).exists()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / str(alive.pid)).touch()
        assert count_processes(register=False, folder=tmp_path) == 2
    finally:
        alive.kill()
        alive.wait()


def _policy_in_fresh_interpreter(env: dict, cores: int, registry: Path, torch: bool = False) -> dict:
    """The policy applied in a new interpreter with `cores` cores and the process registry `registry` (both faked:
    the machine's own cores and other anchorft processes do not enter): what it chose, the OpenMP variables it
    left; with `torch`, also that torch took OMP_NUM_THREADS (capped at the machine's real cores; 1.5 s more)."""
    code = (
        "import json, os, sys; from pathlib import Path; from anchorft.threads import apply_thread_policy; "
        "r = apply_thread_policy(cores=int(sys.argv[1]), registry=Path(sys.argv[2])); "
        "env = {k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'OMP_NUM_THREADS')}; "
        "import torch; print(json.dumps([r, env, torch.get_num_threads()]))"
    )
    if not torch:
        code = code.replace("import torch; ", "").replace("torch.get_num_threads()", "None")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OMP_")}, "PYTHONPATH": SRC, **env}
    cmd = [sys.executable, "-c", code, str(cores), str(registry)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    r, omp, torch_threads = json.loads(out.strip().splitlines()[-1])
    if torch and omp["OMP_NUM_THREADS"] is not None:
        assert torch_threads == min(int(omp["OMP_NUM_THREADS"]), available_cores())  # torch read the count
    return {"chosen": r, "wait": omp["OMP_WAIT_POLICY"], "threads": omp["OMP_NUM_THREADS"]}


def test_policy_at_entry_sets_threads_and_a_passive_wait_only_beside_another_run(tmp_path):
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    alone.mkdir()
    beside.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (beside / str(other.pid)).touch()  # another anchorft run, live
        got = _policy_in_fresh_interpreter({}, 4, alone, torch=True)
        assert got["chosen"]["processes"] == 1 and got["threads"] == "4" and got["chosen"]["threads"] == 4
        assert got["wait"] is None  # alone: OpenMP's default (spin, then sleep)
        got = _policy_in_fresh_interpreter({}, 4, beside, torch=True)
        assert got["chosen"]["processes"] == 2 and got["threads"] == "2" and got["chosen"]["threads"] == 2
        assert got["wait"] == "PASSIVE"
        # the user's values win: 3 threads is what the policy picks neither alone (4) nor beside another run (2)
        for reg in (alone, beside):
            assert _policy_in_fresh_interpreter({"OMP_NUM_THREADS": "3"}, 4, reg)["threads"] == "3"
        assert _policy_in_fresh_interpreter({"OMP_WAIT_POLICY": "ACTIVE"}, 4, beside)["wait"] == "ACTIVE"
        off = _policy_in_fresh_interpreter({"ANCHORFT_THREAD_POLICY": "off"}, 4, beside)
        assert off["chosen"] is None and off["wait"] is None
    finally:
        other.kill()
        other.wait()


def test_a_commands_thread_count_does_not_outlive_it_in_the_process(tmp_path):
    """`python -m anchorft.demo` runs `w2s run` (--threads 1 by default) and then `toy compare` in one process: the
    second must find the count the first found, not the first's own."""
    import torch

    from anchorft.cli import main

    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    # a command that sets its threads, then stops on a missing input
    rc = main(
        ["toy", "--threads", str(other), "report", "--from", str(tmp_path / "none"), "--out", str(tmp_path / "r")]
    )
    assert rc == 2
    assert torch.get_num_threads() == before
