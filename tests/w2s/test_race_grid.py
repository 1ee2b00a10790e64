"""The race's step choices: each cell's chosen step inside its grid on every recorded block of seeds, and the
seeds' own fastest steps computed as a loop over the runs would."""

from __future__ import annotations

import pytest

from anchorft.studies import records
from anchorft.studies.w2s.mechanisms import best_eta_per_seed


@pytest.mark.parametrize("name", records.RACE_RECORDS)
def test_no_chosen_step_lies_on_its_grids_edge(name):
    """A chosen step on the grid's edge means the grid may not contain the optimum: the grid is to be widened
    (configs/w2s/sweep-race.yaml) and the race re-run, on every block recorded."""
    rows = records.load_record(name)["results"]["rows"]
    on_edge = [(r["s"], r["mode"], r["rho_sqrt_s"], r["chi"], r["eta"]) for r in rows if r["eta"] in (
        min(r["eta_grid"]), max(r["eta_grid"]))]  # fmt: skip
    assert not on_edge, f"{name}: chosen steps on the grid's edge (s, mode, rho sqrt(s), chi, eta): {on_edge}"
    assert all(not r["eta_on_edge"] for r in rows)


@pytest.mark.parametrize("name", records.RACE_RECORDS)
def test_recorded_grid_is_the_shipped_one(name):
    """The records were made with the sweep file that ships: a narrower file would make the edge test vacuous."""
    import yaml

    from anchorft.resources import configs_dir

    shipped = yaml.safe_load((configs_dir("w2s") / "sweep-race.yaml").read_text())["eta"]
    assert records.load_record(name)["spec"]["eta"] == shipped


def test_best_step_per_seed_against_a_loop():
    # three step sizes, three seeds: seed 0 fastest at 0.4, seed 1 at 0.2 (tie with 0.4 -> the smaller), seed 2
    # learns only at 0.8, and a seed that never learns gives None
    items = [
        {"eta": 0.2, "times": {"learn": [300.0, 100.0, None, None]}},
        {"eta": 0.4, "times": {"learn": [200.0, 100.0, None, None]}},
        {"eta": 0.8, "times": {"learn": [250.0, 150.0, 900.0, None]}},
    ]
    expected = []
    for i in range(4):
        best, best_t = None, None
        for it in sorted(items, key=lambda r: r["eta"]):
            t = it["times"]["learn"][i]
            if t is not None and (best_t is None or t < best_t):
                best, best_t = it["eta"], t
        expected.append(best)
    assert best_eta_per_seed(items) == expected == [0.4, 0.2, 0.8, None]


def test_he6_scaling_optima_lie_inside_the_widened_grid():
    """SFT's and the weak model's He_6 d-scaling (records/w2s-he6-sft.json): no best step on an edge of its grid,
    at any d, series or threshold, and the record was made with the shipped sweep file's grid rule."""
    import yaml

    from anchorft.resources import configs_dir

    rec = records.load_record("w2s-he6-sft")
    shipped = yaml.safe_load((configs_dir("w2s") / "sweep-d-scaling-he6.yaml").read_text())["eta_grid"]
    assert rec["spec"]["eta_grid"] == shipped
    on_edge = []
    for p in rec["results"]["points"]:
        for series, x in p["series"].items():
            grid = sorted(float(e) for e in x["etas"])
            for thr, b in x["best"].items():
                if b["edge"] is not None or b["eta"] in (grid[0], grid[-1]):
                    on_edge.append((p["params"]["d"], series, thr, b["eta"]))
    assert not on_edge, f"best steps on the grid's edge (d, series, threshold, eta): {on_edge}"
