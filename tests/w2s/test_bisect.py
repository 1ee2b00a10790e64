"""The turn boundary located by bisection (`bisect:` of an overlap sweep), the sign-change helpers it rests on,
the escape ratio's interval and the ablation's initial spreads. The overlap runs are a stand-in whose per-seed
turn is a step in rho at a known boundary, so that what the bisection returns can be checked exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from anchorft.studies.w2s import sweeps
from anchorft.w2s.stats import bisect_sign_change, mean_t_interval, ratio_summary, sign_changes

KEYS = ("target_alignment", "nontarget_alignment", "nontarget_target_alignment")
BOUNDARY = {100: 0.333, 101: 0.4567, 102: 0.59, 103: 0.52}  # per seed, where the turn changes sign


def _turn(seed: int, rho: float) -> float:
    if seed == 101 and 0.19 <= rho < 0.21:  # a blip the 0.1 grid sees at rho = 0.2: not monotone
        return 0.3
    if seed == 103:  # captured below its boundary, pushed out above it
        return 0.2 if rho < BOUNDARY[seed] else -0.2
    if seed == 104:  # captured everywhere: no boundary
        return 0.2
    return 0.2 if rho >= BOUNDARY[seed] else -0.2


def _fake_run(calls: list):
    def run(config, out_dir, progress=False):
        seeds = [config.seed + i for i in range(config.n_seeds)]
        calls.append((tuple(seeds), round(config.rho, 12)))
        init = {"target_alignment": [0.2] * len(seeds), "nontarget_alignment": [0.9] * len(seeds)}
        init["nontarget_target_alignment"] = [0.9 * config.rho] * len(seeds)
        final = {**init, "nontarget_target_alignment": [0.9 * config.rho + _turn(s, config.rho) for s in seeds]}
        mode = {
            "init": {k: float(np.mean(v)) for k, v in init.items()},
            "final": {k: float(np.mean(v)) for k, v in final.items()},
            "final_per_seed": final,
            **{f"{k}_seeds": [init[k], final[k]] for k in KEYS},
            **{k: [float(np.mean(init[k])), float(np.mean(final[k]))] for k in KEYS},
            "groups": {},
            "samples": [0, config.steps * config.batch_size],
            "diverged_at": None,
        }
        return {m: mode for m in config.modes}

    return run


def _spec(tmp_path, **kw) -> str:
    spec = {
        "config": {"d": 32, "s": 4, "group_sizes": [4, 6], "weak_neurons": 4, "batch_size": 8, "steps": 10,
                   "n_seeds": 5, "seed": 100, "n_log": 4, "chunk": 8, "modes": ["w2s"], "loss": "correlation"},
        "grid": {"rows": [{"s": 4, "steps": 10}], "rho_sqrt_s": [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4]},
        "phase": {"turn": 0.01},
        "bisect": {"tol": 0.002},
    }  # fmt: skip
    spec.update(kw)
    p = tmp_path / "sweep-overlap.yaml"
    p.write_text("# anchorft w2s sweep --kind overlap --out x\n" + yaml.safe_dump(spec))
    return str(p)


def test_bisect_sign_change_brackets_the_change_to_the_tolerance():
    seen = []

    def f(x):
        seen.append(x)
        return x - 0.4567

    res = bisect_sign_change(f, 0.4, 0.5, 0.002)
    assert res["bracketed"] and res["lo"] < 0.4567 <= res["hi"] and res["hi"] - res["lo"] <= 0.002
    assert res["f_lo"] < 0 <= res["f_hi"] and res["estimate"] == pytest.approx((res["lo"] + res["hi"]) / 2)
    assert seen[:2] == [0.4, 0.5] and [e[0] for e in res["evaluations"]] == seen  # both ends evaluated first
    assert len(seen) == 2 + 6  # 0.1 / 2^6 < 0.002 <= 0.1 / 2^5
    flat = bisect_sign_change(lambda x: 1.0, 0.0, 1.0, 0.1)
    assert not flat["bracketed"] and flat["estimate"] is None and len(flat["evaluations"]) == 2
    down = bisect_sign_change(lambda x: 0.3 - x, 0.0, 1.0, 0.01)
    assert down["f_lo"] >= 0 > down["f_hi"] and down["lo"] <= 0.3 < down["hi"]
    with pytest.raises(ValueError, match="lo < hi"):
        bisect_sign_change(lambda x: x, 1.0, 0.0, 0.1)


def test_sign_changes_counts_zero_as_positive():
    assert sign_changes([-1.0, 0.0, 1.0, -0.5, -0.2, 2.0]) == [0, 2, 4]
    assert sign_changes([1.0, 2.0]) == [] and sign_changes([]) == []


def test_mean_t_interval_and_ratio_summary():
    vals = [0.9, 1.1, 1.3, 1.0]
    r = mean_t_interval(vals)
    half = sps.t.ppf(0.975, 3) * np.std(vals, ddof=1) / 2
    assert r["mean"] == pytest.approx(1.075) and r["ci"] == pytest.approx([1.075 - half, 1.075 + half])
    assert r["std"] == pytest.approx(np.std(vals, ddof=1)) and r["n"] == 4 and r["method"] == "student-t"
    assert mean_t_interval([2.0])["ci"] == [None, None] and mean_t_interval([])["mean"] is None
    s = ratio_summary([2.0, None, 3.0, 4.0], [1.0, 5.0, 2.0, 0.0])
    assert s["per_seed"] == [2.0, None, 1.5, None] and s["left_out"] == 2 and s["mean"] == pytest.approx(1.75)


def test_overlap_bisect_finds_each_seeds_boundary_with_single_seed_runs(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(sweeps, "run_experiment", _fake_run(calls))
    monkeypatch.setattr("anchorft.studies.w2s.plots.plot_overlap", lambda result, path, axis: None)
    res = sweeps.run_sweep("overlap", tmp_path / "out", spec_path=_spec(tmp_path), progress=False)
    saved = json.loads((tmp_path / "out" / "sweep.json").read_text())["bisect"]
    assert saved["tol_rho"] == 0.002 and saved["level"] == 0.01
    (row,) = saved["modes"]["w2s"]
    assert row["s"] == 4 and [r["seed"] for r in row["per_seed"]] == [100, 101, 102, 103, 104]
    for r in row["per_seed"][:4]:
        b = 0.19 if r["seed"] == 101 else BOUNDARY[r["seed"]]  # seed 101: its first change is the blip's
        assert r["bracketed"] and r["lo"] < b <= r["hi"] and r["hi"] - r["lo"] <= 0.002
        lo, hi = (r["turn_lo"], r["turn_hi"]) if r["direction"] == "up" else (r["turn_hi"], r["turn_lo"])
        assert lo < 0.01 <= hi  # the sign checked on both sides, by single-seed runs
        assert abs(r["boundary_rho"] - b) <= 0.001
    assert [r["direction"] for r in row["per_seed"]] == ["up", "up", "up", "down", None]
    assert [r["monotone"] for r in row["per_seed"]] == [True, False, True, True, True]
    assert row["per_seed"][4]["boundary_rho"] is None and "positive" in row["per_seed"][4]["reason"]
    assert np.allclose(row["per_seed"][1]["grid_changes_rho"], [[0.1, 0.2], [0.2, 0.3], [0.4, 0.5]])
    summary = row["summary"]
    assert summary["not_monotone_seeds"] == [101] and summary["not_bracketed_seeds"] == [104]
    found = [r["boundary_rho"] for r in row["per_seed"][:4]]
    assert (
        summary["n_found"] == 4 and summary["mean"] == pytest.approx(np.mean(found)) and summary["max"] == max(found)
    )
    grid_calls = [c for c in calls if len(c[0]) == 5]
    assert len(grid_calls) == 7 and all(len(c[0]) == 1 for c in calls[7:])  # bisection: one seed a run
    assert res["bisect"] == saved and "phase" in res
    n = len(calls)
    sweeps.run_sweep("overlap", tmp_path / "out", spec_path=_spec(tmp_path), progress=False)
    assert len(calls) == n  # every run, grid and bisection, came from the cache


def test_bisect_needs_an_overlap_sweep_and_a_tolerance_in_0_1(tmp_path):
    with pytest.raises(ValueError, match="bisect.tol"):
        sweeps.load_sweep("overlap", path=_spec(tmp_path, bisect={"tol": 0.0}))
    with pytest.raises(ValueError, match="bisect is"):
        sweeps.load_sweep("overlap", path=_spec(tmp_path, bisect={"width": 0.01}))
    p = tmp_path / "sweep-chi.yaml"
    p.write_text(yaml.safe_dump({"preset": "paper", "points": [{"n_seeds": 1}], "bisect": {"tol": 0.01}}))
    with pytest.raises(ValueError, match="overlap sweeps only"):
        sweeps.load_sweep("chi", path=p)


def test_the_ablation_rows_carry_the_initial_spread_over_seeds():
    from anchorft.studies.w2s.mechanisms import _ablation_row

    curves = {
        "nontarget_alignment_seeds": [[0.9, 0.9, 0.9], [0.8, 0.85, 0.9]],
        "nontarget_target_alignment_seeds": [[0.27, 0.26, 0.28], [0.1, 0.2, 0.3]],
    }
    e = {
        "final_per_seed": {k: v[-1] for k, v in zip(KEYS, [[0.9, 0.9, 0.9], *curves.values()])},
        "init": {"nontarget_target_alignment": 0.27},
        **dict.fromkeys(("labels_mean", "labels_c2", "labels_c2_se", "labels_c4")),
        "curves": curves,
    }
    row = _ablation_row({"point": {"activation": "relu"}, "diverged": None, "w2s": e})
    assert row["nontarget_init"] == pytest.approx(0.9) and row["nontarget_init_std"] == pytest.approx(0.0)
    assert row["nontarget_to_theta1_init"] == pytest.approx(0.27)
    assert row["nontarget_to_theta1_init_std"] == pytest.approx(0.01)
