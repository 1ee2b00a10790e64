import dataclasses
import hashlib
import json
import math

import numpy as np
import pytest
import yaml

from anchorft.cli import command
from anchorft.studies.grid import RECORD
from anchorft.studies.w2s import sweeps
from anchorft.studies.w2s.sweeps import evaluate_point, fit_loglog, load_sweep, median_censored, run_sweep
from anchorft.w2s.config import W2SConfig, config_hash, load_config
from anchorft.w2s.stats import digest

main = command("w2s")  # the command as `anchorft w2s` runs it


def test_fit_recovers_a_known_slope():
    rng = np.random.default_rng(0)
    xs = [16, 32, 64, 128, 256]
    per_seed = [[float(3.0 * x**1.5 * np.exp(rng.normal(0, 0.05))) for _ in range(5)] for x in xs]
    fit = fit_loglog(xs, per_seed, n_boot=500)
    assert abs(fit["slope"] - 1.5) < 0.05
    assert fit["ci"][0] < 1.5 < fit["ci"][1] and fit["ci"][1] - fit["ci"][0] < 0.2
    assert fit["censored"] == [] and fit["n_points"] == 5


def test_censored_points_are_reported_and_left_out_of_the_fit():
    assert median_censored([1.0, None, 3.0]) == 3.0
    assert median_censored([1.0, None, None]) is None
    assert median_censored([2.0, 4.0]) == 3.0
    xs = [10, 20, 40, 80]
    per_seed = [[x**2] * 3 for x in xs[:3]] + [[None, None, 6000.0]]
    fit = fit_loglog(xs, per_seed, n_boot=200)
    assert fit["censored"] == [3] and fit["n_points"] == 3
    assert abs(fit["slope"] - 2.0) < 1e-9
    fit = fit_loglog(xs, [[None]] * 4, n_boot=10)
    assert fit["slope"] is None and fit["censored"] == [0, 1, 2, 3]


def _tiny_spec(tmp_path, kind="s-scaling", **kw):
    spec = {
        "config": {
            "d": 48,
            "s": 8,
            "group_sizes": [4, 6],
            "weak_neurons": 4,
            "batch_size": 8,
            "steps": 300,
            "n_seeds": 2,
            "n_log": 5,
            "chunk": 8,
            "schedule": "constant",
            "modes": ["w2s"],
        },
        "series": ["w2s"],
        "threshold": 0.3,
        "points": [{"s": 4}, {"s": 8}],
        "quick": {},
    }
    spec.update(kw)
    p = tmp_path / f"sweep-{kind}.yaml"
    p.write_text("# anchorft w2s sweep --kind s-scaling --out x\n" + yaml.safe_dump(spec))
    return p


def test_cached_point_is_reused(tmp_path, monkeypatch):
    spec = load_sweep("s-scaling", path=_tiny_spec(tmp_path))
    cache = tmp_path / "cache"
    cache.mkdir()
    first = evaluate_point(spec, spec["points"][0], cache)
    assert first["cached"] is False and len(list(cache.glob("*.json"))) == 1

    def boom(*a, **k):
        raise AssertionError("recomputed a cached point")

    monkeypatch.setattr(sweeps, "train", boom)
    again = evaluate_point(spec, spec["points"][0], cache)
    assert again["cached"] is True and again["series"] == first["series"]
    # a different threshold is a different point
    spec2 = dict(spec, threshold=0.35)
    with pytest.raises(AssertionError, match="recomputed"):
        evaluate_point(spec2, spec["points"][0], cache)


def test_run_sweep_writes_json_with_fit_and_censored(tmp_path):
    p = _tiny_spec(tmp_path, points=[{"s": 4}, {"s": 8}, {"s": 8, "steps": 2}])
    res = run_sweep("s-scaling", tmp_path / "out", spec_path=p, progress=False)
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert data["kind"] == "s-scaling" and len(data["points"]) == 3
    assert set(data["fit"]) >= {"slope", "ci"} and data["theory"]["slope"] == 1.5
    assert data["points"][2]["series"]["w2s"]["censored"] is True  # 2 steps: budget hit
    assert 2 in res["fit"]["censored_points"] and res["fit"]["n_censored"] >= 1  # censored seeds: lower bounds
    assert 2 in res["fits_median_bootstrap"]["w2s"]["0.3"]["censored"]  # the older fit leaves the point out
    assert (tmp_path / "out" / "s-scaling.png").exists()


def _fake_hits(best_eta):
    """A stand-in for the runs: samples grow with |log(eta / best_eta)|; records every eta asked for."""
    asked = []

    def hits(config, series, thresholds, cache_dir, progress):
        eta = config.eta_w2s
        asked.append(eta)
        cost = 1000.0 * (1.0 + abs(np.log2(eta / best_eta)))
        return {"samples": {str(t): [cost * t, cost * t * 1.01] for t in thresholds}, "budget_samples": 10**6}

    return hits, asked


def test_two_thresholds_and_eta_grid_write_fits_and_one_panel_each(tmp_path):
    p = _tiny_spec(tmp_path, thresholds=[0.3, 0.5], eta_grid={"factor": 2, "width": 0, "max_widen": 0})
    res = run_sweep("s-scaling", tmp_path / "out", spec_path=p, progress=False)
    assert set(res["fits_by_threshold"]["w2s"]) == {"0.3", "0.5"}
    for pt in res["points"]:
        assert set(pt["series"]["w2s"]["best"]) == {"0.3", "0.5"}
    assert (tmp_path / "out" / "s-scaling.png").stat().st_size > 1000


def test_eta_grid_picks_the_best_eta_and_widens_at_the_edge(tmp_path, monkeypatch):
    p = _tiny_spec(tmp_path, thresholds=[0.5, 0.9], eta_grid={"factor": 2, "width": 1, "max_widen": 2})
    spec = load_sweep("s-scaling", path=p)
    spec["base"]["eta_w2s"] = 0.3
    hits, asked = _fake_hits(best_eta=0.3 * 4)  # the optimum lies two factors above the start
    monkeypatch.setattr(sweeps, "_hits", hits)
    rec = evaluate_point(spec, spec["points"][0], None)["series"]["w2s"]
    assert rec["best"]["0.5"]["eta"] == pytest.approx(1.2) and rec["best"]["0.9"]["eta"] == pytest.approx(1.2)
    assert rec["best"]["0.5"]["edge"] is None  # widened once beyond it: an interior optimum
    assert sorted(asked) == pytest.approx([0.15, 0.3, 0.6, 1.2, 2.4])
    hits, asked = _fake_hits(best_eta=0.3 * 64)  # far beyond what two widenings reach: flagged
    monkeypatch.setattr(sweeps, "_hits", hits)
    rec = evaluate_point(spec, spec["points"][0], None)["series"]["w2s"]
    assert rec["best"]["0.5"]["edge"] == "high" and rec["best"]["0.5"]["eta"] == pytest.approx(2.4)


def test_eta_grid_widens_past_a_partly_censored_edge_but_not_where_no_seed_reached(tmp_path, monkeypatch):
    p = _tiny_spec(tmp_path, thresholds=[0.5], eta_grid={"factor": 2, "width": 1, "max_widen": 1})
    spec = load_sweep("s-scaling", path=p)
    spec["base"]["eta_w2s"] = 0.3
    for reached, widened in ((True, [0.15, 0.3, 0.6, 1.2]), (False, [0.15, 0.3, 0.6])):
        asked = []

        def hits(config, series, thresholds, cache_dir, progress, reached=reached, asked=asked):
            asked.append(config.eta_w2s)  # seed 0 never reaches; seed 1 (if it does) the sooner the larger eta
            return {"samples": {"0.5": [None, 1000.0 / config.eta_w2s if reached else None]}, "budget_samples": 10**6}

        monkeypatch.setattr(sweeps, "_hits", hits)
        rec = evaluate_point(spec, spec["points"][0], None)["series"]["w2s"]["best"]["0.5"]
        assert sorted(asked) == pytest.approx(widened)
        assert rec["censored"] and rec["edge"] == ("high" if reached else None)


def test_bad_sweep_input(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown sweep kind"):
        load_sweep("nope")
    with pytest.raises(ValueError, match="empty grid"):
        load_sweep("s-scaling", path=_tiny_spec(tmp_path, points=[]))
    for thr in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            load_sweep("s-scaling", path=_tiny_spec(tmp_path, threshold=thr))
    with pytest.raises(ValueError, match="rho"):
        load_sweep("s-scaling", path=_tiny_spec(tmp_path, points=[{"rho": 2.0}]))
    assert main(["sweep", "--kind", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "unknown sweep kind" in capsys.readouterr().err


def test_every_sweep_preset_loads_and_starts_with_its_command():
    for kind in sweeps.KINDS:
        for quick in (False, True):
            spec = load_sweep(kind, quick=quick)
            assert spec["points"]
        first = (sweeps.PRESET_DIR / f"sweep-{kind}.yaml").read_text().splitlines()[0]
        assert first.startswith(f"# anchorft w2s sweep --kind {kind}")


def test_expand_grid_puts_rho_in_units_of_inverse_sqrt_s_and_the_command_line_wins():
    grid = {"rows": [{"s": 4, "steps": 10}, {"s": 16, "steps": 40}], "rho_sqrt_s": [0.0, 1.0, 2.0]}
    pts = sweeps.expand_grid(grid)
    assert len(pts) == 6
    for pt in pts:
        assert pt["steps"] == 10 * pt["s"] // 4
    assert [round(p["rho"] * np.sqrt(p["s"]), 12) for p in pts] == [0.0, 1.0, 2.0] * 2
    assert pts[4]["rho"] == 0.25  # x = 1 at s = 16 is rho = s^{-1/2}
    fixed = sweeps.expand_grid(grid, {"steps", "s", "rho"})
    assert all(set(p) == {"s", "rho"} for p in fixed)  # steps dropped, s and rho kept from the grid
    for bad, match in (
        ({"rows": [], "rho_sqrt_s": [1.0]}, "empty grid"),
        ({"rows": [{"s": 4}], "rho_sqrt_s": []}, "empty grid"),
        ({"rows": [{"steps": 3}], "rho_sqrt_s": [1.0]}, "positive integer s"),
        ({"rows": [{"s": 4}], "rho_sqrt_s": [-1.0]}, ">= 0"),
    ):
        with pytest.raises(ValueError, match=match):
            sweeps.expand_grid(bad)


def test_crossing_interpolates_linearly():
    assert sweeps.crossing([0, 1, 2], [0.0, 0.2, 0.6], 0.4) == pytest.approx(1.5)
    assert sweeps.crossing([0, 1, 2], [0.5, 0.6, 0.7], 0.4) == 0.0
    assert sweeps.crossing([0, 1, 2], [0.0, 0.1, 0.2], 0.4) is None
    assert sweeps.crossing([0, 1, 3], [0.0, 0.3, 0.1], 0.2) == pytest.approx(2 / 3)  # the first crossing


def _synthetic_summary(boundary_rho):
    """Rows of a 2-D overlap sweep whose turn and drop are ramps crossing 0.1 at rho = boundary_rho(s)."""
    rows = []
    for s in (16, 32, 64):
        xc = boundary_rho(s) * np.sqrt(s)
        for x in np.linspace(0, 6, 25):
            v = float(np.clip(0.1 + 0.2 * (x - xc), 0.0, 0.5))
            for mode in ("sft", "w2s"):
                rows.append(
                    {"x": float(x), "s": s, "mode": mode, "nontarget_to_target_change": v, "nontarget_drop": v}
                )
    return rows


def test_phase_boundary_tells_a_collapse_from_a_fixed_rho():
    collapsed = sweeps.phase_boundary(_synthetic_summary(lambda s: 1.5 / np.sqrt(s)))
    e = collapsed["modes"]["sft"]
    assert [r["turn_x"] for r in e["per_s"]] == pytest.approx([1.5, 1.5, 1.5])
    assert [r["drop_rho"] for r in e["per_s"]] == pytest.approx([1.5 / 4, 1.5 / np.sqrt(32), 1.5 / 8])
    assert e["collapse"]["turn"]["slope_log_x_vs_log_s"] == pytest.approx(0.0, abs=1e-9)
    fixed = sweeps.phase_boundary(_synthetic_summary(lambda s: 0.3))
    assert fixed["modes"]["w2s"]["collapse"]["drop"]["slope_log_x_vs_log_s"] == pytest.approx(0.5, abs=1e-9)
    never = sweeps.phase_boundary(_synthetic_summary(lambda s: 0.3), {"turn": 0.99})
    assert never["modes"]["sft"]["per_s"][0]["turn_x"] is None
    assert never["modes"]["sft"]["collapse"]["turn"] == {"slope_log_x_vs_log_s": None, "n_s": 0}
    with pytest.raises(ValueError, match="phase.turn"):
        sweeps.phase_boundary([], {"turn": 1.5})


def _tiny_grid_spec(tmp_path, **kw):
    spec = {
        "config": {
            "d": 32,
            "s": 8,
            "group_sizes": [4, 6],
            "weak_neurons": 4,
            "batch_size": 8,
            "steps": 60,
            "n_seeds": 2,
            "n_log": 4,
            "chunk": 8,
            "modes": ["sft", "w2s"],
            "loss": "correlation",
        },
        "grid": {"rows": [{"s": 4, "steps": 30}, {"s": 8, "steps": 60}], "rho_sqrt_s": [0.0, 1.0, 1.5]},
        "phase": {"turn": 0.05, "drop": 0.05},
    }
    spec.update(kw)
    p = tmp_path / "sweep-overlap.yaml"
    p.write_text("# anchorft w2s sweep --kind overlap --out x\n" + yaml.safe_dump(spec))
    return p


def test_overlap_grid_sweep_writes_a_phase_diagram_and_reuses_its_cache(tmp_path, monkeypatch):
    p = _tiny_grid_spec(tmp_path)
    res = run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert len(data["points"]) == 6 and {pt["s"] for pt in data["points"]} == {4, 8}
    assert [pt["x"] for pt in data["points"]] == pytest.approx([0.0, 1.0, 1.5] * 2)
    assert [pt["modes"]["sft"]["samples"][-1] for pt in data["points"]] == [240] * 3 + [480] * 3  # row budgets
    assert set(data["phase"]["modes"]) == {"sft", "w2s"} and data["phase"]["levels"]["turn"] == 0.05
    assert [r["s"] for r in res["phase"]["modes"]["sft"]["per_s"]] == [4, 8]
    assert (tmp_path / "out" / "overlap.png").stat().st_size > 0

    def boom(*a, **k):
        raise AssertionError("recomputed a cached point")

    monkeypatch.setattr(sweeps, "run_experiment", boom)
    again = run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)
    assert all(pt["cached"] for pt in again["points"]) and again["summary"] == res["summary"]
    # an override on the command line wins over the rows: one budget for every s (new points, not cached)
    with pytest.raises(AssertionError, match="recomputed"):
        run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False, overrides=["steps=60"])


def test_a_single_row_overlap_sweep_writes_its_phase_boundary(tmp_path):
    """One s (as configs/w2s/sweep-rho-star.yaml): the turn and drop crossings are written for that s; the collapse
    slope needs two s and is None."""
    p = _tiny_grid_spec(tmp_path, grid={"rows": [{"s": 4, "steps": 30}], "rho_sqrt_s": [0.0, 1.0, 1.5]})
    run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)
    phase = json.loads((tmp_path / "out" / "sweep.json").read_text())["phase"]
    for mode in ("sft", "w2s"):
        e = phase["modes"][mode]
        assert [r["s"] for r in e["per_s"]] == [4] and {"turn_x", "turn_rho", "drop_x", "drop_rho"} <= set(
            e["per_s"][0]
        )
        assert e["collapse"]["turn"]["slope_log_x_vs_log_s"] is None


def test_overlap_grid_bad_input(tmp_path):
    with pytest.raises(ValueError, match="either points or grid"):
        load_sweep("overlap", path=_tiny_grid_spec(tmp_path, points=[{"rho": 0.1}]))
    with pytest.raises(ValueError, match="rho"):  # x = 3 at s = 4 is rho = 1.5
        load_sweep("overlap", path=_tiny_grid_spec(tmp_path, grid={"rows": [{"s": 4}], "rho_sqrt_s": [3.0]}))
    with pytest.raises(ValueError, match="phase.drop"):
        load_sweep("overlap", path=_tiny_grid_spec(tmp_path, phase={"drop": 0.0}))


def test_overlap_preset_is_a_grid_over_s_with_budgets_proportional_to_s():
    spec = load_sweep("overlap")
    ss = sorted({pt["s"] for pt in spec["points"]})
    assert len(ss) >= 3
    steps = {pt["s"]: pt["steps"] for pt in spec["points"]}
    assert len({steps[s] / s for s in ss}) == 1
    assert len({pt["s"] for pt in load_sweep("overlap", quick=True)["points"]}) >= 2


@pytest.mark.parametrize("path", sorted(sweeps.PRESET_DIR.glob("sweep-*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_sweep_file_loads_under_its_command_and_builds_its_points(path):
    """Each sweep file's first line names its command; the file loads under that --kind (full and quick), and every
    scaling point builds a valid W2SConfig (mechanism sweeps validate their points while loading)."""
    first = path.read_text().splitlines()[0]
    assert first.startswith("# anchorft w2s sweep --kind "), path
    kind = first.split("--kind ")[1].split()[0]
    for quick in (False, True):
        spec = load_sweep(kind, quick=quick, path=path)
        assert spec["points"], path
        if kind not in sweeps.MECH_KINDS:
            for point in spec["points"]:
                sweeps.point_config(spec, point).validate()


def test_a_sweep_names_its_preset_and_its_overrides_and_the_old_base_key_is_refused(tmp_path):
    tiny = yaml.safe_load(_tiny_spec(tmp_path).read_text())["config"]
    p = _tiny_spec(tmp_path, preset="paper", quick={"config": {"steps": 100}})
    full, quick = load_sweep("s-scaling", path=p), load_sweep("s-scaling", quick=True, path=p)
    assert full["base"] == {"preset": "paper", **tiny} and quick["base"] == {"preset": "paper", **tiny, "steps": 100}
    assert sweeps.point_config(quick, {"s": 4}) == load_config("paper", {**tiny, "steps": 100, "s": 4})
    other = load_sweep("s-scaling", quick=True, path=_tiny_spec(tmp_path, preset="paper", quick={"preset": "gain"}))
    assert other["base"]["preset"] == "gain" and other["base"]["d"] == 48
    for bad in ({"base": tiny}, {"quick": {"base": {"steps": 100}}}):
        with pytest.raises(ValueError, match="preset:.*config:"):
            load_sweep("s-scaling", quick=True, path=_tiny_spec(tmp_path, **bad))
    with pytest.raises(ValueError, match="config: is a mapping"):
        load_sweep("s-scaling", path=_tiny_spec(tmp_path, config={**tiny, "preset": "paper"}))


def test_config_and_point_hashes_are_sha256_of_sorted_json():
    """Cached points and finished runs are found by these hashes: each is the SHA-256 of the JSON (sorted keys,
    JSON's default separators) of what it keys, written out here."""

    def sha(obj, n):
        return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:n]

    paper = load_config("paper")
    assert config_hash(W2SConfig()) == sha(W2SConfig().to_dict(), 16)
    d = paper.to_dict()
    assert config_hash(paper, exclude=("weak", "steps")) == sha(
        {k: v for k, v in d.items() if k not in ("weak", "steps")}, 16
    )
    measure = {"kind": "s-scaling", "threshold": 0.5, "series": ["w2s"]}
    assert sweeps._point_key(paper, measure) == sha({"config": config_hash(paper), "measure": measure}, 20)
    assert (
        digest({"k": "race", "c": config_hash(paper)}, 20)
        == hashlib.sha256(json.dumps({"c": config_hash(paper), "k": "race"}).encode()).hexdigest()[:20]
    )


@pytest.mark.parametrize("name", list(sweeps.KINDS))
def test_every_sweep_kind_is_a_row_that_carries_its_points_axis_table_and_figure(name, tmp_path):
    """The contract of a row of KINDS: its shipped file (full and quick) lays out points whose configs build; a kind
    lies on an axis (each point's x, DIR/sweep.json) or has a table (DIR/results.json, DIR/table.md), not both;
    the keys its points set are config fields, and overriding one on the command line is refused before any work;
    its figure's function exists."""
    k = sweeps.KINDS[name]
    assert k.name == name
    config_fields = {f.name for f in dataclasses.fields(W2SConfig)}
    for quick in (False, True):
        spec = load_sweep(name, quick=quick)
        assert spec["kind"] == name and spec["points"]
        configs = [sweeps.point_config(spec, pt) for pt in spec["points"]]
        assert (k.axis is None) == (k.table is not None)
        assert k.results_file == ("results.json" if k.table is not None else "sweep.json")
        if k.axis is not None:
            assert k.evaluate is not None
            assert all(math.isfinite(k.axis.of(c, pt)) for c, pt in zip(configs, spec["points"]))
        assert k.controlled(spec) <= config_fields
    for key in sorted(k.controlled(load_sweep(name, quick=True))):
        value = json.dumps(getattr(W2SConfig(), key))
        with pytest.raises(ValueError, match="set by the sweep's factors"):
            run_sweep(name, tmp_path / "out", quick=True, overrides=[f"{key}={value}"], progress=False)
    assert not (tmp_path / "out").exists()
    assert callable(k.figure.function())


def _saved(folder) -> dict:
    """sweep.json without its provenance and the points' `cached` flags (whether this run measured them)."""
    data = json.loads((folder / "sweep.json").read_text())
    data.pop("provenance")
    data["points"] = [{k: v for k, v in pt.items() if k != "cached"} for pt in data["points"]]
    return data


def test_a_stopped_sweep_resumes_from_its_grid_without_losing_or_repeating_a_point(tmp_path, monkeypatch):
    """The points are the cells of a grid (DIR/cells.jsonl): a sweep stopped during its fourth point of six, run
    again, measures the three it had not finished, each once, and writes what an uninterrupted run writes."""
    p = _tiny_grid_spec(tmp_path)
    real = sweeps.KINDS["overlap"]
    measured: list[tuple] = []
    stop_at = [3]

    def counted(spec, point, config, cache, shared):
        if len(measured) == stop_at[0]:
            raise KeyboardInterrupt  # Ctrl-C in the fourth point
        measured.append((point["s"], point["rho"]))
        return real.measure(spec, point, config, cache, shared)

    monkeypatch.setitem(sweeps.KINDS, "overlap", dataclasses.replace(real, measure=counted))
    with pytest.raises(KeyboardInterrupt):
        run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)
    assert len(measured) == 3 and len((tmp_path / "out" / RECORD).read_text().splitlines()) == 3
    assert not (tmp_path / "out" / "sweep.json").exists()
    stop_at[0] = -1
    resumed = run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)
    points = [(pt["s"], pt["rho"]) for pt in load_sweep("overlap", path=p)["points"]]
    assert len(measured) == 6 and sorted(measured) == sorted(points)  # each point once over the two runs
    assert [pt["cached"] for pt in resumed["points"]] == [True] * 3 + [False] * 3  # the first three: the record's
    assert len((tmp_path / "out" / RECORD).read_text().splitlines()) == 6
    measured.clear()
    run_sweep("overlap", tmp_path / "fresh", spec_path=p, progress=False)
    assert len(measured) == 6
    assert _saved(tmp_path / "out") == _saved(tmp_path / "fresh")
    measured.clear()
    run_sweep("overlap", tmp_path / "out", spec_path=p, progress=False)  # finished: every point from the record
    assert measured == []


@pytest.mark.slow
def test_points_measured_in_spawned_workers_give_what_one_process_gives(tmp_path):
    p = _tiny_grid_spec(tmp_path)
    run_sweep("overlap", tmp_path / "one", spec_path=p, progress=False)
    run_sweep("overlap", tmp_path / "two", spec_path=p, progress=False, workers=2, threads=1)
    assert _saved(tmp_path / "one") == _saved(tmp_path / "two")
    with pytest.raises(ValueError, match="workers"):
        run_sweep("overlap", tmp_path / "zero", spec_path=p, progress=False, workers=0)
    assert not (tmp_path / "zero").exists()


def test_quick_variant_merges_over_the_file_by_the_preset_rule(tmp_path):
    """`quick:` is merged over its sweep file as a preset's child over its parent (`merge_mappings`): mappings key
    by key (config, each factor, a variant's keys), anything else replaced (points, the preset)."""
    spec = yaml.safe_load(open("configs/w2s/sweep-ablation-bias.yaml"))
    spec["quick"]["variants"] = {"clip2": {"clip": 3.0}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    got = sweeps.load_sweep("ablation", quick=True, path=tmp_path / "s.yaml")
    assert got["base"] == {"preset": "paper", **spec["config"], **spec["quick"]["config"]}
    assert got["factors"] == {**spec["factors"], "variant": ["clip2"]}
    assert got["variants"] == {"clip2": {"clip": 3.0, "weak_bound": 0.0}, "bounded2": spec["variants"]["bounded2"]}
    chi = yaml.safe_load(open("configs/w2s/sweep-chi.yaml"))
    chi["quick"]["preset"] = "gain"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(chi))
    got = sweeps.load_sweep("chi", quick=True, path=tmp_path / "c.yaml")
    assert got["points"] == chi["quick"]["points"] and got["base"]["preset"] == "gain"
    assert sweeps.load_sweep("chi", path=tmp_path / "c.yaml")["points"] == chi["points"]
