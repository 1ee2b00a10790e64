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
    import dataclasses

    import anchorft.studies.w2s.plots_mech as plots_mech
    from anchorft.studies.w2s import mechanisms
    from anchorft.studies.w2s.sweeps import KINDS, run_sweep

    keys = ("target_alignment", "nontarget_alignment", "nontarget_target_alignment")

    def fake_evaluate(spec, pt, config, cache, shared):
        labels = _vals(pt, "labels", 4)
        w2s = {"final_per_seed": {k: _vals(pt, k) for k in keys}, "init": {"nontarget_target_alignment": 0.01}}
        w2s.update(zip(("labels_mean", "labels_c2", "labels_c2_se", "labels_c4"), labels))
        return {"point": pt, "diverged": None, "w2s": w2s}

    monkeypatch.setitem(KINDS, "ablation", dataclasses.replace(KINDS["ablation"], measure=fake_evaluate))
    monkeypatch.setattr(plots_mech, "plot_ablation", lambda result, path, axis: None)
    res = run_sweep("ablation", tmp_path, quick=True, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    lines = [ln for ln in (tmp_path / "table.md").read_text().splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert len(lines) - 1 == len(res["rows"]) == len(saved["rows"]) == len(mechanisms.ablation_points(res["spec"])) > 1
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


# The race and weak-quality tables, through the command on a tiny sweep file: every cell of table.md and every
# row of results.json recomputed here from the per-seed curves, final alignments and risks that results.json
# keeps for each point.


def _sweep(tmp_path, kind: str, spec: str) -> tuple[dict, list[dict]]:
    from anchorft.cli import command

    main = command("w2s")

    path = tmp_path / f"sweep-{kind}.yaml"
    path.write_text(spec)
    out = tmp_path / kind
    assert main(["sweep", "--kind", kind, "--spec", str(path), "--out", str(out), "--quiet"]) == 0
    saved = json.loads((out / "results.json").read_text())
    lines = [ln for ln in (out / "table.md").read_text().splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[1:]]
    assert len(cells) == len(saved["rows"]) > 1
    return saved, cells


def _cell_is(cell: str, value) -> None:
    """A table cell shows `value` (None: "-"; numbers to 3 decimals, or 3 significant digits from 1000 on)."""
    if value is None:
        assert cell == "-"
    elif isinstance(value, (bool, str)):
        assert cell == str(value)
    else:
        assert float(cell) == pytest.approx(value, rel=5e-3, abs=5e-4), (cell, value)


def _first(xs: list[float], ys: list[float], level: float, above: bool = True) -> float | None:
    """Where a curve first reaches `level`, linear between logged points; None if it never does."""
    for k, y in enumerate(ys):
        if (y >= level) if above else (y < level):
            if k == 0:
                return float(xs[0])
            return xs[k - 1] + (level - ys[k - 1]) / (y - ys[k - 1]) * (xs[k] - xs[k - 1])
    return None


def _median_or_none(v: list[float | None]) -> float | None:
    m = float(np.median([np.inf if x is None else x for x in v]))
    return None if np.isinf(m) else m


def _inf(v: float | None) -> float:
    return np.inf if v is None else v


def _before(event: list[float | None], learn: list[float | None]) -> int:
    """Seeds where `event` came before the target learnt (or came and the target never learnt)."""
    return sum(e is not None and (ell is None or e < ell) for e, ell in zip(event, learn))


RACE = """
preset: paper
config: {d: 32, s: 8, steps: 60, n_seeds: 3, schedule: constant, n_log: 12, weak_neurons: 4, batch_size: 8, chunk: 8,
         label_samples: 512, risk_samples: 128}
rho_sqrt_s: [0.0, 1.5]
group_sizes: [[4, 8], [4, 4]]
eta:
  sft: [0.5, 1.0]
  w2s: [0.4, 0.8]
thresholds: {learn: 0.3, turn: 0.3, keep: 0.85}
"""


def test_race_table_is_the_per_seed_curves_summarised(tmp_path):
    saved, cells = _sweep(tmp_path, "race", RACE)
    th = {"learn": 0.3, "turn": 0.3, "keep": 0.85}
    by_cell: dict[tuple, list[dict]] = {}
    for rec in saved["points"]:
        pt = rec["point"]
        c = rec[pt["mode"]]["curves"]
        x = c["samples"]
        tgt, own, tur = (np.asarray(c[f"{k}_seeds"]) for k in ("target_alignment", "nontarget_alignment",
                                                               "nontarget_target_alignment"))  # fmt: skip
        seeds = range(tgt.shape[1])
        learn = [_first(x, list(tgt[:, i]), th["learn"]) for i in seeds]
        turn = [_first(x, list(tur[:, i]), th["turn"]) for i in seeds]
        lose = [_first(x, list(own[:, i]), th["keep"], above=False) for i in seeds]
        forget = [min((t for t in (a, b) if t is not None), default=None) for a, b in zip(turn, lose)]
        chi = pt["group_sizes"][0] / pt["group_sizes"][1]
        item = {"eta": pt["eta"], "learn": learn, "turn": turn, "forget": forget}
        by_cell.setdefault((pt["mode"], pt["rho_sqrt_s"], chi), []).append(item)
    assert len(by_cell) == len(saved["rows"]) == 8
    seen_learnt = seen_forgot = False
    for row, cell in zip(saved["rows"], cells):
        items = by_cell[(row["mode"], row["rho_sqrt_s"], row["chi"])]
        best = min(items, key=lambda r: (_inf(_median_or_none(r["learn"])), r["eta"]))  # fastest median learning
        lm, fm, tm = (_median_or_none(best[k]) for k in ("learn", "forget", "turn"))
        seen_learnt |= lm is not None
        seen_forgot |= fm is not None
        if lm is None and fm is None:
            winner = "neither"
        elif fm is None or (lm is not None and lm < fm):
            winner = "learn first"
        else:
            winner = "forget first"
        etas = [r["eta"] for r in items]
        want = {
            "d": 32, "s": 8, "mode": row["mode"], "loss": "correlation", "rho_sqrt_s": row["rho_sqrt_s"],
            "chi": row["chi"], "eta": best["eta"], "eta_on_edge": best["eta"] in (min(etas), max(etas)),
            "learn_samples": lm, "forget_samples": fm, "turn_samples": tm, "winner": winner,
            "forget_first_seeds": _before(best["forget"], best["learn"]),
            "turn_first_seeds": _before(best["turn"], best["learn"]),
        }  # fmt: skip
        for col, v in want.items():
            _cell_is(cell[col], v)
            if isinstance(v, float):
                assert row[col] == pytest.approx(v, rel=1e-9), col
            else:
                assert row[col] == v, col
        assert row["learn_per_seed"] == pytest.approx(best["learn"]) and row["n_seeds"] == 3
    assert seen_learnt and seen_forgot  # the sweep exercises both times, not only censored cells


WEAK_QUALITY = """
preset: paper
config: {d: 32, s: 8, n_tasks: 1, pi: [1.0], link: he2, group_sizes: [8], modes: [w2s, ceiling],
       steps: 200, n_seeds: 3, label_center: mean, weak_norm: unit, weak_neurons: 4, loss: squared,
       batch_size: 8, chunk: 8, n_log: 6, label_samples: 512, risk_samples: 256}
weak_alignment: [0.0, 0.9]
ceiling_steps: 400
"""


def test_weak_quality_table_is_the_per_seed_values_summarised(tmp_path):
    saved, cells = _sweep(tmp_path, "weak-quality", WEAK_QUALITY)
    seen = set()
    for row, cell, rec in zip(saved["rows"], cells, saved["points"]):
        assert {k: row[k] for k in rec["point"]} == rec["point"]
        w2s = rec["w2s"]["final_per_seed"]["target_alignment"]
        want = {
            "weak": "planted",
            "weak_alignment": rec["point"]["weak_alignment"],
            "w2s_target": np.mean(w2s),
            "w2s_target_std": np.std(w2s, ddof=1),
            "ceiling_target": np.mean(rec["ceiling"]["final_per_seed"]["target_alignment"]),
            "ceiling_long_target": np.mean(rec["ceiling_long"]["final_per_seed"]["target_alignment"]),
        }
        for dist in ("isotropic", "generative"):
            for tag, r, ceil in (("", rec["risks"][dist], "ceiling"), ("_long", rec["risks_long_ceiling"][dist],
                                                                         "ceiling_long")):  # fmt: skip
                risk = {name: float(np.mean(v)) for name, v in r["risk_per_seed"].items()}  # mean over seeds
                gain = risk["weak"] - risk["w2s@link"]  # paired on the same inputs: the difference of the means
                den, den_se = risk["weak"] - risk["ceiling@link"], r["pgr_denominator_se"]["ceiling@link"]
                want[f"{dist}_risk_{ceil}@link"] = risk["ceiling@link"]
                want[f"{dist}_pgr{tag}_link"] = (risk["weak"] - risk["w2s@link"]) / den if den > 3 * den_se else None
                if tag == "":
                    se = r["gain_over_weak_se"]["w2s@link"]
                    want[f"{dist}_risk_weak"], want[f"{dist}_risk_w2s@link"] = risk["weak"], risk["w2s@link"]
                    want[f"{dist}_gain_link"], want[f"{dist}_gain_link_se"] = gain, se
                    want[f"{dist}_surpasses_teacher_link"] = bool(gain > 3 * se)
                seen.add(("pgr" + tag, want[f"{dist}_pgr{tag}_link"] is not None))
        seen |= {("surpasses", want[f"{d}_surpasses_teacher_link"]) for d in ("isotropic", "generative")}
        assert set(want) <= set(cell)
        for col, v in want.items():
            _cell_is(cell[col], v)
            assert row[col] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v), col
    # the sweep exercises both sides: a teacher surpassed and not, a PGR reported against either ceiling
    assert {("surpasses", True), ("surpasses", False), ("pgr", True), ("pgr_long", True)} <= seen
