"""Mechanism sweeps of the weak-to-strong simulator (docs/w2s.md, "Sweeps"): which ingredient does what.

- ablation: the full product of `factors` on a base config (docs/w2s.md, "Mechanism ablation"); each row carries
  its factors, the final alignments (mean and sample std over seeds, ddof=1), and the labels' mean and measured c2
  (c_n = E[y He_n(z)] / n!) with its standard error;
- race (Theorem 2; docs/w2s.md, "Theorem 2's race"): per seed, the samples until the target neurons learn and until
  the non-target neurons forget (turn to theta_1, or lose theta_2), read off the log-spaced curves by linear
  interpolation (`race_times`); each cell reports the step size with the fastest median learning (a post-hoc choice)
  and who finished first;
- weak-quality: the weak model's alignment swept (or the weak model trained); test risks, W2S's gain over its teacher
  and the PGR (`risk.risk_report`; docs/w2s.md, "The gain in the field's terms"), with `ceiling_steps` also against
  a ceiling trained for that longer budget (once per sweep run: it does not see the weak model).

Each kind is a row of `KINDS` (`kinds.SweepKind`: its checks, points, overrides, measurement, rows, table and
figure), part of the table `anchorft.studies.w2s.sweeps.KINDS` whose one engine runs them. Spec files:
configs/w2s/sweep-<kind>.yaml (first line: the command; their keys: docs/w2s.md, "Sweeps").
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anchorft.io import write_json
from anchorft.studies.w2s.experiments import run_experiment
from anchorft.studies.w2s.kinds import Figure, SweepKind, base_overrides, is_count, is_number, plain_overrides
from anchorft.w2s.config import W2SConfig, apply_overrides, config_hash
from anchorft.w2s.dynamics import train
from anchorft.w2s.modes import SUMMARY_KEYS, prepare_weak, run_modes, summarise
from anchorft.w2s.problem import build_problem
from anchorft.w2s.risk import risk_report
from anchorft.w2s.stats import crossing, digest, mean_std, median_censored
from anchorft.w2s.theory import rho_star_report

__all__ = ["KINDS", "MECH_KINDS", "FACTORS", "TABLE_COLS", "validate_mech_spec", "race_times", "measure_full_run"]
__all__ += ["measure_race", "measure_weak_quality", "ablation_points", "race_points", "weak_quality_points"]
__all__ += ["ablation_controlled", "race_controlled", "ablation_overrides", "race_overrides", "ablation_rows"]
__all__ += ["race_rows", "weak_quality_rows", "ablation_table", "race_table", "weak_quality_table"]

CURVES = ("samples", "target_alignment_seeds", "nontarget_alignment_seeds", "nontarget_target_alignment_seeds")
FACTORS = {  # factor name -> (config key, allowed values); "variant" maps to the spec's `variants`
    "transform": ("transform", ("identity", "zexp")),
    "variant": (None, None),
    "center": ("label_center", ("none", "mean")),
    "weak_norm": ("weak_norm", ("planted", "unit")),
    "loss": ("loss", ("squared", "correlation")),
    "weak": ("weak", ("planted", "trained")),
    "bias": ("strong_bias", ("none", "trained")),
    "activation": ("activation", None),  # any activation name W2SConfig accepts (he2+he4, relu, tanh, heJ, ...)
}


def validate_mech_spec(spec: dict) -> None:
    """The checks every mechanism kind shares, before any work: unknown factors or factor values, thresholds
    outside (0, 1), step-size grids with non-positive values, negative overlaps or alignments (each kind's
    `prepare` adds its own; the engine then validates every point's config)."""
    kind = spec["kind"]
    factors = spec.get("factors") or {}
    variants = spec.get("variants") or {}
    for name, values in factors.items():
        if name not in FACTORS:
            raise ValueError(f"sweep {kind!r}: unknown factor {name!r}; known: {sorted(FACTORS)}")
        if not isinstance(values, list) or not values:
            raise ValueError(f"sweep {kind!r}: factor {name!r} needs a non-empty list of values")
        allowed = tuple(variants) if name == "variant" else FACTORS[name][1]
        for v in values if allowed is not None else ():
            if v not in allowed:
                raise ValueError(f"sweep {kind!r}: unknown value {v!r} of factor {name!r}; allowed: {list(allowed)}")
    for name, v in (spec.get("thresholds") or {}).items():
        if name not in ("learn", "turn", "keep"):
            raise ValueError(f"sweep {kind!r}: unknown threshold {name!r} (learn, turn, keep)")
        if not is_number(v) or not (0.0 < v < 1.0):
            raise ValueError(f"sweep {kind!r}: threshold {name} must be in (0, 1), got {v!r}")
    for mode, grid in (spec.get("eta") or {}).items():
        if mode not in ("w2s", "sft"):
            raise ValueError(f"sweep {kind!r}: eta grid for unknown mode {mode!r} (w2s, sft)")
        if not isinstance(grid, list) or not grid or any(not is_number(e) or e <= 0 for e in grid):
            raise ValueError(
                f"sweep {kind!r}: eta grid for {mode} must be a non-empty list of positive numbers, got {grid!r}"
            )
    for name in ("rho_sqrt_s", "weak_alignment"):
        for v in spec.get(name) or []:
            if not is_number(v) or v < 0:
                raise ValueError(f"sweep {kind!r}: {name} values must be finite and >= 0, got {v!r}")


def _check_exclude(spec: dict, allowed: bool) -> None:
    """`exclude:` is the ablation's (combinations of its factors left out); another kind refuses it."""
    factors = spec.get("factors") or {}
    for item in spec.get("exclude") or []:
        if not allowed or not isinstance(item, dict) or not item or any(k not in factors for k in item):
            raise ValueError(
                f"sweep {spec['kind']!r}: exclude (ablation only) takes mappings of factor names to values, "
                f"got {item!r}"
            )


def _check_ceiling(spec: dict, allowed: bool) -> None:
    """`ceiling_steps:` is weak-quality's (the longer ceiling); another kind refuses it."""
    n = spec.get("ceiling_steps")
    if n is not None and (not allowed or not is_count(n)):
        raise ValueError(
            f"sweep {spec['kind']!r}: ceiling_steps (weak-quality only) must be a positive integer, got {n!r}"
        )


def _prepare(check: Callable[[dict], None], layout: Callable[[dict], list[dict]]):
    """A mechanism kind's `prepare`: the shared checks, the kind's own, then its points."""

    def prepare(spec: dict, fixed: set[str] | None) -> None:
        validate_mech_spec(spec)
        check(spec)
        spec["points"] = layout(spec)

    return prepare


def _check_ablation(spec: dict) -> None:
    if not spec.get("factors"):
        raise ValueError(f"sweep {spec['kind']!r}: factors must list at least one factor")
    _check_exclude(spec, True)
    _check_ceiling(spec, False)


def _check_race(spec: dict) -> None:
    kind = spec["kind"]
    _check_exclude(spec, False)
    for name in ("rho_sqrt_s", "group_sizes", "eta"):
        if not spec.get(name):
            raise ValueError(f"sweep {kind!r}: {name} must be non-empty")
    if not isinstance(spec.get("stop_at_learn", False), bool):
        raise ValueError(f"sweep {kind!r}: stop_at_learn must be true or false")
    for mode, n in (spec.get("mode_steps") or {}).items():
        if mode not in (spec.get("eta") or {}) or not is_count(n):
            raise ValueError(f"sweep {kind!r}: mode_steps needs a positive integer per swept mode, got {mode}: {n!r}")
    for size in spec.get("sizes") or []:
        if not isinstance(size, list) or len(size) != 2 or not all(is_count(v) for v in size):
            raise ValueError(f"sweep {kind!r}: sizes must be [d, s] pairs of positive integers, got {size!r}")
    _check_ceiling(spec, False)


def _check_weak_quality(spec: dict) -> None:
    _check_exclude(spec, False)
    if not (spec.get("weak_alignment") or spec.get("weak_steps")):
        raise ValueError(f"sweep {spec['kind']!r}: give weak_alignment and/or weak_steps values")
    _check_ceiling(spec, True)


def ablation_points(spec: dict) -> list[dict]:
    """The ablation's points: the product of its factors' values (dicts of factor values), less `exclude`."""
    factors = spec.get("factors") or {}
    names = list(factors)
    pts = [dict(zip(names, vals)) for vals in itertools.product(*(factors[n] for n in names))]
    excl = spec.get("exclude") or []  # combinations left out (e.g. a trained bias with the correlation loss)
    return [p for p in pts if not any(all(p.get(k) == v for k, v in e.items()) for e in excl)]


def race_points(spec: dict) -> list[dict]:
    """The race's points: per size, mode and its step sizes, loss, overlap and group sizes."""
    pts = []
    sizes = spec.get("sizes") or [None]  # [d, s] pairs; None: the base config's d and s
    for size, (mode, grid) in itertools.product(sizes, (spec.get("eta") or {}).items()):
        for loss, x, gs, eta in itertools.product(
            (spec.get("factors") or {}).get("loss", ["correlation"]), spec["rho_sqrt_s"], spec["group_sizes"], grid
        ):
            pt = {"mode": mode, "loss": loss, "rho_sqrt_s": x, "group_sizes": gs, "eta": eta}
            if size is not None:
                pt["d"], pt["s"] = size
            pts.append(pt)
    return pts


def weak_quality_points(spec: dict) -> list[dict]:
    """weak-quality's points: the planted weak model at each alignment, then the trained one at each budget."""
    pts = [{"weak": "planted", "weak_alignment": a} for a in spec.get("weak_alignment") or []]
    pts += [{"weak": "trained", "weak_steps": n} for n in spec.get("weak_steps") or []]
    return pts


def ablation_controlled(spec: dict) -> set[str]:
    """The config keys the ablation's factors and variants set (a command-line override would be lost)."""
    keys = {FACTORS[n][0] for n in (spec.get("factors") or {}) if n != "variant"}
    for v in (spec.get("variants") or {}).values():
        keys |= set(v)
    return keys


def race_controlled(spec: dict) -> set[str]:
    """The config keys the race's points set."""
    keys = {"modes", "loss", "rho", "group_sizes", "eta_w2s", "eta_sft"}
    return keys | ({"d", "s"} if spec.get("sizes") else set()) | ({"steps"} if spec.get("mode_steps") else set())


def ablation_overrides(spec: dict, pt: dict) -> dict:
    """An ablation point's overrides of the preset: the spec's, then its factors (a variant: its keys)."""
    out = base_overrides(spec)
    for name, v in pt.items():
        if name == "variant":
            out.update(spec["variants"][v])
        else:
            out[FACTORS[name][0]] = v
    return out


def race_overrides(spec: dict, pt: dict) -> dict:
    """A race point's overrides of the preset: its size, its mode's budget, and one run of its mode at its loss,
    overlap (rho = rho_sqrt_s / sqrt(s)), group sizes and step size."""
    base = base_overrides(spec)
    if "s" in pt:
        base["d"], base["s"] = pt["d"], pt["s"]
    if pt["mode"] in (spec.get("mode_steps") or {}):  # a budget per mode (W2S learns in far fewer samples)
        base["steps"] = spec["mode_steps"][pt["mode"]]
    s = int(base.get("s", spec.get("s", 16)))
    eta_key = "eta_w2s" if pt["mode"] == "w2s" else "eta_sft"
    return {
        **base,
        "modes": [pt["mode"]],
        "loss": pt["loss"],
        "rho": pt["rho_sqrt_s"] / math.sqrt(s),
        "group_sizes": pt["group_sizes"],
        eta_key: pt["eta"],
    }


def race_times(mode_metrics: dict, learn: float, turn: float, keep: float) -> dict:
    """Per seed, samples to learn (target >= learn) and to forget (non-target with theta_1 >= turn, or with its own
    theta < keep: the earlier), from a mode's logged per-seed curves; None = censored."""
    x = mode_metrics["samples"]
    tgt = np.asarray(mode_metrics["target_alignment_seeds"], dtype=float)  # (logs, S)
    own = np.asarray(mode_metrics["nontarget_alignment_seeds"], dtype=float)
    tur = np.asarray(mode_metrics["nontarget_target_alignment_seeds"], dtype=float)
    turns = [crossing(x, list(c), turn) for c in tur.T]
    loses = [crossing(x, list(c), keep, above=False) for c in own.T]
    return {
        "learn": [crossing(x, list(c), learn) for c in tgt.T],
        "forget": [min((t for t in ts if t is not None), default=None) for ts in zip(turns, loses)],
        "turn": turns,
        "lose": loses,
    }


def _point_path(spec: dict, config: W2SConfig, cache: Path, option: str = "") -> Path:
    """Where a point's record is cached: the hash of its config and kind, `option` appended (a measurement that
    differs for the same config: the race stopped at learning, weak-quality's longer ceiling)."""
    return cache / f"{digest({'c': config_hash(config), 'k': spec['kind']}, 20)}{option}.json"


def _cached(path: Path, compute: Callable[[], dict]) -> dict:
    """The record in `path` when the point was measured before, else `compute()`'s, written there."""
    if path.exists():
        return json.loads(path.read_text())
    rec = compute()
    write_json(path, rec)
    return rec


def _run_record(pt: dict, config: W2SConfig, m: dict) -> dict:
    """A point's record from a full run's metrics: per mode the per-seed finals, the labels' statistics and the
    per-seed curves; the risks (and the longer ceiling's, where there is one)."""
    rec: dict[str, Any] = {"point": pt, "config_hash": config_hash(config), "s": config.s, "d": config.d}
    rec["diverged"] = m["diverged"]
    for mode in config.modes:
        if mode not in m:
            continue
        e = m[mode]
        lab = e["labels"]
        rec[mode] = {
            "final_per_seed": e["final_per_seed"],
            "init": e["init"],
            "labels_mean": lab["mean"],
            "labels_c2": lab["hermite"][2],
            "labels_c2_se": lab["hermite_se"][2],
            "labels_c4": lab["hermite"][4],
            "labels_hermite": lab["hermite"],
            "labels_hermite_se": lab["hermite_se"],
            "bias": e.get("bias"),
            "curves": {k: e[k] for k in CURVES},
        }
    rec["risks"] = m.get("risks")
    if "ceiling_long" in m:
        rec["ceiling_long"] = {
            "steps": m["ceiling_long"]["steps"][-1],
            **{k: m["ceiling_long"][k] for k in ("init", "final_per_seed")},
        }
        rec["risks_long_ceiling"] = m["risks_long_ceiling"]
    return rec


def _full_run(config: W2SConfig) -> dict:
    with torch.no_grad():
        return run_experiment(config, None, progress=False)


def measure_full_run(spec: dict, pt: dict, config: W2SConfig, cache: Path, shared: dict) -> dict:
    """A point measured by a full run (`run_experiment`, no files), from DIR/cache/ when it was measured before:
    labels, risks and per-seed curves. The ablation's measurement, and the others' without their options."""
    return _cached(_point_path(spec, config, cache), lambda: _run_record(pt, config, _full_run(config)))


def measure_race(spec: dict, pt: dict, config: W2SConfig, cache: Path, shared: dict) -> dict:
    """A race point: a full run, or with `stop_at_learn` a run stopped once every seed has learnt."""
    if not spec.get("stop_at_learn"):
        return measure_full_run(spec, pt, config, cache, shared)
    return _cached(_point_path(spec, config, cache, "-stop"), lambda: _race_until_learnt(spec, pt, config))


def measure_weak_quality(spec: dict, pt: dict, config: W2SConfig, cache: Path, shared: dict) -> dict:
    """A weak-quality point: a full run, or with `ceiling_steps` also the longer ceiling and the risks against it."""
    if not spec.get("ceiling_steps"):
        return measure_full_run(spec, pt, config, cache, shared)

    def compute() -> dict:
        with torch.no_grad():
            return _run_record(pt, config, _weak_quality_point(spec, config, shared))

    return _cached(_point_path(spec, config, cache, f"-ceiling{spec['ceiling_steps']}"), compute)


def _long_ceiling(spec: dict, config: W2SConfig, shared: dict):
    """The ceiling trained for `ceiling_steps` (`weak-quality`): it does not see the weak model, so it is trained once
    per sweep run (kept in `shared`) and read out beside every point."""
    cfg = apply_overrides(config, {"modes": ["ceiling"], "steps": spec["ceiling_steps"]}).validate()
    key = config_hash(cfg, exclude=("weak_alignment", "weak_steps", "weak", "weak_norm", "weak_bound"))
    if key not in shared:
        shared[key] = train(cfg, build_problem(cfg), "ceiling", progress=False)
    return shared[key]


def _weak_quality_point(spec: dict, config: W2SConfig, shared: dict) -> dict:
    """`run_experiment`'s metrics without files, plus the ceiling at its longer budget (`ceiling_long`) and the risks
    and PGR against it (`risks_long_ceiling`), on the same test inputs."""
    problem = build_problem(config)
    prepare_weak(config, problem)
    m, weights = run_modes(config, problem, progress=False)
    if m["diverged"] is not None:
        return m
    m["risks"] = risk_report(config, problem, weights)
    long = _long_ceiling(spec, config, shared)
    m["ceiling_long"] = summarise(long, 0.0)
    m["risks_long_ceiling"] = risk_report(config, problem, {"w2s": weights["w2s"], "ceiling": long.weights})
    return m


def _race_until_learnt(spec: dict, pt: dict, config: W2SConfig) -> dict:
    """A race point that stops once every seed's target group has learnt (`stop_at_learn`): the race is decided by
    then, so forgetting later is not needed (it is censored at the stop); no label or risk report."""
    learn = {"learn": 0.5, **(spec.get("thresholds") or {})}["learn"]
    problem = build_problem(config)
    prepare_weak(config, problem)
    with torch.no_grad():
        res = train(config, problem, pt["mode"], progress=False, hit_threshold=learn)
    curves = {k: res.log[k] for k in CURVES}
    rec: dict[str, Any] = {"point": pt, "config_hash": config_hash(config), "s": config.s, "d": config.d}
    rec["diverged"] = None if res.diverged_at is None else {"mode": pt["mode"], "step": res.diverged_at}
    rec[pt["mode"]] = {"curves": curves, "steps_run": res.extra.get("steps_run"), "stopped_at_learn": True}
    return rec


def _init_spread(curves: dict) -> dict:
    """The non-target group's initial alignments with its own theta and with theta_1, mean and sample std over
    seeds (`nontarget_init`, `nontarget_to_theta1_init` and their `_std`), from a point's per-seed curves."""
    out = {}
    for key, name in (
        ("nontarget_alignment_seeds", "nontarget"),
        ("nontarget_target_alignment_seeds", "nontarget_to_theta1"),
    ):
        if curves.get(key):
            st = mean_std(curves[key][0])
            out[f"{name}_init"], out[f"{name}_init_std"] = st["mean"], st["std"]
    return out


def _ablation_row(rec: dict, config: W2SConfig | None = None) -> dict:
    """One row of the ablation table; with the point's config and the labels' coefficients, the population-drift
    prediction for the non-target neurons (`theory.rho_star_report`: rho*, and captured or pushed out at the
    point's overlap) beside the measured turn (final - initial alignment with theta_1)."""
    e = rec["w2s"]
    fps = e["final_per_seed"]
    row = dict(rec["point"])
    for key, name in zip(SUMMARY_KEYS, ("target", "nontarget", "nontarget_to_theta1")):
        st = mean_std(fps[key])
        row[name], row[f"{name}_std"] = st["mean"], st["std"]
    row["nontarget_to_theta1_init"] = e["init"]["nontarget_target_alignment"]
    row.update(_init_spread(e.get("curves") or {}))
    row.update({k: e[k] for k in ("labels_mean", "labels_c2", "labels_c2_se", "labels_c4")})
    row["diverged"] = rec["diverged"] is not None
    row["turn"] = row["nontarget_to_theta1"] - row["nontarget_to_theta1_init"]
    if config is not None and e.get("labels_hermite") is not None:
        star = rho_star_report(config, e["labels_hermite"], e["labels_hermite_se"])
        row["rho_star"], row["drift_predicts"] = star["rho_star"], star["predicted_at_init"].split(" ")[0]
        row["rho_star_reason"] = star["reason"]
        if config.loss == "squared":  # the same with the target group at its measured final alignment
            t = min(max(row["target"], 0.0), 1.0)
            star_t = rho_star_report(config, e["labels_hermite"], e["labels_hermite_se"], target_alignment=t)
            row["rho_star_measured_target"] = star_t["rho_star"]
            row["drift_predicts_measured_target"] = star_t["predicted_at_init"].split(" ")[0]
    if e.get("bias") is not None:  # the trained output bias at the end (strong_bias: trained)
        row["bias_final"], row["bias_final_std"] = mean_std(e["bias"])["mean"], mean_std(e["bias"])["std"]
    return row


def _first_count(event: list[float | None], learn: list[float | None]) -> int:
    """Seeds where `event` happened before the target learnt (or happened and the target never learnt)."""
    return sum(e is not None and (ell is None or e < ell) for e, ell in zip(event, learn))


def best_eta_per_seed(items: list[dict]) -> list[float | None]:
    """Per seed, the step size of the grid whose run learnt first (the smaller step on a tie; None where no step
    learnt within the budget): the spread of the cell's post-hoc choice over seeds. `items` are one cell's points,
    each with its `eta` and per-seed `times["learn"]`."""
    out: list[float | None] = []
    for i in range(len(items[0]["times"]["learn"])):
        learnt = [(r["times"]["learn"][i], r["eta"]) for r in items if r["times"]["learn"][i] is not None]
        out.append(min(learnt)[1] if learnt else None)
    return out


def _race_rows(spec: dict, recs: list[dict]) -> list[dict]:
    th = {"learn": 0.5, "turn": 0.5, "keep": 0.5, **(spec.get("thresholds") or {})}
    cells: dict[tuple, list[dict]] = {}
    for rec in recs:
        pt = rec["point"]
        times = race_times(rec[pt["mode"]]["curves"], th["learn"], th["turn"], th["keep"])
        gs = pt["group_sizes"]
        chi = gs[0] / gs[1]  # pi = 1 for both tasks
        item = {**pt, "chi": chi, "s": rec["s"], "d": rec["d"], "times": times}
        item["learn_median"], item["forget_median"] = median_censored(times["learn"]), median_censored(times["forget"])
        cells.setdefault((rec["d"], rec["s"], pt["mode"], pt["loss"], pt["rho_sqrt_s"], chi), []).append(item)
    rows = []
    for (d, s, mode, loss, x, chi), items in sorted(cells.items()):
        best = min(items, key=lambda r: (math.inf if r["learn_median"] is None else r["learn_median"], r["eta"]))
        grid = sorted(r["eta"] for r in items)
        per_seed = best_eta_per_seed(items)
        lm, fm = best["learn_median"], best["forget_median"]
        if lm is None and fm is None:
            winner = "neither"
        elif fm is None or (lm is not None and lm < fm):
            winner = "learn first"
        else:
            winner = "forget first"
        rows.append(
            {
                "d": d,
                "s": s,
                "mode": mode,
                "loss": loss,
                "rho_sqrt_s": x,
                "rho": x / math.sqrt(best["s"]),
                "chi": chi,
                "eta": best["eta"],
                "eta_grid": grid,
                "eta_on_edge": best["eta"] in (grid[0], grid[-1]),
                # the choice per seed: unstable where the seeds' fastest steps differ, on an edge where one is there
                "best_eta_per_seed": per_seed,
                "eta_unstable": len(set(per_seed)) > 1,
                "eta_per_seed_on_edge": any(e in (grid[0], grid[-1]) for e in per_seed if e is not None),
                "learn_samples": lm,
                "forget_samples": fm,
                "learn_per_seed": best["times"]["learn"],
                "forget_per_seed": best["times"]["forget"],
                "turn_per_seed": best["times"]["turn"],
                "lose_per_seed": best["times"]["lose"],
                "winner": winner,
                "forget_first_seeds": _first_count(best["times"]["forget"], best["times"]["learn"]),
                "turn_first_seeds": _first_count(best["times"]["turn"], best["times"]["learn"]),
                "turn_samples": median_censored(best["times"]["turn"]),
                "n_seeds": len(best["times"]["learn"]),
                "all_eta": [
                    {"eta": r["eta"], "learn": r["learn_median"], "forget": r["forget_median"]} for r in items
                ],
            }
        )
    return rows


def _wq_row(rec: dict) -> dict:
    row = dict(rec["point"])
    fps = rec["w2s"]["final_per_seed"]["target_alignment"]
    row["w2s_target"], row["w2s_target_std"] = mean_std(fps)["mean"], mean_std(fps)["std"]
    cps = rec["ceiling"]["final_per_seed"]["target_alignment"] if "ceiling" in rec else None
    row["ceiling_target"] = None if cps is None else mean_std(cps)["mean"]
    if "ceiling_long" in rec:
        row["ceiling_long_steps"] = rec["ceiling_long"]["steps"]
        row["ceiling_long_target"] = mean_std(rec["ceiling_long"]["final_per_seed"]["target_alignment"])["mean"]
        for dist in ("isotropic", "generative"):
            r = rec["risks_long_ceiling"][dist]
            row[f"{dist}_risk_ceiling_long@link"] = r["risk"]["ceiling@link"]
            row[f"{dist}_risk_ceiling_long@link_se"] = r["risk_se"]["ceiling@link"]
            row[f"{dist}_pgr_long_link"] = r["pgr"].get("w2s@link")
            row[f"{dist}_pgr_long_denominator_link"] = r["pgr_denominator"]["ceiling@link"]
            row[f"{dist}_pgr_long_denominator_link_se"] = r["pgr_denominator_se"]["ceiling@link"]
    for dist in ("isotropic", "generative"):
        r = (rec.get("risks") or {}).get(dist)
        if r is None:
            continue
        for name in ("weak", "w2s", "ceiling", "w2s@link", "ceiling@link"):
            if name in r["risk"]:
                row[f"{dist}_risk_{name}"] = r["risk"][name]
                row[f"{dist}_risk_{name}_se"] = r["risk_se"][name]
        row[f"{dist}_pgr"] = r["pgr"].get("w2s")
        row[f"{dist}_pgr_link"] = r["pgr"].get("w2s@link")
        for key in ("pgr_denominator", "pgr_denominator_se"):
            row[f"{dist}_{key}_link"] = (r.get(key) or {}).get("ceiling@link")
        for name, tag in (("w2s@link", "_link"), ("w2s", "")):  # paired on the same inputs (risk.risk_report)
            if name in (r.get("gain_over_weak") or {}):
                row[f"{dist}_gain{tag}"] = r["gain_over_weak"][name]
                row[f"{dist}_gain{tag}_se"] = r["gain_over_weak_se"][name]
                row[f"{dist}_surpasses_teacher{tag}"] = r["surpasses_teacher"][name]
    return row


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) >= 1000 else f"{v:.3f}"
    return str(v)


def _table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


TABLE_COLS = {
    "ablation": [
        *("transform", "variant", "center", "bias", "weak_norm", "loss", "labels_mean", "labels_c2", "labels_c2_se"),
        *("target", "target_std", "nontarget", "nontarget_std", "nontarget_to_theta1", "nontarget_to_theta1_std"),
    ],
    "ablation-activation": [
        *("activation", "center", "loss", "bias", "labels_mean", "labels_c2", "target", "target_std"),
        *("nontarget_init", "nontarget_init_std", "nontarget_to_theta1_init", "nontarget_to_theta1_init_std"),
        *("nontarget", "nontarget_std", "nontarget_to_theta1", "nontarget_to_theta1_std", "turn"),
        *("rho_star", "drift_predicts", "rho_star_measured_target", "drift_predicts_measured_target"),
    ],
    "race": [
        *("d", "s", "mode", "loss", "rho_sqrt_s", "chi", "eta", "eta_on_edge", "best_eta_per_seed", "eta_unstable"),
        *("learn_samples", "forget_samples", "turn_samples", "winner", "forget_first_seeds", "turn_first_seeds"),
    ],
    "weak-quality": [
        *("weak", "weak_alignment", "weak_steps", "w2s_target", "w2s_target_std", "ceiling_target"),
        *("isotropic_risk_weak", "isotropic_risk_w2s@link", "isotropic_risk_ceiling@link"),
        *("isotropic_gain_link", "isotropic_gain_link_se", "isotropic_surpasses_teacher_link", "isotropic_pgr_link"),
        *("generative_risk_weak", "generative_risk_w2s@link", "generative_risk_ceiling@link"),
        *("generative_gain_link", "generative_gain_link_se", "generative_surpasses_teacher_link"),
        "generative_pgr_link",
        *("ceiling_long_target", "isotropic_risk_ceiling_long@link", "isotropic_pgr_long_link"),
        *("generative_risk_ceiling_long@link", "generative_pgr_long_link"),
    ],
}


def ablation_rows(spec: dict, recs: list[dict], configs: list[W2SConfig]) -> dict:
    """The ablation's rows: one per point, with its config's population-drift prediction."""
    return {"rows": [_ablation_row(r, c) for r, c in zip(recs, configs)]}


def race_rows(spec: dict, recs: list[dict], configs: list[W2SConfig]) -> dict:
    """The race's rows: one per cell (size, mode, loss, overlap, chi), at its step size that learnt fastest."""
    return {"rows": _race_rows(spec, recs)}


def weak_quality_rows(spec: dict, recs: list[dict], configs: list[W2SConfig]) -> dict:
    """weak-quality's rows: one per point, its risks, gains and PGRs."""
    return {"rows": [_wq_row(r) for r in recs]}


def ablation_table(spec: dict, rows: list[dict]) -> str:
    """The ablation's table.md (an ablation over the student, `activation` among its factors: its own columns)."""
    by_activation = "activation" in (spec.get("factors") or {})
    return _table(rows, TABLE_COLS["ablation-activation" if by_activation else "ablation"])


def race_table(spec: dict, rows: list[dict]) -> str:
    """The race's table.md."""
    return _table(rows, TABLE_COLS["race"])


def weak_quality_table(spec: dict, rows: list[dict]) -> str:
    """weak-quality's table.md."""
    return _table(rows, TABLE_COLS["weak-quality"])


KINDS: dict[str, SweepKind] = {
    k.name: k
    for k in (
        SweepKind(
            "ablation",
            prepare=_prepare(_check_ablation, ablation_points),
            overrides=ablation_overrides,
            measure=measure_full_run,
            summarise=ablation_rows,
            figure=Figure("plots_mech", "plot_ablation"),
            controlled=ablation_controlled,
            table=ablation_table,
        ),
        SweepKind(
            "race",
            prepare=_prepare(_check_race, race_points),
            overrides=race_overrides,
            measure=measure_race,
            summarise=race_rows,
            figure=Figure("plots_mech", "plot_race"),
            controlled=race_controlled,
            table=race_table,
        ),
        SweepKind(
            "weak-quality",
            prepare=_prepare(_check_weak_quality, weak_quality_points),
            overrides=plain_overrides,
            measure=measure_weak_quality,
            summarise=weak_quality_rows,
            figure=Figure("plots_mech", "plot_weak_quality"),
            controlled=lambda spec: {"weak", "weak_alignment", "weak_steps"},
            table=weak_quality_table,
        ),
    )
}
MECH_KINDS = tuple(KINDS)
