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
