import json

import numpy as np
import pytest
import yaml

from anchorft.commands.w2s import main
from anchorft.w2s import sweeps
from anchorft.w2s.sweeps import evaluate_point, fit_loglog, load_sweep, median_censored, run_sweep


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
        "base": {
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
    assert 2 in res["fit"]["censored"]
    assert (tmp_path / "out" / "s-scaling.png").exists()


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
