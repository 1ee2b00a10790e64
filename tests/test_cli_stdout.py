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


def test_the_workers_of_toy_compare_print_no_library_log_lines_on_stdout(tmp_path):
    """Fine-tunes run in spawned worker processes, which import the console script's module but never run its
    `main`: their DeepSpeed lines go to stderr as well."""
    script = tmp_path / "anchorft"  # a console script, as pip writes it (workers are spawned from its module)
    script.write_text("import sys\nfrom anchorft.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "ANCHORFT_CACHE": str(tmp_path / "cache")}
    argv = ["toy", "compare", "--preset", "smoke", "--methods", "sft", "--seeds", "0", "1", "--workers", "2"]
    argv += ["--threads", "2", "--out", str(tmp_path / "c")]
    r = subprocess.run([sys.executable, str(script), *argv], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not [line for line in r.stdout.splitlines() if LOG_LINE.match(line) or "accelerator" in line.lower()]
    assert r.stdout.splitlines()[-1].startswith("wrote ")
