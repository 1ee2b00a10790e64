"""results.json: written, read back and rewritten byte for byte; per-run entries against numpy."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from anchorft.studies.testbed.results import CompareResults, load_results, save_results


def _seed(seed: int, idg: float) -> dict:
    return {"seed": seed, "id_greedy": idg, "ood_mean": 0.5, "ood": {"reverse": 0.4, "sort": 0.6}}


def test_round_trip_and_record(tmp_path):
    res = CompareResults(base={"id_greedy": 0.1, "ood_mean": 0.6, "ood": {"reverse": 0.5}}, settings={"seeds": [0, 1]})
    res.record("sft", "sft", {"learning_rate": 1e-3}, [_seed(0, 0.2), _seed(1, 0.4)])
    entry = res.methods["sft"]
    assert entry["id_greedy"] == pytest.approx(np.mean([0.2, 0.4]))
    assert entry["std"]["id_greedy"] == pytest.approx(statistics.stdev([0.2, 0.4]))  # sample std, ddof 1
    assert entry["method"] == "sft" and entry["settings"] == {"learning_rate": 1e-3} and len(entry["per_seed"]) == 2
    path = tmp_path / "results.json"
    save_results(res, path)
    text = path.read_text()
    assert text == json.dumps(res.to_dict(), indent=2) + "\n"
    assert json.loads(text)["provenance"]["git_commit"] == res.provenance["git_commit"]  # the code that made it
    back = load_results(tmp_path)  # a folder or the file itself
    assert back == res and load_results(path) == res
    save_results(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text


def test_load_names_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"base": {}}))
    with pytest.raises(ValueError, match="'methods'"):
        load_results(tmp_path)


def test_interpolated_front_and_excess():
    from anchorft.studies.testbed.report import front_table, front_weights, pareto_front

    def interpolated_front(points, x):  # the front's gain at retention x, as front_table weighs it
        return sum(w * points[i][1] for i, w in front_weights(points, x))

    pts = [(1.0, 0.0), (0.9, 10.0), (0.8, 12.0), (0.85, 9.0)]  # (0.85, 9) is dominated by (0.9, 10)
    assert interpolated_front(pts, 0.95) == pytest.approx(5.0)
    assert interpolated_front(pts, 0.85) == pytest.approx(11.0)  # on the segment (0.8, 12) - (0.9, 10)
    assert interpolated_front(pts, 0.5) == 12.0 and interpolated_front(pts, 1.2) == 0.0
    assert pareto_front(pts) == [(0.8, 12.0), (0.9, 10.0), (1.0, 0.0)]

    def run(method, pairs):
        return {"method": method, "per_seed": [{"ood_mean": o, "id_greedy": i} for o, i in pairs]}

    results = {
        "base": {"ood_mean": 1.0, "id_greedy": 0.0},
        "methods": {
            "a": run("l2", [(0.9, 0.10)]),
            "b": run("rpsft", [(0.95, 0.09), (0.95, 0.10), (0.95, 0.11)]),  # front at 0.95: 5 points; gain 10 +- 0.58
            "c": run("rpsft", [(0.95, 0.05), (0.95, 0.06)]),
        },
    }
    rows = {r["run"]: r for r in front_table(results, ["a"])}
    assert rows["b"]["front_gain"] == pytest.approx(5.0) and rows["b"]["excess"] == pytest.approx(5.0)
    assert rows["b"]["se"] == pytest.approx(1.0 / 3**0.5) and rows["b"]["above_2se"]
    assert not rows["c"]["above_2se"] and rows["a"]["se"] is None and rows["a"]["front_run"]


def _run_with_val(method, test_pairs, val_pairs):
    seeds = [
        {"ood_mean": o, "id_greedy": i, "val": {"ood_mean": vo, "id_greedy": vi}}
        for (o, i), (vo, vi) in zip(test_pairs, val_pairs)
    ]
    return {"method": method, "per_seed": seeds}


def test_knob_chosen_on_validation_items_only():
    """pick_on_val chooses the knob value furthest above the front on the validation items, then reports that
    run's row on the reported items: here the test-best run ("hi") is not the val-best one ("lo")."""
    from anchorft.studies.testbed.report import front_table, parse_picks, pick_on_val

    results = {
        "base": {"ood_mean": 1.0, "id_greedy": 0.0, "val": {"ood_mean": 0.5, "id_greedy": 0.0}},
        "methods": {
            "front": _run_with_val("l2", [(0.9, 0.10)], [(0.45, 0.10)]),  # retention 0.9, gain 10 on both splits
            "lo": _run_with_val("rpsft", [(0.95, 0.05), (0.95, 0.07)], [(0.475, 0.11), (0.475, 0.13)]),
            "hi": _run_with_val("rpsft", [(0.95, 0.12), (0.95, 0.14)], [(0.475, 0.02), (0.475, 0.04)]),
        },
    }
    val = {r["run"]: r for r in front_table(results, ["front"], "val")}
    # the validation retention is against the base's validation OOD mean (0.475 / 0.5), not the reported one
    assert val["lo"]["retention"] == pytest.approx(0.95) and val["lo"]["excess"] == pytest.approx(12.0 - 5.0)
    (row,) = pick_on_val(results, ["front"], parse_picks(["opt=hi,lo"]))
    assert row["run"] == "lo" and row["group"] == "opt"
    assert row["candidates"] == {"hi": pytest.approx(3.0 - 5.0), "lo": pytest.approx(7.0)}
    assert row["id_gain"] == pytest.approx(6.0) and row["excess"] == pytest.approx(1.0)  # its reported-items row
    for bad in (["opt"], ["=a"], ["opt="], ["o=a", "o=b"]):
        with pytest.raises(ValueError, match="--pick"):
            parse_picks(bad)
    with pytest.raises(ValueError, match="not in the results"):
        pick_on_val(results, ["front"], {"opt": ["lo", "nope"]})
    del results["base"]["val"]
    with pytest.raises(ValueError, match="no validation split"):
        front_table(results, ["front"], "val")


def test_mean_over_seeds_keeps_validation_means():
    from anchorft.studies.testbed.results import mean_over_seeds

    per_seed = [
        {**_seed(0, 0.2), "val": {"id_greedy": 0.1, "ood_mean": 0.8, "ood": {}}},
        {**_seed(1, 0.4), "val": {"id_greedy": 0.3, "ood_mean": 0.6, "ood": {}}},
    ]
    out = mean_over_seeds(per_seed)
    assert out["val"] == {"id_greedy": pytest.approx(0.2), "ood_mean": pytest.approx(0.7)}
    assert "val" not in mean_over_seeds([_seed(0, 0.2)])


def test_front_standard_error_enters_the_joint_verdict():
    """On a segment between two front runs at weights 1 - t and t, the front's SE is hypot((1 - t) se0, t se1);
    a run above the front by more than 2 of its own SE but not by 2 joint SE gets yes, then no."""
    from anchorft.studies.testbed.report import front_table, front_weights

    def run(method, gains, keep):
        return {"method": method, "per_seed": [{"ood_mean": keep, "id_greedy": g} for g in gains]}

    a, b = [0.10, 0.20, 0.30], [0.0, 0.10, 0.20]  # retention 0.8 and 0.9: means 20 and 10 points, SE 5.8 each
    results = {
        "base": {"ood_mean": 1.0, "id_greedy": 0.0},
        "methods": {
            "a": run("l2", a, 0.8),
            "b": run("l2", b, 0.9),
            "c": run("rpsft", [0.195, 0.20, 0.205], 0.85),  # on the segment at t = 0.5: front 15, gain 20
        },
    }
    assert front_weights([(1.0, 0.0), (0.8, 20.0), (0.9, 10.0)], 0.85) == [
        (1, pytest.approx(0.5)),
        (2, pytest.approx(0.5)),
    ]
    c = {r["run"]: r for r in front_table(results, ["a", "b"])}["c"]
    se_a, se_b = (100 * statistics.stdev(v) / 3**0.5 for v in (a, b))
    se_c = 100 * statistics.stdev([0.195, 0.20, 0.205]) / 3**0.5
    assert c["front_gain"] == pytest.approx(15.0) and c["excess"] == pytest.approx(5.0)
    assert c["se_front"] == pytest.approx(((0.5 * se_a) ** 2 + (0.5 * se_b) ** 2) ** 0.5)
    assert c["se_joint"] == pytest.approx((se_c**2 + c["se_front"] ** 2) ** 0.5)
    assert c["above_2se"] and not c["above_2se_joint"]  # 5 > 2 x 0.29, but 5 < 2 x 4.1


def test_retention_noise_enters_the_joint_se_through_the_slope():
    """A run whose retention varies over seeds: its retention SE times the front's slope joins the joint SE."""
    from anchorft.studies.testbed.report import front_table

    def run(method, pairs):
        return {"method": method, "per_seed": [{"ood_mean": k, "id_greedy": g} for k, g in pairs]}

    results = {
        "base": {"ood_mean": 1.0, "id_greedy": 0.0},
        "methods": {
            "a": run("l2", [(0.8, 0.20)] * 3),
            "b": run("l2", [(0.9, 0.10)] * 3),  # the front: slope (10 - 20) / (0.9 - 0.8) = -100 points per unit
            "d": run("rpsft", [(0.84, 0.19), (0.85, 0.20), (0.86, 0.21)]),
        },
    }
    d = {r["run"]: r for r in front_table(results, ["a", "b"])}["d"]
    se_gain = 100 * statistics.stdev([0.19, 0.20, 0.21]) / 3**0.5
    se_x = statistics.stdev([0.84, 0.85, 0.86]) / 3**0.5
    assert d["se_front"] == pytest.approx(0.0)  # the front runs have no spread
    assert d["se_joint"] == pytest.approx((se_gain**2 + (100 * se_x) ** 2) ** 0.5)
