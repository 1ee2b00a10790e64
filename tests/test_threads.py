"""The command's thread policy (anchorft.threads): an equal share of the cores per concurrent process, passive
OpenMP waiting, the user's settings kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from anchorft.threads import choose_threads, count_processes

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


def _policy_in_fresh_interpreter(env: dict) -> dict:
    code = (
        "import json, os; from anchorft.threads import apply_thread_policy; r = apply_thread_policy(); "
        "import torch; print(json.dumps([r, os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads()]))"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OMP_")}, "PYTHONPATH": SRC, **env}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    r, wait, torch_threads = json.loads(out.strip().splitlines()[-1])
    return {"chosen": r, "wait": wait, "torch": torch_threads}


def test_policy_at_entry_sets_wait_policy_and_torch_threads():
    got = _policy_in_fresh_interpreter({})
    assert got["wait"] == "PASSIVE"
    assert (
        got["torch"] == got["chosen"]["threads"] == choose_threads(got["chosen"]["cores"], got["chosen"]["processes"])
    )
    assert _policy_in_fresh_interpreter({"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"})["wait"] == "ACTIVE"
    assert _policy_in_fresh_interpreter({"OMP_NUM_THREADS": "1"})["torch"] == 1  # the user's count wins
    off = _policy_in_fresh_interpreter({"ANCHORFT_THREAD_POLICY": "off"})
    assert off["chosen"] is None and off["wait"] is None
