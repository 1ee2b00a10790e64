"""The ablation sweep's table.md and results.json, recomputed from the per-seed values of each point: the point
evaluation is a stand-in that returns fixed per-seed alignments and label coefficients; the rows, means, sample
spreads and the table's cells (found by their column's header) are the project's code."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest


def _vals(pt: dict, what: str, n: int = 3) -> list[float]:
    h = hashlib.sha256(json.dumps([pt, what], sort_keys=True).encode()).digest()
    return [round(b / 255, 6) for b in h[:n]]


def test_ablation_table_is_the_per_seed_values_summarised(tmp_path, monkeypatch):
    import anchorft.w2s.plots_mech as plots_mech
    from anchorft.w2s import mechanisms
    from anchorft.w2s.sweeps import run_sweep

    keys = ("target_alignment", "nontarget_alignment", "nontarget_target_alignment")

    def fake_evaluate(spec, pt, config, cache, shared):
        labels = _vals(pt, "labels", 4)
        w2s = {"final_per_seed": {k: _vals(pt, k) for k in keys}, "init": {"nontarget_target_alignment": 0.01}}
        w2s.update(zip(("labels_mean", "labels_c2", "labels_c2_se", "labels_c4"), labels))
        return {"point": pt, "diverged": None, "w2s": w2s}

    monkeypatch.setattr(mechanisms, "_evaluate", fake_evaluate)
    monkeypatch.setattr(plots_mech, "plot_mech", lambda result, path: None)
    res = run_sweep("ablation", tmp_path, quick=True, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    lines = [ln for ln in (tmp_path / "table.md").read_text().splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert len(lines) - 1 == len(res["rows"]) == len(saved["rows"]) == len(mechanisms.expand(res["spec"])) > 1
    names = {"target": "target_alignment", "nontarget": "nontarget_alignment",
             "nontarget_to_theta1": "nontarget_target_alignment"}  # fmt: skip
    for line, row in zip(lines[1:], saved["rows"]):
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        pt = {k: row[k] for k in res["spec"]["factors"]}
        for k, v in pt.items():
            assert cells[k] == str(v)  # the row is the point's
        for col, key in names.items():
            per_seed = _vals(pt, key)
            assert float(cells[col]) == pytest.approx(np.mean(per_seed), abs=5e-4), (pt, col)
            assert float(cells[f"{col}_std"]) == pytest.approx(np.std(per_seed, ddof=1), abs=5e-4), (pt, col)
            assert row[col] == pytest.approx(np.mean(per_seed)) and row[f"{col}_std"] == pytest.approx(
                np.std(per_seed, ddof=1)
            )
        labels = _vals(pt, "labels", 4)
        for col, v in zip(("labels_mean", "labels_c2", "labels_c2_se"), labels):
            assert float(cells[col]) == pytest.approx(v, abs=5e-4), (pt, col)
