"""`anchorft w2s run` with every non-empty subset of the modes a preset accepts: it runs, writes metrics.json and
draws one panel per mode in alignment.png; a run whose numbers leave the model fails with one line and exit 1."""

from __future__ import annotations

import itertools
import json

import pytest

from anchorft.cli import command
from anchorft.w2s import dynamics
from anchorft.w2s.config import MODES

main = command("w2s")  # the command as `anchorft w2s` runs it

SUBSETS = [list(c) for k in range(1, len(MODES) + 1) for c in itertools.combinations(MODES, k)]
TINY = ["d=32", "s=8", "group_sizes=4,6", "weak_neurons=4", "batch_size=8", "n_log=4", "chunk=8", "anchor_rank=4"]
TINY += ["risk_samples=128", "label_samples=128", "center_samples=128"]


def _args(out, modes: list[str]) -> list[str]:
    base = ["run", "--preset", "gain", "--n-seeds", "1", "--steps", "16", "--out", str(out), "--quiet"]
    return [*base, *TINY, "seed=100", f"modes={','.join(modes)}"]


@pytest.mark.parametrize("modes", SUBSETS, ids=["+".join(m) for m in SUBSETS])
def test_every_mode_subset_runs_and_plots(tmp_path, modes):
    out = tmp_path / "run"
    assert main(_args(out, modes)) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert all(m[mode]["steps"][-1] == 16 for mode in modes)
    assert (out / "alignment.png").stat().st_size > 1000


def test_a_run_whose_alignments_are_not_cosines_fails_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dynamics, "COS_TOL", -2.0)  # every logged alignment fails the check
    assert main(_args(tmp_path / "run", ["ceiling"])) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anchorft w2s run: w2s ceiling: seed 100 neuron ")
    assert "is not a cosine" in err[0]
