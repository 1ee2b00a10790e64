"""Sweeps of the weak-to-strong simulator: one engine for every kind (docs/w2s.md "Sweeps").

A sweep is a YAML file configs/w2s/sweep-<kind>.yaml: `preset:`, `config:` (its overrides for every point), the
points (or what they are built from), the measurement, and a `quick` variant (how it merges: docs/w2s.md "Sweeps").
Each kind is a row of `KINDS` (`kinds.SweepKind`: its checks, points, measurement, summary, x-axis, table and
figure); the engine asks the row, never the kind's name:

- s-scaling / d-scaling / d-scaling-w2s: samples until the target alignment reaches `threshold`, per seed, for
  each `series` (a mode, or "weak"), fitted in log-log against the kind's axis (s or d) with the censored seeds
  kept (`_scaling_summary`);
- chi, overlap, rpsft: full runs (`run_experiment`) summarised per point; an overlap `grid` over several s gives a
  phase diagram (`expand_grid`, `phase_boundary`); with `bisect:` an overlap sweep also locates each seed's turn
  boundary in rho by bisection with single-seed runs (`bisect_turns`). These kinds and the scaling ones write
  DIR/sweep.json;
- ablation, race, weak-quality (rows of `anchorft.studies.w2s.mechanisms.KINDS`): DIR/results.json (rows, points)
  and DIR/table.md.

Every kind writes DIR/<kind>.png. The points are the cells of a grid (`anchorft.studies.grid`): each finished
point is recorded in DIR/cells.jsonl, and a sweep stopped part-way (Ctrl-C, `anchorft.stop`) resumes from there,
each point measured once; `workers` > 1 measures that many points at once in spawned processes. Every point is
also cached in DIR/cache/<hash>.json, keyed by the hash of its resolved config and measurement (so a point is
reused by another sweep that has it too). The resolved spec holds the preset and its overrides as one `base`
mapping.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anchorft import stop
from anchorft.dataclass_yaml import merge_mappings
from anchorft.errors import close_hint, read_yaml
from anchorft.io import write_json, write_text
from anchorft.provenance import write_metrics
from anchorft.runs import existing_files, run_claimed
from anchorft.studies.grid import Cell, Grid, RayCluster, executor_for
from anchorft.studies.w2s import mechanisms as mech
from anchorft.studies.w2s.experiments import run_experiment
from anchorft.studies.w2s.kinds import Figure, SweepKind, XAxis, is_count, plain_overrides
from anchorft.w2s.config import PRESET_DIR, W2SConfig, apply_overrides, config_hash, load_config
from anchorft.w2s.dynamics import train, train_weak
from anchorft.w2s.hermite import information_exponent
from anchorft.w2s.modes import SUMMARY_KEYS, prepare_weak
from anchorft.w2s.problem import build_problem
from anchorft.w2s.stats import (
    bisect_sign_change,
    crossing,
    digest,
    fit_loglog,
    loglog_slope,
    mean_std,
    median_censored,
    sign_changes,
)
from anchorft.w2s.survival import fit_censored_lognormal
from anchorft.w2s.theory import predicted_slopes

__all__ = ["KINDS", "MECH_KINDS", "SweepKind", "run_sweep", "load_sweep", "point_config", "evaluate_point"]
__all__ += ["expand_grid", "phase_boundary", "fit_loglog", "median_censored", "crossing", "bisect_turns", "seed_turns"]
__all__ += ["validate_sweep", "thresholds_of", "sweep_cells"]

ETA_KEYS = {"w2s": "eta_w2s", "sft": "eta_sft", "weak": "weak_eta"}


def _fold_preset(section: dict, where: str) -> dict:
    """`section` (a sweep file, or its quick variant) with `preset:` and `config:` folded into the resolved spec's
    one `base` mapping (the preset under `preset`, then the overrides), where the first of them was."""
    config = section.get("config", {})
    if "base" in section:
        raise ValueError(
            f"{where}: `base:` is now `preset:` (the W2S preset: a name, a path or a list) and `config:`"
            " (its overrides)"
        )
    if not isinstance(config, dict) or "preset" in config:
        raise ValueError(f"{where}: config: is a mapping of overrides of the preset (the preset is `preset:`)")
    base = {**({"preset": section["preset"]} if "preset" in section else {}), **config}
    out: dict[str, Any] = {}
    for key, value in section.items():
        if key in ("preset", "config"):
            out.setdefault("base", base)
        else:
            out[key] = value
    return out


def load_sweep(kind: str, quick: bool = False, path: str | os.PathLike | None = None) -> dict:
    """The sweep definition of `kind` (configs/w2s/sweep-<kind>.yaml), its `quick` variant merged in; validated."""
    if kind not in KINDS:
        raise ValueError(f"unknown sweep kind {kind!r}{close_hint(kind, KINDS) or f': choose from {list(KINDS)}'}")
    p = Path(path) if path is not None else PRESET_DIR / f"sweep-{kind}.yaml"
    spec = read_yaml(p, "--spec" if path is not None else "sweep")  # malformed YAML: file and line named
    if not isinstance(spec, dict):
        raise ValueError(f"{p}: a sweep file is a YAML mapping, got {type(spec).__name__}")
    spec = _fold_preset(spec, str(p))
    if quick:  # merged over the file as a preset's child is over its parent: mappings key by key (a quick
        # factor list replaces that factor only), anything else replaced
        spec = merge_mappings(spec, _fold_preset(spec.get("quick", {}), f"{p}: quick"))
    spec.pop("quick", None)
    spec["kind"] = kind
    spec["quick_run"] = quick
    spec.setdefault("base", {})
    _prepare(spec, None)
    return spec


def _prepare(spec: dict, fixed: set[str] | None) -> None:
    """The kind's `prepare` (its points, its checks), then every point's config built and validated: all before
    any work."""
    KINDS[spec["kind"]].prepare(spec, fixed)
    for pt in spec["points"]:
        point_config(spec, pt)


def expand_grid(grid: dict, fixed: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """The points of a 2-D overlap grid: for each row of `grid["rows"]` (overrides, with an integer `s`) and each
    value x of `grid["rho_sqrt_s"]`, the row's overrides and rho = x / sqrt(s) (Theorem 2's units, rho in
    multiples of s^{-1/2}). Row keys named in `fixed` (set on the command line) are dropped, so that the command
    line wins over the rows; `s` and `rho` always come from the grid."""
    rows, xs = grid.get("rows"), grid.get("rho_sqrt_s")
    if not rows or not xs:
        raise ValueError("grid: rows and rho_sqrt_s must both be non-empty lists (empty grid)")
    points = []
    for row in rows:
        s = row.get("s") if isinstance(row, dict) else None
        if not is_count(s):
            raise ValueError(f"grid.rows: every row needs a positive integer s, got {row!r}")
        for x in xs:
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x < 0:
                raise ValueError(f"grid.rho_sqrt_s: values must be finite and >= 0, got {x!r}")
            pt = {k: v for k, v in row.items() if k == "s" or k not in fixed}
            pt["rho"] = float(x) / math.sqrt(s)
            points.append(pt)
    return points


def _prepare_runs(check: Callable[[dict], None] = lambda spec: None) -> Callable[[dict, set[str] | None], None]:
    """The `prepare` of a scaling or full-run kind: its `points`, or its overlap `grid` laid out, then
    `validate_sweep` with the kind's own `check` of its keys."""

    def prepare(spec: dict, fixed: set[str] | None) -> None:
        if "grid" in spec:
            if fixed is None and spec.get("points"):
                raise ValueError(f"sweep {spec['kind']!r}: give either points or grid, not both")
            spec["points"] = expand_grid(spec["grid"], fixed or frozenset())
        validate_sweep(spec, check)

    return prepare


def validate_sweep(spec: dict, check: Callable[[dict], None] = lambda spec: None) -> None:
    """Clear errors for an empty grid, the kind's own keys (`check`), bad phase levels or a `bisect:` its kind does
    not take, before any work."""
    if not spec.get("points"):
        typo = next((k for k in spec if k not in ("points", "grid") and close_hint(k, ("points", "grid"))), None)
        if typo is not None:  # a misspelt `points:` or `grid:` is named, not reported as an empty grid
            raise ValueError(f"sweep {spec.get('kind')!r}: unknown key {typo!r}{close_hint(typo, ('points', 'grid'))}")
        raise ValueError(f"sweep {spec.get('kind')!r}: empty grid (no points)")
    check(spec)
    for name, v in (spec.get("phase") or {}).items():
        if name not in ("turn", "drop") or not isinstance(v, (int, float)) or not (0.0 < v < 1.0):
            raise ValueError(f"sweep {spec['kind']!r}: phase.{name} must be turn or drop, in (0, 1), got {v!r}")
    _check_bisect(spec, KINDS[spec["kind"]].bisect)


def _check_scaling(spec: dict) -> None:
    """A scaling sweep's thresholds in (0, 1), its step-size grid, and its series (w2s, sft, weak)."""
    for thr in thresholds_of(spec):
        if not isinstance(thr, (int, float)) or isinstance(thr, bool) or not (0.0 < thr < 1.0):
            raise ValueError(f"sweep {spec['kind']!r}: threshold must be in (0, 1), got {thr!r}")
    grid = spec.get("eta_grid")
    if grid is not None:
        f, w, mw = grid.get("factor", 2.0), grid.get("width", 1), grid.get("max_widen", 2)
        if not isinstance(f, (int, float)) or not f > 1.0:
            raise ValueError(f"sweep {spec['kind']!r}: eta_grid.factor must be > 1, got {f!r}")
        if not isinstance(w, int) or w < 0 or not isinstance(mw, int) or mw < 0:
            raise ValueError(f"sweep {spec['kind']!r}: eta_grid.width and max_widen must be integers >= 0")
    for s in spec.get("series", []):
        if s not in ("w2s", "sft", "weak"):
            raise ValueError(f"sweep {spec['kind']!r}: unknown series {s!r} (w2s, sft, weak)")
    if not spec.get("series"):
        raise ValueError(f"sweep {spec['kind']!r}: series must list at least one of w2s, sft, weak")


def _check_bisect(spec: dict, allowed: bool) -> None:
    """`bisect: {tol: T}` (the kinds that bisect: overlap): the per-seed turn boundary bisected to a width of T in
    rho."""
    opts = spec.get("bisect")
    if opts is None:
        return
    if not allowed or not isinstance(opts, dict) or set(opts) - {"tol"}:
        raise ValueError(f"sweep {spec['kind']!r}: bisect is {{tol: width in rho}}, for overlap sweeps only")
    tol = opts.get("tol", 0.002)
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not (0.0 < tol < 1.0):
        raise ValueError(f"sweep {spec['kind']!r}: bisect.tol must be in (0, 1), got {tol!r}")


def thresholds_of(spec: dict) -> list:
    """The escape thresholds of a scaling sweep: `thresholds` (a list) or the single `threshold`."""
    thr = spec.get("thresholds", spec.get("threshold"))
    return list(thr) if isinstance(thr, (list, tuple)) else [thr]


def point_config(spec: dict, point: dict) -> W2SConfig:
    """The resolved config of one point: the spec's preset, then its kind's overrides for the point."""
    return load_config(spec["base"].get("preset"), KINDS[spec["kind"]].overrides(spec, point))


def _point_key(config: W2SConfig, measure: dict) -> str:
    return digest({"config": config_hash(config), "measure": measure}, 20)


def evaluate_point(
    spec: dict, point: dict, cache_dir: Path | None, progress: bool = False, config: W2SConfig | None = None
) -> dict:
    """Evaluate (or reuse from the cache) one point of a scaling or full-run sweep (its kind's `evaluate`). Returns
    the point record."""
    config = config if config is not None else point_config(spec, point)
    measure = {"kind": spec["kind"], "threshold": spec.get("threshold"), "series": spec.get("series")}
    if spec.get("thresholds") is not None or spec.get("eta_grid") is not None:
        measure.update(thresholds=spec.get("thresholds"), eta_grid=spec.get("eta_grid"))
    key = _point_key(config, measure)
    path = cache_dir / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.exists():
        rec = json.loads(path.read_text())
        rec["cached"] = True
        return rec
    rec: dict[str, Any] = {"params": point, "key": key, "config_hash": config_hash(config)}
    with torch.no_grad():
        rec.update(KINDS[spec["kind"]].evaluate(spec, config, cache_dir, progress))
    rec["cached"] = False
    if path is not None:
        write_json(path, rec, indent=1)
    return rec


def _scaling_record(spec: dict, config: W2SConfig, cache_dir: Path | None, progress: bool) -> dict:
    """A scaling point's measurement: each series' hitting samples (`_scaling_series`)."""
    return {
        "series": {series: _scaling_series(spec, config, series, cache_dir, progress) for series in spec["series"]}
    }


def _full_run_record(spec: dict, config: W2SConfig, cache_dir: Path | None, progress: bool) -> dict:
    """A full-run point's measurement: per mode the initial and final alignments (mean and per seed), the groups'
    and the logged curves."""
    m = run_experiment(config, None, progress=progress)
    modes = {}
    for mode in config.modes:
        e = m[mode]
        modes[mode] = {
            **{k: e[k] for k in ("init", "final", "final_per_seed")},
            "init_per_seed": {k: e[f"{k}_seeds"][0] for k in SUMMARY_KEYS},
            "groups": {g: {"init": v["mean"][0], "final": v["mean"][-1]} for g, v in e["groups"].items()},
            **{k: e[k] for k in ("samples", *SUMMARY_KEYS, "diverged_at")},
        }
    return {"modes": modes}


def _hits(config: W2SConfig, series: str, thresholds: list[float], cache_dir: Path | None, progress: bool) -> dict:
    """Samples to reach each threshold, per seed (None: censored), for one config and series; cached."""
    key = _point_key(config, {"series": series, "thresholds": sorted(thresholds)})
    path = cache_dir / "runs" / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.exists():
        return json.loads(path.read_text())
    problem = build_problem(config)
    weak_info = None
    if series == "weak":
        _, info = train_weak(config, problem, progress=progress, hit_threshold=thresholds)
        hits, budget = info["hit_steps"], config.weak_steps
    else:
        if series == "w2s" and config.weak in ("trained", "scratch"):
            weak_info = _trained_weak(config, problem, progress)
        res = train(config, problem, series, progress=progress, hit_threshold=thresholds)
        hits, budget = res.extra["hit_steps"], config.steps
    rec = {
        "samples": {k: [None if h is None else h * config.batch_size for h in v] for k, v in hits.items()},
        "budget_samples": budget * config.batch_size,
    }
    if weak_info is not None:
        rec["weak"] = weak_info
    if path is not None:
        path.parent.mkdir(exist_ok=True)
        write_json(path, rec, indent=1)
    return rec


_WEAK_CACHE: dict[str, tuple[torch.Tensor, dict]] = {}
_STRONG_ONLY = ("eta_w2s", "eta_sft", "steps", "modes", "n_log", "schedule", "anneal_start", "anneal_final", "loss")


def _trained_weak(config: W2SConfig, problem, progress: bool) -> dict:
    """Set `problem`'s weak model to the trained one (`experiments.prepare_weak`), computed once per weak-model
    config in this process (the W2S step-size grid of a point shares it); returns its training info."""
    key = config_hash(config, exclude=_STRONG_ONLY)
    if key not in _WEAK_CACHE:
        info = prepare_weak(config, problem, progress=progress)
        _WEAK_CACHE[key] = (problem.weak_u.clone(), info)
    weak_u, info = _WEAK_CACHE[key]
    problem.weak_u = weak_u.clone()
    return info


def _rank(samples: list[float | None]) -> tuple[float, int, float]:
    """Order of etas at one threshold: the median over seeds (censored = +inf), then more seeds reaching it,
    then the mean log samples of those that did."""
    med = median_censored(samples)
    ok = [math.log(v) for v in samples if v is not None]
    return (math.inf if med is None else med, -len(ok), float(np.mean(ok)) if ok else math.inf)


def _scaling_series(spec: dict, config: W2SConfig, series: str, cache_dir: Path | None, progress: bool) -> dict:
    """One series of one scaling point under the sweep's rule.

    Without `eta_grid`: one run at the config's step size. With `eta_grid` {factor, width, max_widen}: runs at
    eta0 * factor^k, k = -width..width (eta0 the config's value of the series' step size), and, per threshold,
    the eta with the fewest median samples (`_rank`); while that optimum sits on the grid's edge the grid is
    widened by one factor in that direction (at most `max_widen` times per side); an optimum still on the edge
    is flagged (`edge`: "low" or "high")."""
    thresholds = [float(t) for t in thresholds_of(spec)]
    key = ETA_KEYS[series]
    grid = spec.get("eta_grid")
    eta0 = float(getattr(config, key))
    g = {"width": 0, "max_widen": 0} if grid is None else grid  # no grid: the config's step size alone
    factor, width, max_widen = float(g.get("factor", 2.0)), int(g.get("width", 1)), int(g.get("max_widen", 2))
    ks = list(range(-width, width + 1))
    runs: dict[int, dict] = {}
    widened = {"low": 0, "high": 0}
    while True:
        for k in ks:
            if k not in runs:
                cfg = apply_overrides(config, {key: eta0 * factor**k})
                runs[k] = _hits(cfg, series, thresholds, cache_dir, progress)
        best = {thr: min(ks, key=lambda k: _rank(runs[k]["samples"][str(thr)])) for thr in thresholds}
        grow = set()
        if grid is not None:
            for thr, k in best.items():
                if all(v is None for v in runs[k]["samples"][str(thr)]):
                    continue  # nothing reached this threshold at any eta: no direction to widen
                if k == min(ks) and widened["low"] < max_widen:
                    grow.add("low")
                if k == max(ks) and widened["high"] < max_widen:
                    grow.add("high")
        if not grow:
            break
        for side in grow:
            widened[side] += 1
            ks = [min(ks) - 1, *ks] if side == "low" else [*ks, max(ks) + 1]
    out: dict[str, Any] = {
        "eta_key": key,
        "etas": {repr(eta0 * factor**k): runs[k]["samples"] for k in sorted(runs)},
        "budget_samples": runs[0]["budget_samples"],
        "best": {},
    }
    for thr, k in best.items():
        samples = runs[k]["samples"][str(thr)]
        med = median_censored(samples)
        edge = None
        if grid is not None and len(ks) > 1 and any(v is not None for v in samples):  # all censored: no optimum
            edge = "low" if k == min(ks) else "high" if k == max(ks) else None
        out["best"][str(thr)] = {
            "eta": eta0 * factor**k,
            "samples_per_seed": samples,
            "median_samples": med,
            "censored": med is None,
            "edge": edge,
        }
    if runs[0].get("weak") is not None:  # the trained weak model the W2S runs of this point learnt from
        out["weak"] = runs[0]["weak"]
    primary = out["best"][str(thresholds[0])]
    out.update({k: primary[k] for k in ("samples_per_seed", "median_samples", "censored")})
    return out


def _chi(config: W2SConfig, point: dict) -> float:
    """chi_k = N_kappa pi_k / (N_k pi_kappa), k = 1 (the non-target task)."""
    return config.group_sizes[0] * config.pi[1] / (config.group_sizes[1] * config.pi[0])


S_AXIS = XAxis("s", "s", lambda config, point: float(config.s), log=True)
D_AXIS = XAxis("d", "d", lambda config, point: float(config.d), log=True)
CHI_AXIS = XAxis("chi", "chi_2 = N_1 pi_2 / (N_2 pi_1)", _chi, log=True)
RHO_AXIS = XAxis("rho_sqrt_s", "rho sqrt(s)", lambda config, point: config.rho * math.sqrt(config.s))
ANCHOR_AXIS = XAxis(
    "anchor_weight",
    "anchor weight",
    lambda config, point: float(config.anchor_weight) if "sft_anchor" in config.modes else 0.0,
)


def _scaling_summary(spec: dict, points: list[dict], configs: list[W2SConfig]) -> dict:
    """Per series and threshold: the censored log-normal fit (`survival.fit_censored_lognormal`, the slope with
    its profile-likelihood interval; censored seeds enter as lower bounds), the older median/bootstrap fit
    (censored points left out) beside it, and the theory's slope with p the information exponent of the link."""
    kind = spec["kind"]
    axis = KINDS[kind].axis.name  # s or d: the swept size
    other = "d" if axis == "s" else "s"
    ps = {information_exponent(c.link) for c in configs}
    if len(ps) != 1 or None in ps:
        raise ValueError(f"sweep {kind!r}: the points' links must share one information exponent, got {sorted(ps)}")
    p = ps.pop()
    slopes = predicted_slopes(p)
    # how the other size moves with the swept one (d-scaling with s = d: ds = 1), so that the theory's slope is
    # slope_d + slope_s * dlog(s)/dlog(d) for d-scaling, slope_s + slope_d * dlog(d)/dlog(s) for s-scaling
    x, y = [getattr(c, axis) for c in configs], [getattr(c, other) for c in configs]
    coupling = loglog_slope(x, y) if np.ptp(np.log(x)) > 0 else 0.0
    thresholds = [float(t) for t in thresholds_of(spec)]
    fits, theory, by_thr, naive = {}, {}, {}, {}
    xs = [pt["x"] for pt in points]
    for series in spec["series"]:
        sl = slopes[series]
        th = sl[axis] + sl[other] * coupling
        theory[series] = {"slope": round(th, 6), "coupling": round(coupling, 6), "p": p}
        by_thr[series], naive[series] = {}, {}
        for thr in thresholds:
            entries = [pt["series"][series].get("best", {}).get(str(thr), pt["series"][series]) for pt in points]
            per_seed = [e["samples_per_seed"] for e in entries]
            budgets = [float(pt["series"][series]["budget_samples"]) for pt in points]
            fit = fit_censored_lognormal(xs, per_seed, budgets)
            fit["censored_points"] = [
                i for i, e in enumerate(entries) if median_censored(e["samples_per_seed"]) is None
            ]
            fit["edge_points"] = [i for i, e in enumerate(entries) if e.get("edge")]
            by_thr[series][str(thr)] = fit
            naive[series][str(thr)] = fit_loglog(xs, per_seed)
        fits[series] = by_thr[series][str(thresholds[0])]
    main = spec["series"][0]
    return {
        "fit": fits[main],
        "theory": theory[main],
        "fits": fits,
        "theories": theory,
        "fits_by_threshold": by_thr,
        "fits_median_bootstrap": naive,
    }


def _runs_summary(spec: dict, points: list[dict], configs: list[W2SConfig]) -> dict:
    """Per point and mode: the final alignments and the non-target group's changes."""
    rows = []
    for pt in points:
        for mode, e in pt["modes"].items():
            i, f = e["init"], e["final"]
            rows.append(
                {
                    "x": pt["x"],
                    "s": pt["s"],
                    "mode": mode,
                    "params": pt["params"],
                    "target_final": f["target_alignment"],
                    "nontarget_init": i["nontarget_alignment"],
                    "nontarget_final": f["nontarget_alignment"],
                    "nontarget_drop": i["nontarget_alignment"] - f["nontarget_alignment"],
                    "nontarget_to_target_change": f["nontarget_target_alignment"] - i["nontarget_target_alignment"],
                }
            )
    return {"summary": rows}


def _overlap_summary(spec: dict, points: list[dict], configs: list[W2SConfig]) -> dict:
    """The full-run summary and, over the grid of rho and s, the phase boundary (`phase_boundary`)."""
    out = _runs_summary(spec, points, configs)
    if out["summary"]:
        out["phase"] = phase_boundary(out["summary"], spec.get("phase", {}))
    return out


def phase_boundary(summary: list[dict], levels: dict | None = None) -> dict:
    """The phase boundary of a 2-D overlap sweep (Theorem 2). For each mode and s: the rho sqrt(s) where the
    non-target group's alignment with theta_1 has grown by `turn` (final - initial; default 0.1) and where its
    alignment with theta_2 has dropped by `drop` (default 0.1), with rho = x / sqrt(s) there; and for each
    boundary the least-squares slope of log x_c against log s over the s where it exists: 0 if the boundary
    collapses in units of s^{-1/2} (rho_c = const * s^{-1/2}, Theorem 2), 0.5 if it sits at a fixed rho."""
    levels = {"turn": 0.1, "drop": 0.1, **(levels or {})}
    for name in ("turn", "drop"):
        v = levels[name]
        if not isinstance(v, (int, float)) or not (0.0 < v < 1.0):
            raise ValueError(f"phase.{name} must be in (0, 1), got {v!r}")
    fields = {"turn": "nontarget_to_target_change", "drop": "nontarget_drop"}
    out: dict[str, Any] = {"levels": levels, "modes": {}}
    for mode in sorted({r["mode"] for r in summary}):
        entry: dict[str, Any] = {"per_s": [], "collapse": {}}
        ss = sorted({r["s"] for r in summary if r["mode"] == mode})
        for s in ss:
            rows = sorted((r for r in summary if r["mode"] == mode and r["s"] == s), key=lambda r: r["x"])
            xs = [r["x"] for r in rows]
            rec: dict[str, Any] = {"s": s}
            for name, field in fields.items():
                xc = crossing(xs, [r[field] for r in rows], levels[name])
                rec[f"{name}_x"] = xc
                rec[f"{name}_rho"] = None if xc is None else xc / math.sqrt(s)
            entry["per_s"].append(rec)
        for name in fields:
            pts = [(r["s"], r[f"{name}_x"]) for r in entry["per_s"] if r[f"{name}_x"] not in (None, 0.0)]
            slope = loglog_slope([s for s, _ in pts], [x for _, x in pts]) if len({s for s, _ in pts}) >= 2 else None
            entry["collapse"][name] = {"slope_log_x_vs_log_s": slope, "n_s": len(pts)}
        out["modes"][mode] = entry
    return out


def seed_turns(record: dict, mode: str, level: float = 0.0) -> list[float]:
    """Per seed of a full-run point record, the non-target group's turn to theta_1 (final - initial mean
    |cos(w, theta_1)|) minus `level`."""
    e = record["modes"][mode]
    final = e["final_per_seed"]["nontarget_target_alignment"]
    init = (e.get("init_per_seed") or {}).get("nontarget_target_alignment")
    init = init if init is not None else [e["init"]["nontarget_target_alignment"]] * len(final)
    return [f - i - level for f, i in zip(final, init)]


def _bisect_seed(spec: dict, grid: list[tuple[dict, W2SConfig]], i: int, mode: str, cache: Path) -> dict:
    """One seed's turn boundary on one row of an overlap grid: the grid's sign changes of turn - level (more
    than one: not monotone on the grid), then the first change bisected in rho with single-seed runs
    (`stats.bisect_sign_change`, both ends re-run) down to `bisect.tol`; `direction` "up" where the turn goes
    from negative (pushed out) to positive (captured) with rho, "down" the reverse."""
    level = float({"turn": 0.1, **(spec.get("phase") or {})}["turn"])
    tol = float(spec["bisect"].get("tol", 0.002))
    rhos = [cfg.rho for _, cfg in grid]
    vals = [seed_turns(rec, mode, level)[i] for rec, _ in grid]
    seed = grid[0][1].seed + i
    changes = sign_changes(vals)
    out: dict[str, Any] = {
        "seed": seed,
        "s": grid[0][1].s,
        "grid_changes_rho": [[rhos[k], rhos[k + 1]] for k in changes],
    }
    out["monotone"] = len(changes) <= 1
    if not changes:
        side = "positive (captured)" if vals[0] >= 0 else "negative (pushed out)"
        out.update(boundary_rho=None, direction=None, reason=f"no sign change on the grid: turn - level {side}")
        return out
    k = changes[0]
    out["direction"] = "up" if vals[k] < 0 else "down"
    params = {key: v for key, v in grid[k][0]["params"].items() if key != "rho"}

    def turn_at(rho: float) -> float:
        stop.check()  # a safe point per run (anchorft.stop): the runs finished are in the cache
        point = {**params, "rho": rho, "seed": seed, "n_seeds": 1, "modes": [mode]}
        return seed_turns(evaluate_point(spec, point, cache), mode, level)[0]

    res = bisect_sign_change(turn_at, rhos[k], rhos[k + 1], tol)
    out.update(grid_cell_turns=[vals[k] + level, vals[k + 1] + level], boundary_rho=res["estimate"])
    out.update({key: res[key] for key in ("lo", "hi", "bracketed")})
    out["turn_lo"], out["turn_hi"] = res["f_lo"] + level, res["f_hi"] + level
    out["evaluations"] = [[x, v + level] for x, v in res["evaluations"]]
    return out


def _bisect_summary(rows: list[dict]) -> dict:
    """Over seeds: the bisected boundaries' mean, sample std, range, and the seeds not monotone or not bracketed."""
    found = [r["boundary_rho"] for r in rows if r.get("boundary_rho") is not None]
    out: dict[str, Any] = {"n_seeds": len(rows), "n_found": len(found), "mean": None, "std": None}
    out.update(min=min(found, default=None), max=max(found, default=None))
    if found:
        out.update(mean_std(found))
    out["not_monotone_seeds"] = [r["seed"] for r in rows if not r["monotone"]]
    out["not_bracketed_seeds"] = [r["seed"] for r in rows if r.get("boundary_rho") is None]
    return out


def bisect_turns(spec: dict, records: list[dict], configs: list[W2SConfig], cache: Path) -> dict:
    """`bisect` of an overlap sweep: per mode, row (s) and seed, the turn boundary in rho located by bisection
    (`_bisect_seed`), and its spread over seeds. The level is `phase.turn`; nothing without `bisect:`."""
    if not spec.get("bisect"):
        return {}
    level = {"turn": 0.1, **(spec.get("phase") or {})}["turn"]
    out: dict[str, Any] = {"tol_rho": spec["bisect"].get("tol", 0.002), "level": level, "modes": {}}
    for mode in sorted({m for r in records for m in r["modes"]}):
        per_s = []
        for s in sorted({c.s for c in configs}):
            grid = sorted(((r, c) for r, c in zip(records, configs) if c.s == s), key=lambda rc: rc[1].rho)
            rows = [_bisect_seed(spec, grid, i, mode, cache) for i in range(grid[0][1].n_seeds)]
            per_s.append({"s": s, "per_seed": rows, "summary": _bisect_summary(rows)})
        out["modes"][mode] = per_s
    return {"bisect": out}


def _measure_runs(spec: dict, point: dict, config: W2SConfig, cache: Path | None, shared: dict) -> dict:
    """A scaling or full-run point's record (`evaluate_point`) with its x on the kind's axis, and its s."""
    rec = evaluate_point(spec, point, cache, progress=False, config=config)
    rec["x"] = KINDS[spec["kind"]].axis.of(config, point)
    rec["s"] = config.s
    return rec


def _scaling_kind(name: str, axis: XAxis) -> SweepKind:
    """A scaling kind: hitting samples per point, fitted against `axis` (s or d)."""
    return SweepKind(
        name,
        prepare=_prepare_runs(_check_scaling),
        overrides=plain_overrides,
        measure=_measure_runs,
        summarise=_scaling_summary,
        figure=Figure("plots", "plot_scaling"),
        axis=axis,
        evaluate=_scaling_record,
    )


def _full_run_kind(name: str, axis: XAxis, figure: str, summarise: Callable = _runs_summary, **kw: Any) -> SweepKind:
    """A full-run kind: one `run_experiment` per point, summarised per point and mode against `axis`."""
    return SweepKind(
        name,
        prepare=_prepare_runs(),
        overrides=plain_overrides,
        measure=_measure_runs,
        summarise=summarise,
        figure=Figure("plots", figure),
        axis=axis,
        evaluate=_full_run_record,
        **kw,
    )


KINDS: dict[str, SweepKind] = {
    k.name: k
    for k in (
        _scaling_kind("s-scaling", S_AXIS),
        _scaling_kind("d-scaling", D_AXIS),
        _scaling_kind("d-scaling-w2s", D_AXIS),
        _full_run_kind("chi", CHI_AXIS, "plot_runs"),
        _full_run_kind("overlap", RHO_AXIS, "plot_overlap", summarise=_overlap_summary, bisect=True),
        _full_run_kind("rpsft", ANCHOR_AXIS, "plot_rpsft"),
        *mech.KINDS.values(),
    )
}
MECH_KINDS = mech.MECH_KINDS


def sweep_cells(spec: dict) -> list[Cell]:
    """The sweep's points as the cells of its grid: one per point (the seeds of a point run batched in it), named
    by its index, its spec the point and the hash of its config (a changed preset is a new cell)."""
    return [
        Cell(f"point{i}", {"point": pt, "config": config_hash(point_config(spec, pt))})
        for i, pt in enumerate(spec["points"])
    ]


def _measure_cell(spec: dict, cache: str, shared: dict, cell: Cell) -> dict:
    """A cell's record: its point measured by the kind (top level, so that spawned workers can run it)."""
    point = cell.spec["point"]
    return KINDS[spec["kind"]].measure(spec, point, point_config(spec, point), Path(cache), shared)


def run_sweep(
    kind: str,
    out_dir: str | os.PathLike,
    quick: bool = False,
    overrides: list[str] | None = None,
    progress: bool = True,
    spec_path: str | os.PathLike | None = None,
    workers: int = 1,
    threads: int | None = None,
    cluster: RayCluster | None = None,
) -> dict:
    """Run sweep `kind` (`key=value` overrides of its config for every point), write DIR/sweep.json (a kind with a
    table: DIR/results.json and DIR/table.md) and DIR/<kind>.png, return the result.

    The points are the cells of a grid in DIR (`sweep_cells`): those recorded in DIR/cells.jsonl by an earlier,
    stopped run of the same sweep are reused (their records marked `cached`), the others measured, `workers` at a
    time, each on `threads` torch threads (default: this process's count, so that a point's numbers are those of
    a run in this process); with `cluster`, each point is a Ray task on it (`anchorft.studies.grid.RayTasks`)."""
    executor = executor_for(workers, threads or torch.get_num_threads(), cluster)  # a bad value fails before any work
    spec = load_sweep(kind, quick, spec_path)
    k = KINDS[kind]
    if overrides:
        extra = apply_overrides(W2SConfig(), overrides)  # unknown keys and uncoercible values fail here
        keys = [item.split("=", 1)[0].strip() for item in overrides]
        taken = sorted(set(keys) & k.controlled(spec))
        if taken:
            raise ValueError(
                f"sweep {kind!r}: {', '.join(taken)} set by the sweep's factors; edit the sweep file instead"
            )
        spec["base"] = {**spec["base"], **{key: getattr(extra, key) for key in keys}}
        _prepare(spec, set(keys))  # the command line wins over grid rows (steps=6000: one budget for every s)
    out = Path(out_dir)
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    configs = [point_config(spec, pt) for pt in spec["points"]]
    cells = sweep_cells(spec)
    grid = Grid(out, context={"sweep": kind, "spec": spec})
    recorded = set(grid.finished())
    shared: dict = {}  # results shared between the points of one process (the long ceiling of `weak-quality`)
    fn = functools.partial(_measure_cell, spec, str(cache), shared)
    got = grid.run(cells, fn, executor, progress=progress, desc=f"sweep {kind}")
    recs = [_reused(got[c.name]) if c.key(grid.context) in recorded else got[c.name] for c in cells]
    fields = k.summarise(spec, recs, configs)
    if k.bisect:
        fields.update(bisect_turns(spec, recs, configs, cache))
    rows = {"rows": fields.pop("rows")} if k.table is not None else {}
    result: dict[str, Any] = {"kind": kind, "quick": quick, "spec": spec, **rows, "points": recs, **fields}
    write_metrics(out / k.results_file, result, indent=1)
    if k.table is not None:
        write_text(out / "table.md", k.table(spec, rows["rows"]))
    k.figure(result, out / f"{kind}.png", k.axis)
    return result


def _reused(rec: dict) -> dict:
    """A record read back from the grid's record: marked `cached` where the kind's records say whether they were
    (as a point read back from DIR/cache/ is)."""
    return {**rec, "cached": True} if "cached" in rec else rec


def sweep_into(
    kind: str,
    out: str | os.PathLike,
    quick: bool = False,
    overrides: list[str] = (),
    spec_path: str | None = None,
    workers: int = 1,
    cluster: RayCluster | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict | None:
    """`anchorft w2s sweep`: `run_sweep` in the folder `out`, claimed for the resolved sweep (an edited sweep file
    is another run) and the overrides; a bad kind, sweep file or worker count is refused before the folder is
    touched. A rerun resumes; a finished sweep is reused (None)."""
    if workers < 1:
        raise ValueError(f"--workers: must be >= 1, got {workers}")
    spec = load_sweep(kind, quick, spec_path)
    run = {"kind": kind, "quick": quick, "overrides": list(overrides), "spec": spec}

    def work(claim) -> dict:
        return run_sweep(kind, out, quick=quick, overrides=list(overrides), progress=progress, spec_path=spec_path,
                         workers=workers, cluster=cluster)  # fmt: skip

    return run_claimed(out, "w2s sweep", run, work, overwrite=overwrite)


def sweep_summary(result: dict, out: str | os.PathLike, kind: str) -> str:
    """What `anchorft w2s sweep` prints of a finished sweep: a table kind's table.md, else the fits and summary."""
    if "rows" in result:
        table = (Path(out) / "table.md").read_text()
        return f"{table}wrote {existing_files(out, 'results.json', 'table.md', kind + '.png')}"
    keep = ("kind", "quick", "fit", "theory", "fits", "theories", "summary", "phase")
    text = json.dumps({k: result[k] for k in keep if k in result}, indent=1)
    return f"{text}\nwrote {existing_files(out, 'sweep.json', kind + '.png')}"
