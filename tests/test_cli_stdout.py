"""A command's stdout holds its own lines only: libraries' log lines (DeepSpeed's accelerator detection, printed
when transformers or accelerate import it) go to stderr, where scripts that read stdout do not see them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\]")  # DeepSpeed's log format


def test_toy_pretrain_prints_no_library_log_lines_on_stdout(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "ANCHORFT_CACHE": str(tmp_path / "cache")}
    argv = ["toy", "pretrain", "--preset", "smoke", "--steps", "2", "--no-cache", "--threads", "1"]
    argv += ["--out", str(tmp_path / "m")]
    r = subprocess.run([sys.executable, "-m", "anchorft", *argv], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert not [line for line in lines if LOG_LINE.match(line) or "accelerator" in line.lower()], r.stdout
    assert lines[0].startswith("toy pretrain: pretraining 2 steps") and lines[-1].startswith("greedy accuracy:")


WORKER_SCRIPT = """import sys
from anchorft.cli import main  # a console script, as pip writes it: its workers are spawned from this module


def cell(c):  # what a fine-tune's worker does first: import the libraries that log on import
    import deepspeed  # noqa: F401

    return {"ok": True}


if __name__ == "__main__":
    from anchorft.studies.grid import Cell, Grid, LocalProcesses

    got = Grid(sys.argv[1]).run([Cell("a")], cell, LocalProcesses(workers=2), progress=False)
    print("done", got["a"]["ok"])
"""


def test_spawned_workers_of_a_command_print_no_library_log_lines_on_stdout(tmp_path):
    """The studies' workers (`toy compare --workers`, the grid's LocalProcesses) are spawned processes that import
    the console script's module but never run its `main`: DeepSpeed's import-time line goes to stderr there too."""
    script = tmp_path / "anchorft"
    script.write_text(WORKER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"} | {"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "g")], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["done True"], r.stdout
    assert "accelerator" in r.stderr.lower()  # the line was written: on stderr
