"""Mechanism sweeps of the weak-to-strong simulator (docs/w2s.md, "Mechanisms"): which ingredient does what.

- ablation: the full product of `factors` (transform, label variant = clip or bounded weak output, centring,
  weak-model norm inside V_kappa, loss) on a base config; each row carries its factors, the final target /
  non-target / non-target-to-theta_kappa alignments (mean and sample std over seeds, ddof=1), and the labels'
  mean and measured c2 (c_n = E[y He_n(z)] / n!) with its standard error.
- race (Theorem 2): for each mode (sft, w2s), loss, overlap x = rho sqrt(s), chi_2 = N_1 pi_2 / (N_2 pi_1) and step
  size on the mode's grid: per seed, the samples until the target neurons learn (mean |cos(w, theta_1)| >= learn)
  and until the non-target neurons forget (mean |cos(w, theta_1)| >= turn, or mean |cos(w, theta_2)| < keep),
  read off the log-spaced curves by linear interpolation; each cell reports the step size with the fastest
  median learning (a post-hoc choice) and who finished first.
- weak-quality: the weak model's alignment swept (or the weak model trained); raw test risks of the weak model,
  W2S and the ceiling, and the PGR where its denominator exceeds three standard errors.

Spec files: configs/w2s/sweep-<kind>.yaml (first line: the command). Each run writes DIR/results.json (rows),
DIR/table.md and DIR/<kind>.png; finished points are cached in DIR/cache/ by the hash of their config.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anchorft.io import write_json, write_text
from anchorft.provenance import write_metrics
from anchorft.w2s.config import W2SConfig, apply_overrides, config_hash, load_config
from anchorft.w2s.experiments import run_experiment

__all__ = ["MECH_KINDS", "FACTORS", "validate_mech_spec", "race_times", "first_crossing", "run_mech_sweep"]

MECH_KINDS = ("ablation", "race", "weak-quality")
FACTORS = {  # factor name -> (config key, allowed values); "variant" maps to the spec's `variants`
    "transform": ("transform", ("identity", "zexp")),
    "variant": (None, None),
    "center": ("label_center", ("none", "mean")),
    "weak_norm": ("weak_norm", ("planted", "unit")),
    "loss": ("loss", ("squared", "correlation")),
    "weak": ("weak", ("planted", "trained")),
}


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate_mech_spec(spec: dict) -> None:
    """Clear errors before any work: unknown factors or factor values, thresholds outside (0, 1), step-size
    grids with non-positive values, and every point's config (validated by W2SConfig)."""
    kind = spec["kind"]
    factors = spec.get("factors") or {}
    variants = spec.get("variants") or {}
    for name, values in factors.items():
        if name not in FACTORS:
            raise ValueError(f"sweep {kind!r}: unknown factor {name!r}; known: {sorted(FACTORS)}")
        if not isinstance(values, list) or not values:
            raise ValueError(f"sweep {kind!r}: factor {name!r} needs a non-empty list of values")
        allowed = tuple(variants) if name == "variant" else FACTORS[name][1]
        for v in values:
            if v not in allowed:
                raise ValueError(f"sweep {kind!r}: unknown value {v!r} of factor {name!r}; allowed: {list(allowed)}")
    for name, v in (spec.get("thresholds") or {}).items():
        if name not in ("learn", "turn", "keep"):
            raise ValueError(f"sweep {kind!r}: unknown threshold {name!r} (learn, turn, keep)")
        if not _num(v) or not (0.0 < v < 1.0):
            raise ValueError(f"sweep {kind!r}: threshold {name} must be in (0, 1), got {v!r}")
    for mode, grid in (spec.get("eta") or {}).items():
        if mode not in ("w2s", "sft"):
            raise ValueError(f"sweep {kind!r}: eta grid for unknown mode {mode!r} (w2s, sft)")
        if not isinstance(grid, list) or not grid or any(not _num(e) or e <= 0 for e in grid):
            raise ValueError(
                f"sweep {kind!r}: eta grid for {mode} must be a non-empty list of positive numbers, got {grid!r}"
            )
    if kind == "ablation" and not factors:
        raise ValueError(f"sweep {kind!r}: factors must list at least one factor")
    if kind == "race":
        for name in ("rho_sqrt_s", "group_sizes", "eta"):
            if not spec.get(name):
                raise ValueError(f"sweep {kind!r}: {name} must be non-empty")
    if kind == "weak-quality" and not (spec.get("weak_alignment") or spec.get("weak_steps")):
        raise ValueError(f"sweep {kind!r}: give weak_alignment and/or weak_steps values")
    for name in ("rho_sqrt_s", "weak_alignment"):
        for v in spec.get(name) or []:
            if not _num(v) or v < 0:
                raise ValueError(f"sweep {kind!r}: {name} values must be finite and >= 0, got {v!r}")
    for pt in expand(spec):
        _point_config(spec, pt)


def expand(spec: dict) -> list[dict]:
    """The points of a mechanism sweep: dicts of factor values (ablation), or of race/weak-quality coordinates."""
    kind = spec["kind"]
    if kind == "ablation":
        factors = spec.get("factors") or {}
        names = list(factors)
        return [dict(zip(names, vals)) for vals in itertools.product(*(factors[n] for n in names))]
    if kind == "race":
        pts = []
        for mode, grid in (spec.get("eta") or {}).items():
            for loss, x, gs, eta in itertools.product(
                (spec.get("factors") or {}).get("loss", ["correlation"]), spec["rho_sqrt_s"], spec["group_sizes"], grid
            ):
                pts.append({"mode": mode, "loss": loss, "rho_sqrt_s": x, "group_sizes": gs, "eta": eta})
        return pts
    pts = [{"weak": "planted", "weak_alignment": a} for a in spec.get("weak_alignment") or []]
    pts += [{"weak": "trained", "weak_steps": n} for n in spec.get("weak_steps") or []]
    return pts


def _controlled(spec: dict) -> set[str]:
    """Config keys that the sweep's points set (a command-line override of one of them would be silently lost)."""
    if spec["kind"] == "race":
        return {"modes", "loss", "rho", "group_sizes", "eta_w2s", "eta_sft"}
    if spec["kind"] == "weak-quality":
        return {"weak", "weak_alignment", "weak_steps"}
    keys = {FACTORS[n][0] for n in (spec.get("factors") or {}) if n != "variant"}
    for v in (spec.get("variants") or {}).values():
        keys |= set(v)
    return keys


def _point_overrides(spec: dict, pt: dict) -> dict:
    kind = spec["kind"]
    base = dict(spec["base"])
    base.pop("preset", None)
    if kind == "ablation":
        out = dict(base)
        for name, v in pt.items():
            if name == "variant":
                out.update(spec["variants"][v])
            else:
                out[FACTORS[name][0]] = v
        return out
    if kind == "race":
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
    return {**base, **pt}


def _point_config(spec: dict, pt: dict) -> W2SConfig:
    return load_config(spec["base"].get("preset"), _point_overrides(spec, pt))


def first_crossing(steps: list[float], ys: list[float], level: float, above: bool = True) -> float | None:
    """The first step where y reaches `level` (>= if above, < otherwise), linearly interpolated between the logged
    points; None if it never does (censored at the budget)."""
    for k in range(len(steps)):
        hit = ys[k] >= level if above else ys[k] < level
        if hit:
            if k == 0:
                return float(steps[0])
            y0, y1 = ys[k - 1], ys[k]
            return float(steps[k - 1] + (level - y0) * (steps[k] - steps[k - 1]) / (y1 - y0))
    return None


def race_times(mode_metrics: dict, learn: float, turn: float, keep: float) -> dict:
    """Per seed, samples to learn (target >= learn) and to forget (non-target with theta_1 >= turn, or with its own
    theta < keep: the earlier), from a mode's logged per-seed curves; None = censored."""
    x = mode_metrics["samples"]
    tgt = np.asarray(mode_metrics["target_alignment_seeds"], dtype=float)  # (logs, S)
    own = np.asarray(mode_metrics["nontarget_alignment_seeds"], dtype=float)
    tur = np.asarray(mode_metrics["nontarget_target_alignment_seeds"], dtype=float)
    out: dict[str, list] = {"learn": [], "forget": [], "turn": [], "lose": []}
    for i in range(tgt.shape[1]):
        t_learn = first_crossing(x, list(tgt[:, i]), learn)
        t_turn = first_crossing(x, list(tur[:, i]), turn)
        t_lose = first_crossing(x, list(own[:, i]), keep, above=False)
        fs = [t for t in (t_turn, t_lose) if t is not None]
        out["learn"].append(t_learn)
        out["turn"].append(t_turn)
        out["lose"].append(t_lose)
        out["forget"].append(min(fs) if fs else None)
    return out


def _median(v: list[float | None]) -> float | None:
    a = sorted(math.inf if x is None else float(x) for x in v)
    n = len(a)
    m = a[n // 2] if n % 2 else 0.5 * (a[n // 2 - 1] + a[n // 2])
    return None if math.isinf(m) else m


def _stat(values: list[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else None}


def _evaluate(spec: dict, pt: dict, cache: Path) -> dict:
    config = _point_config(spec, pt)
    key = hashlib.sha256(json.dumps({"c": config_hash(config), "k": spec["kind"]}).encode()).hexdigest()[:20]
    path = cache / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    with torch.no_grad():
        m = run_experiment(config, None, progress=False)
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
            "curves": {k: e[k] for k in ("samples", *(f"{n}_alignment_seeds" for n in ("target", "nontarget")))},
        }
        rec[mode]["curves"]["nontarget_target_alignment_seeds"] = e["nontarget_target_alignment_seeds"]
    rec["risks"] = m.get("risks")
    write_json(path, rec)
    return rec


def _ablation_row(rec: dict) -> dict:
    e = rec["w2s"]
    fps = e["final_per_seed"]
    row = dict(rec["point"])
    for key, name in (
        ("target_alignment", "target"),
        ("nontarget_alignment", "nontarget"),
        ("nontarget_target_alignment", "nontarget_to_theta1"),
    ):
        st = _stat(fps[key])
        row[name], row[f"{name}_std"] = st["mean"], st["std"]
    row["nontarget_to_theta1_init"] = e["init"]["nontarget_target_alignment"]
    row["labels_mean"], row["labels_c2"], row["labels_c2_se"] = e["labels_mean"], e["labels_c2"], e["labels_c2_se"]
    row["labels_c4"] = e["labels_c4"]
    row["diverged"] = rec["diverged"] is not None
    return row


def _race_rows(spec: dict, recs: list[dict]) -> list[dict]:
    th = {"learn": 0.5, "turn": 0.5, "keep": 0.5, **(spec.get("thresholds") or {})}
    cells: dict[tuple, list[dict]] = {}
    for rec in recs:
        pt = rec["point"]
        times = race_times(rec[pt["mode"]]["curves"], th["learn"], th["turn"], th["keep"])
        gs = pt["group_sizes"]
        chi = gs[0] / gs[1]  # pi = 1 for both tasks
        item = {**pt, "chi": chi, "s": rec["s"], "d": rec["d"], "times": times}
        item["learn_median"], item["forget_median"] = _median(times["learn"]), _median(times["forget"])
        cells.setdefault((pt["mode"], pt["loss"], pt["rho_sqrt_s"], chi), []).append(item)
    rows = []
    for (mode, loss, x, chi), items in sorted(cells.items()):
        best = min(items, key=lambda r: (math.inf if r["learn_median"] is None else r["learn_median"], r["eta"]))
        lm, fm = best["learn_median"], best["forget_median"]
        if lm is None and fm is None:
            winner = "neither"
        elif fm is None or (lm is not None and lm < fm):
            winner = "learn first"
        else:
            winner = "forget first"
        rows.append(
            {
                "mode": mode,
                "loss": loss,
                "rho_sqrt_s": x,
                "rho": x / math.sqrt(best["s"]),
                "chi": chi,
                "eta": best["eta"],
                "eta_grid": sorted(r["eta"] for r in items),
                "eta_on_edge": best["eta"] in (min(r["eta"] for r in items), max(r["eta"] for r in items)),
                "learn_samples": lm,
                "forget_samples": fm,
                "learn_per_seed": best["times"]["learn"],
                "forget_per_seed": best["times"]["forget"],
                "turn_per_seed": best["times"]["turn"],
                "lose_per_seed": best["times"]["lose"],
                "winner": winner,
                "all_eta": [
                    {"eta": r["eta"], "learn": r["learn_median"], "forget": r["forget_median"]} for r in items
                ],
            }
        )
    return rows


def _wq_row(rec: dict) -> dict:
    row = dict(rec["point"])
    fps = rec["w2s"]["final_per_seed"]["target_alignment"]
    row["w2s_target"], row["w2s_target_std"] = _stat(fps)["mean"], _stat(fps)["std"]
    cps = rec["ceiling"]["final_per_seed"]["target_alignment"] if "ceiling" in rec else None
    row["ceiling_target"] = None if cps is None else _stat(cps)["mean"]
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
        se = math.hypot(r["risk_se"]["weak"], r["risk_se"].get("w2s@link", 0.0))
        row[f"{dist}_surpasses_teacher_link"] = r["risk"].get("w2s@link", math.inf) < r["risk"]["weak"] - 3 * se
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
        *("transform", "variant", "center", "weak_norm", "loss", "labels_mean", "labels_c2", "labels_c2_se"),
        *("target", "target_std", "nontarget", "nontarget_std", "nontarget_to_theta1", "nontarget_to_theta1_std"),
    ],
    "race": ["mode", "loss", "rho_sqrt_s", "chi", "eta", "eta_on_edge", "learn_samples", "forget_samples", "winner"],
    "weak-quality": [
        *("weak", "weak_alignment", "weak_steps", "w2s_target", "ceiling_target"),
        *("isotropic_risk_weak", "isotropic_risk_w2s@link", "isotropic_risk_ceiling@link", "isotropic_pgr_link"),
        *(
            "isotropic_surpasses_teacher_link",
            "generative_risk_weak",
            "generative_risk_w2s@link",
            "generative_pgr_link",
        ),
    ],
}


def run_mech_sweep(
    spec: dict, out_dir: str | os.PathLike, overrides: list[str] | None = None, progress: bool = True
) -> dict:
    """Run a mechanism sweep (spec from `sweeps.load_sweep`); write results.json, table.md and <kind>.png."""
    kind = spec["kind"]
    if overrides:
        extra = apply_overrides(W2SConfig(), overrides)  # unknown keys and uncoercible values fail here
        keys = [i.split("=", 1)[0].strip() for i in overrides]
        taken = sorted(set(keys) & _controlled(spec))
        if taken:
            raise ValueError(
                f"sweep {kind!r}: {', '.join(taken)} set by the sweep's factors; edit the sweep file instead"
            )
        spec["base"] = {**spec["base"], **{k: getattr(extra, k) for k in keys}}
    validate_mech_spec(spec)
    out = Path(out_dir)
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    from tqdm.auto import tqdm

    recs = [_evaluate(spec, pt, cache) for pt in tqdm(expand(spec), desc=f"sweep {kind}", disable=not progress)]
    if kind == "ablation":
        rows = [_ablation_row(r) for r in recs]
    elif kind == "race":
        rows = _race_rows(spec, recs)
    else:
        rows = [_wq_row(r) for r in recs]
    result = {"kind": kind, "quick": spec.get("quick_run", False), "spec": spec, "rows": rows, "points": recs}
    write_metrics(out / "results.json", result)
    write_text(out / "table.md", _table(rows, TABLE_COLS[kind]))
    from anchorft.w2s.plots_mech import plot_mech

    plot_mech(result, out / f"{kind}.png")
    return result
