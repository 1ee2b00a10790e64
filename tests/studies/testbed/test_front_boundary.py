"""`toy report --front ... --pick ...`: front.md recomputed from the per-seed values of results.json, and the
knob chosen on the validation items alone (the per-seed values are built so that the reported items would choose
another run)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from anchorft.cli import main as cli

SEEDS = (0, 1, 2)
BASE = {"id_greedy": 0.2, "ood_mean": 0.8, "val": {"id_greedy": 0.25, "ood_mean": 0.7}}
# run: per seed (id_greedy, ood_mean) on the reported items, and on the validation items
RUNS = {
    "sft": ([(0.60, 0.40), (0.62, 0.42), (0.58, 0.38)], [(0.6, 0.35), (0.6, 0.36), (0.6, 0.34)]),
    "l2": ([(0.30, 0.78), (0.32, 0.76), (0.31, 0.77)], [(0.3, 0.69), (0.3, 0.68), (0.3, 0.70)]),
    # on the reported items k4 is the better knob; on the validation items k8 is
    "rp-k4": ([(0.50, 0.70), (0.52, 0.72), (0.51, 0.71)], [(0.40, 0.50), (0.41, 0.5), (0.39, 0.5)]),
    "rp-k8": ([(0.45, 0.66), (0.44, 0.65), (0.46, 0.67)], [(0.50, 0.62), (0.52, 0.6), (0.51, 0.61)]),
}


def _results() -> dict:
    base = {"id_avg@k": 0.0, "id_pass@k": 0.0, **BASE, "ood": {"sort": BASE["ood_mean"]}}
    methods = {}
    for name, (test, val) in RUNS.items():
        per = [{"seed": s, "id_avg@k": g, "id_pass@k": g, "id_greedy": g, "ood_mean": o, "ood": {"sort": o},
                "train_seconds": 1.0, "val": {"id_greedy": vg, "ood_mean": vo}}
               for s, (g, o), (vg, vo) in zip(SEEDS, test, val)]  # fmt: skip
        m = {k: float(np.mean([p[k] for p in per])) for k in ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean")}
        method = "rpsft" if name.startswith("rp") else name
        methods[name] = {**m, "ood": {"sort": m["ood_mean"]}, "train_seconds": 1.0, "std": {}, "method": method,
                         "settings": {}, "per_seed": per}  # fmt: skip
    settings = {"k": 2, "n_samples": 4, "temperature": 0.7, "top_p": 0.95, "id_skill": "math_word",
                "id_items": 9, "ood_items": {"sort": 5}, "val_items": {"sort": 3}, "seeds": list(SEEDS),
                "pretrained": "x"}  # fmt: skip
    return {"base": base, "methods": methods, "settings": settings}


def _front_at(points: list[tuple[float, float]], x: float) -> float:
    """The Pareto front of (retention, gain) points joined by segments, at x (independently of report.py)."""
    front = sorted(p for p in points if not any(q != p and q[0] >= p[0] and q[1] >= p[1] for q in points))
    if x <= front[0][0]:
        return front[0][1]
    for (x0, y0), (x1, y1) in zip(front, front[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return 0.0


def _rows(split: str, front_runs: list[str]) -> dict[str, dict]:
    base = BASE if split == "test" else BASE["val"]
    pts, per = [(1.0, 0.0)], {}
    for name, (test, val) in RUNS.items():
        vals = test if split == "test" else val
        keep = np.array([o / base["ood_mean"] for _, o in vals])
        gain = np.array([100 * (g - base["id_greedy"]) for g, _ in vals])
        per[name] = (keep.mean(), gain.mean(), gain.std(ddof=1) / np.sqrt(len(gain)))
    pts += [per[r][:2] for r in front_runs]
    out = {}
    for name, (x, y, se) in per.items():
        f = _front_at(pts, x)
        out[name] = {"retention": x, "id_gain": y, "front_gain": f, "excess": y - f, "se": se}
    return out


def _md_rows(text: str, heading: str | None) -> dict[str, list[str]]:
    part = text if heading is None else text.split(heading)[1]
    lines = []
    for ln in part.splitlines():
        if ln.startswith("## ") and lines:
            break
        if ln.startswith("| ") and not ln.startswith("| run |") and not ln.startswith("| option |"):
            lines.append([c.strip() for c in ln.strip("|").split("|")])
    return {cells[0]: cells for cells in lines}


def test_front_md_and_the_knob_chosen_on_validation(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(_results()))
    front = ["sft", "l2"]
    argv = ["toy", "report", "--from", str(tmp_path / "a"), "--out", str(tmp_path / "m"), "--front", *front,
            "--pick", "rank=rp-k4,rp-k8"]  # fmt: skip
    assert cli(argv) == 0
    text = (tmp_path / "m" / "front.md").read_text()
    test, val = _rows("test", front), _rows("val", front)
    got = _md_rows(text.split("## On the validation")[0], None)
    for name, r in test.items():
        cells = got[name]  # run | seeds | retention | ID gain | front at it | excess | SE | ...
        assert cells[1] == str(len(SEEDS))
        want = [r["retention"], r["id_gain"], r["front_gain"], r["excess"], r["se"]]
        assert [float(c) for c in cells[2:7]] == pytest.approx(want, abs=0.051), name
    got_val = _md_rows(text, "## On the validation items")
    for name, r in val.items():
        want = [r["retention"], r["id_gain"], r["front_gain"], r["excess"]]
        assert [float(c) for c in got_val[name][2:6]] == pytest.approx(want, abs=0.051), name
    # the choice: the largest excess on the validation items (k8), which the reported items would not choose
    assert val["rp-k8"]["excess"] > val["rp-k4"]["excess"] and test["rp-k4"]["excess"] > test["rp-k8"]["excess"]
    (pick,) = _md_rows(text, "## Knobs chosen").values()
    assert pick[0] == "rank" and pick[2] == "rp-k8"
    assert [float(c) for c in pick[3:7]] == pytest.approx(
        [test["rp-k8"][k] for k in ("retention", "id_gain", "front_gain", "excess")], abs=0.051
    )  # scored on the reported items
