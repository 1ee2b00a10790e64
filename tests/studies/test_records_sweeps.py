"""Records of sweeps and of chosen runs (`python -m anchorft.studies.records make race|scaling|chi|w2s --choice`):
what each keeps of the sweep's output, what it drops, and the problem its replay runs, from small output folders
written here in the sweeps' own formats."""

from __future__ import annotations

import json

import pytest

from anchorft.studies import drift, records


@pytest.fixture
def replays(monkeypatch):
    """The replay's config, captured instead of run (the replay itself is the drift alarm's test)."""
    seen: list[dict] = []
    monkeypatch.setattr(drift, "w2s_replay", lambda config, threads: seen.append(config) or {"steps": 0})
    return seen


def _write(folder, name, obj):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(obj))


PROV = {"git_commit": "a" * 40, "git_dirty": False, "anchorft": "0.1.0", "torch": "2.13.0"}


def test_race_record_keeps_the_rows_and_replays_the_first_size(tmp_path, replays):
    rows = [{"s": 16, "mode": "w2s", "eta": 0.8, "eta_grid": [0.4, 0.8, 1.6], "eta_on_edge": False}]
    spec = {"base": {"preset": "paper", "n_seeds": 3, "seed": 7}, "sizes": [[64, 16], [64, 32]], "eta": {"w2s": [1]},
            "points": [{"mode": "w2s"}] * 50}  # fmt: skip
    _write(tmp_path, "results.json", {"rows": rows, "spec": spec, "points": [{"curves": [0] * 1000}],
                                      "provenance": PROV})  # fmt: skip
    rec = records.make_race_record("r", tmp_path, "anchorft w2s sweep --kind race --out X")
    assert rec["results"] == {"rows": rows} and "points" not in rec["spec"]
    assert rec["commit"] == "a" * 40 and rec["dirty"] is False
    (cfg,) = replays
    assert (cfg["d"], cfg["s"], cfg["seed"], cfg["modes"]) == (64, 16, 7, ["w2s", "sft"])


def test_scaling_record_keeps_each_series_grid_and_best_and_drops_the_rest(tmp_path, replays):
    series = {"etas": {"0.5": {"0.5": [1024.0, None]}}, "best": {"0.5": {"eta": 0.5, "edge": None}},
              "budget_samples": 4096, "samples_per_seed": [1024.0, None], "weak": {"big": 1}}  # fmt: skip
    spec = {"base": {"preset": "paper", "n_tasks": 1, "pi": [1.0], "group_sizes": [8]}, "points": [{"d": 8, "s": 8}],
            "thresholds": [0.5], "series": ["sft"]}  # fmt: skip
    _write(tmp_path, "sweep.json", {"spec": spec, "points": [{"params": {"d": 8, "s": 8}, "series": {"sft": series}}],
                                    "fits_by_threshold": {"sft": {}}, "provenance": PROV})  # fmt: skip
    rec = records.make_scaling_record("s", tmp_path, "cmd")
    (pt,) = rec["results"]["points"]
    assert pt["series"]["sft"] == {k: series[k] for k in ("etas", "best", "budget_samples")}
    (cfg,) = replays
    assert (cfg["d"], cfg["s"], cfg["n_tasks"], cfg["modes"]) == (8, 8, 1, ["sft"])


def test_chi_record_keeps_each_modes_finals(tmp_path, replays):
    mode = {"init": {"a": 1}, "final": {"a": 2}, "final_per_seed": {"a": [2, 3]}, "curves": [0] * 100}
    spec = {"base": {"preset": "paper", "n_seeds": 2, "seed": 300}, "points": [{"group_sizes": [32, 16]}]}
    _write(tmp_path, "sweep.json", {"spec": spec, "provenance": PROV, "points": [
        {"params": {"group_sizes": [32, 16]}, "x": 2.0, "modes": {"w2s": mode}}]})  # fmt: skip
    rec = records.make_chi_record("c", tmp_path, "cmd")
    (pt,) = rec["results"]["points"]
    assert pt == {"params": {"group_sizes": [32, 16]}, "chi": 2.0,
                  "modes": {"w2s": {k: mode[k] for k in ("init", "final", "final_per_seed")}}}  # fmt: skip
    (cfg,) = replays
    assert (cfg["group_sizes"], cfg["seed"]) == ([32, 16], 300)


def test_the_make_command_keeps_the_sweep_that_chose_a_run(tmp_path, monkeypatch, replays):
    run = tmp_path / "run"
    metrics = {"torch_threads": 1, "provenance": PROV, "w2s": {"init": {}, "final": {}, "final_per_seed": {}},
               "risks": {d: {"risk": {"weak": 0.5}, "risk_se": {}, "risk_per_seed": {}, "gain_over_weak": {},
                             "gain_over_weak_se": {}, "surpasses_teacher": {}, "pgr": {}} for d in
                         ("isotropic", "generative")}}  # fmt: skip
    _write(run, "metrics.json", metrics)
    (run / "config.yaml").write_text("d: 128\ns: 16\nmodes: [w2s]\nseed: 0\nn_seeds: 1\n")
    _write(tmp_path / "sweep", "results.json", {"rows": [{"weak_steps": 100}], "provenance": PROV})
    monkeypatch.setattr(records, "repo_root", lambda: tmp_path)
    (tmp_path / "records").mkdir()
    argv = ["make", "w2s", "t", "--from", str(run), "--command", "c", "--choice", str(tmp_path / "sweep"),
            "--choice-command", "sweep c"]  # fmt: skip
    assert records.main(argv) == 0
    rec = json.loads((tmp_path / "records" / "t.json").read_text())
    assert rec["choice"] == {"command": "sweep c", "rows": [{"weak_steps": 100}], "commit": "a" * 40}
    assert "pgr" not in rec["results"]["risks"]["isotropic"] and rec["results"]["risks"]["isotropic"]["risk"]


def test_rho_star_record_keeps_each_seeds_boundary_beside_the_theory(tmp_path, replays):
    per_seed = [{"seed": 7 + i, "boundary_rho": b, "monotone": True, "lo": 0.3, "hi": 0.5, "bracketed": True,
                 "evaluations": [[0.4, 0.1]] * 20} for i, b in enumerate((0.39, 0.41))]  # fmt: skip
    spec = {"base": {"preset": "gain", "n_seeds": 2, "seed": 7, "modes": ["w2s"]}, "points": [{}] * 36}
    bis = {"modes": {"w2s": [{"s": 16, "per_seed": per_seed, "summary": {"mean": 0.4}}]}}
    _write(tmp_path, "sweep.json", {"spec": spec, "bisect": bis, "provenance": PROV})
    _write(tmp_path, "theory.json", {"rho_star": 0.398, "labels": {"big": 1}})
    rec = records.make_rho_star_record("x", tmp_path, "sweep c", tmp_path / "theory.json", "theory c")
    got = rec["results"]
    assert [r["boundary_rho"] for r in got["per_seed"]] == [0.39, 0.41] and "evaluations" not in got["per_seed"][0]
    assert (got["rho_star"], got["theory_command"], got["summary"]) == (0.398, "theory c", {"mean": 0.4})
    (cfg,) = replays
    assert (cfg["d"], cfg["s"], cfg["seed"], cfg["n_seeds"]) == (128, 16, 7, 1)
