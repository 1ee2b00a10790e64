"""Which way of fine-tuning keeps most: each run's excess over a front, paired across methods, pooled over bases.

One comparison per pretrained base (`anchorft toy compare`, every run at the same seeds and on the same items).
For each base and each judged run, the excess of its ID gain over the front at its OOD retention:

    retention = OOD mean / the base's OOD mean,  gain = 100 (ID greedy - the base's ID greedy)  (points),
    excess = gain - front(retention),

the front being the upper hull of the base (1, 0) and the front runs' (retention, gain) means, joined by segments
(`report.front_weights`). Its interval is the paired two-level bootstrap of `anchorft.eval.intervals`: the seeds,
then the items of each skill, drawn once per replicate for every run and the base, the front refitted inside
each replicate (so its upward bias as a hull of noisy means is inside the interval). Across bases the per-base
excesses are pooled by the Hartung-Knapp random-effects mean, a t interval on bases - 1 degrees of freedom, and
counted: how many bases put the run above the front.

The scores are the per-item grades each fine-tune's evaluation wrote (OUT/runs/RUN-seedS/scored_items.json,
"scores"), ID greedy 0/1 and each OOD skill's greedy 0/1, on the reported items ("reported") or on the validation
items ("val", for picking knobs before the reported items are looked at).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from anchorft.analysis.rank import read_comparison_results
from anchorft.eval.intervals import (
    bias_aware_p,
    bias_corrected,
    detectable_effect,
    hartung_knapp,
    paired_bootstrap,
    t_test_p,
    variance_components,
)
from anchorft.io import pyplot, save_figure, write_json, write_text
from anchorft.studies.testbed.decision import decide, decision_markdown
from anchorft.studies.testbed.front import hull_weights
from anchorft.studies.testbed.layout import base_folders, run_dir
from anchorft.studies.testbed.report import front_weights

__all__ = ["load_scores", "excess_statistic", "base_verdict", "base_picks", "pooled_verdict", "pilot_components"]
__all__ += ["item_keys", "shared_items_intervals", "write_forest_plot"]

ID = "id"
FRONT_SHAPES = {"hull": hull_weights, "segments": front_weights}
# how a verdict is judged: "hull-bc" the concave hull, the bootstrap's bias corrected, knobs picked again in every
# replicate; "first" the first verdict's (Pareto points joined by segments, percentile intervals, one pick)
METHODS = {
    "hull-bc": {"shape": "hull", "correct": True, "repick": True},
    "first": {"shape": "segments", "correct": False, "repick": False},
}


def _scored(path: Path, split: str, keys: dict[str, list[str]] | None = None) -> dict[str, list[int]]:
    """{skill: greedy grades} of one model's record; with `keys` ({skill: item keys}, the base's), checked to grade
    the same items in the same order (the pairing of every comparison rests on it)."""
    if not path.is_file():
        raise ValueError(f"{path} not found: the comparison predates per-item scores; run it again")
    rec = json.loads(path.read_text())
    if "scores" not in rec or split not in rec["scores"]:
        raise ValueError(f"{path}: no per-item scores for the {split!r} items; run the comparison again")
    if keys is not None and rec.get(split) != keys:
        raise ValueError(f"{path}: its {split} items are not the base's (in the same order); the pairs would not pair")
    return {skill: s["greedy"] for skill, s in rec["scores"][split].items()}


def load_scores(
    compare_dir: str | os.PathLike, runs: Sequence[str], split: str = "reported", also: Sequence[str] = ()
) -> dict:
    """{run: {set: (seeds, items) array}} of greedy 0/1 grades from a comparison's scored_items.json files, the
    sets being "id" (its ID skill) and each OOD skill; "base" (one row) too. A run the comparison lacks is read from
    the first of its folders `also` (relative to it: its WiSE-FT interpolation, `toy interpolate --out COMPARE/wise`)
    that has it. Every run must have the comparison's seeds (a paired comparison needs them all)."""
    res = read_comparison_results(compare_dir)
    id_skill, seeds = res["settings"]["id_skill"], res["settings"]["seeds"]
    where = {r: Path(compare_dir) for r in res["methods"]}
    for sub in also:
        folder = Path(compare_dir) / sub
        if not (folder / "results.json").is_file():
            raise ValueError(f"{folder}: no results.json (--with {sub}: a folder inside each comparison)")
        for r in read_comparison_results(folder)["methods"]:
            where.setdefault(r, folder)
    missing = [r for r in runs if r not in where]
    if missing:
        raise ValueError(f"{compare_dir}: runs {missing} not in the comparison (have {sorted(where)})")

    def sets(rows: list[dict[str, list[int]]]) -> dict[str, np.ndarray]:
        return {(ID if s == id_skill else s): np.array([r[s] for r in rows], dtype=float) for s in rows[0]}

    keys = item_keys(compare_dir, split)
    out = {"base": sets([_scored(Path(compare_dir) / "runs" / "base" / "scored_items.json", split)])}
    for r in runs:
        out[r] = sets([_scored(run_dir(where[r], r, s) / "scored_items.json", split, keys) for s in seeds])
    return out


def _point(means: dict[str, float], base: dict[str, float]) -> tuple[float, float]:
    ood = [k for k in means if k != ID]
    retention = float(np.mean([means[k] for k in ood])) / max(float(np.mean([base[k] for k in ood])), 1e-9)
    return retention, 100.0 * (means[ID] - base[ID])


def excess_statistic(run: str, front_runs: Sequence[str], shape: str = "hull"):
    """statistic(means) -> the excess of `run` over the front of `front_runs` and the base (module docstring); a
    front run judged against the front of the others. 0 above the front's right end means the run keeps more
    than every front point; the gain counts there in full. `shape` "hull": the concave upper hull
    (`front.hull_weights`); "segments": the Pareto points joined by segments (`report.front_weights`, the first
    verdict's front)."""
    if shape not in FRONT_SHAPES:
        raise ValueError(f"front shape: one of {sorted(FRONT_SHAPES)}, got {shape!r}")
    weights = FRONT_SHAPES[shape]
    others = [r for r in front_runs if r != run]

    def statistic(means: dict[str, dict[str, float]]) -> float:
        base = means["base"]
        pts = [(1.0, 0.0)] + [_point(means[r], base) for r in others]
        x, y = _point(means[run], base)
        front = sum(w * pts[i][1] for i, w in weights(pts, x))
        return y - front

    return statistic


def base_verdict(
    compare_dir: str | os.PathLike,
    runs: Sequence[str],
    front_runs: Sequence[str],
    split: str = "reported",
    n_boot: int = 2000,
    seed: int = 0,
    also: Sequence[str] = (),
    seeds: bool = True,
    keep: bool = False,
    method: str = "hull-bc",
    level: float = 0.95,
) -> dict[str, dict]:
    """{run: paired_bootstrap of its excess, with the run's "retention" and ID "gain" (points)} on one base (`runs`
    judged, `front_runs` the front; runs read as `load_scores` reads them, `also` included), the same draws for every
    run (one generator seeded by `seed` per run, so adding a run changes no other run's interval, and bases whose
    items and seeds are alike get the same draws). `seeds=False`: the items alone resampled; `keep`: the
    replicates' values too (`paired_bootstrap`). `method` (`METHODS`): the front's shape, and with "hull-bc" the
    bootstrap's bias correction added ("bias", "corrected", "bc_low", "bc_high": `intervals.bias_corrected`)."""
    shape = _method(method)["shape"]
    scores = load_scores(compare_dir, sorted({*runs, *front_runs}), split, also)
    means = {k: {s: float(a.mean()) for s, a in sets.items()} for k, sets in scores.items()}
    out = {}
    for r in runs:
        used = {k: scores[k] for k in ("base", r, *front_runs)}
        rng = np.random.default_rng(seed)
        stat = excess_statistic(r, front_runs, shape)
        out[r] = _with_correction(paired_bootstrap(used, stat, n_boot, rng, level, seeds, keep=True), method, level)
        if not keep:
            del out[r]["values"]
        out[r]["retention"], out[r]["gain"] = _point(means[r], means["base"])  # where the run lies
        out[r]["past_front"] = out[r]["retention"] > _last_front_retention(means, front_runs, r)
    return out


def _last_front_retention(means: dict, front_runs: Sequence[str], run: str) -> float:
    """The largest retention of a front run other than `run`: past it, the front is a chord to the base point."""
    return max((_point(means[f], means["base"])[0] for f in front_runs if f != run), default=1.0)


def _method(method: str) -> dict:
    if method not in METHODS:
        raise ValueError(f"verdict method: one of {sorted(METHODS)}, got {method!r}")
    return METHODS[method]


def _with_correction(boot: dict, method: str, level: float) -> dict:
    """The bootstrap row with, when `method` corrects, the bias-corrected estimate and normal interval."""
    if not _method(method)["correct"]:
        return boot
    bc = bias_corrected(boot["estimate"], boot["values"], level)
    return {**boot, "bias": bc["bias"], "corrected": bc["corrected"], "bc_low": bc["aware_low"],
            "bc_high": bc["aware_high"]}  # fmt: skip


VAL = "~val/"  # the validation item sets inside a pick's bootstrap: sorted after every skill's name, so the reported
# sets are drawn first, as `base_verdict` draws them


def pick_statistic(
    candidates: Sequence[str], front_runs: Sequence[str], shape: str = "hull", chosen: list | None = None
):
    """statistic(means) -> the reported excess of the candidate whose excess on the validation item sets (named
    VAL + set) is the largest, the pick made again from the means it is handed: inside a bootstrap, every replicate
    picks anew, so the pick's luck (the seeds' share of it: validation and reported items are scored on the same
    models) is inside the interval. Each call's pick is appended to `chosen` when given."""
    stats_ = {c: excess_statistic(c, front_runs, shape) for c in candidates}

    def statistic(means: dict[str, dict[str, float]]) -> float:
        val = {k: {s[len(VAL) :]: v for s, v in m.items() if s.startswith(VAL)} for k, m in means.items()}
        rep = {k: {s: v for s, v in m.items() if not s.startswith(VAL)} for k, m in means.items()}
        best = max(candidates, key=lambda c: stats_[c](val))
        if chosen is not None:
            chosen.append(best)
        return stats_[best](rep)

    return statistic


def base_picks(
    compare_dir: str | os.PathLike,
    groups: dict[str, Sequence[str]],
    front_runs: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    also: Sequence[str] = (),
    method: str = "hull-bc",
    level: float = 0.95,
) -> dict[str, dict]:
    """{group: the bootstrap of the reported excess of the group's run with the largest excess over the front on
    the validation items, with "picked" (that run), "val" ({candidate: its validation excess}) and, where the pick
    is redone in every replicate, "pick_share" (the share of replicates that pick it) added}, on one base. A group
    is an option and the runs of its knob values (`{"subspace": ["rpsft-...-lam0.1", "rpsft-...-lam0.01"]}`);
    reported items take no part in the choice. With "hull-bc" (`METHODS`) each replicate draws the seeds, then the
    reported and the validation items, and picks again (`pick_statistic`); with "first" the pick is made once on the
    data and the picked run's `base_verdict` reported (the pick's luck not in the interval). A one-run group is
    that run's `base_verdict`."""
    cands = sorted({r for runs in groups.values() for r in runs})
    if any(not runs for runs in groups.values()):
        raise ValueError(f"--pick: every group needs runs, got {dict(groups)}")
    m = _method(method)
    val = load_scores(compare_dir, sorted({*cands, *front_runs}), "val", also)
    means = {k: {s: float(a.mean()) for s, a in sets.items()} for k, sets in val.items()}  # the data's estimate
    val_excess = {r: excess_statistic(r, front_runs, m["shape"])(means) for r in cands}
    picked = {g: max(runs, key=val_excess.__getitem__) for g, runs in groups.items()}
    rep_runs = sorted({r for g, r in picked.items() if not m["repick"] or len(groups[g]) == 1})
    rep = base_verdict(compare_dir, rep_runs, front_runs, "reported", n_boot, seed, also, method=method, level=level)
    out = {g: {**rep[r], "picked": r} for g, r in picked.items() if not m["repick"] or len(groups[g]) == 1}
    if m["repick"] and (multi := [g for g in groups if len(groups[g]) > 1]):
        runs = sorted({r for g in multi for r in groups[g]})
        reported = load_scores(compare_dir, sorted({*runs, *front_runs}), "reported", also)
        rep_means = {k: {s: float(a.mean()) for s, a in sets.items()} for k, sets in reported.items()}
        for g in multi:
            keys = ("base", *groups[g], *front_runs)
            used = {k: {**reported[k], **{VAL + s: a for s, a in val[k].items()}} for k in keys}
            chosen: list[str] = []
            stat = pick_statistic(groups[g], front_runs, m["shape"], chosen)
            boot = paired_bootstrap(used, stat, n_boot, np.random.default_rng(seed), level, keep=True)
            row = _with_correction(boot, method, level)
            del row["values"]
            r = picked[g]
            assert chosen[0] == r  # the estimate's pick is the data's
            row["retention"], row["gain"] = _point(rep_means[r], rep_means["base"])
            row["past_front"] = row["retention"] > _last_front_retention(rep_means, front_runs, r)
            out[g] = {**row, "picked": r, "pick_share": chosen[1:].count(r) / n_boot}
    return {g: {**out[g], "val": {c: val_excess[c] for c in groups[g]}} for g in groups}


def pooled_verdict(per_base: Sequence[dict[str, dict]], level: float = 0.95, key: str = "estimate") -> dict[str, dict]:
    """{run: Hartung-Knapp pooled excess over the bases (each base's `key`, "estimate" or the bias-"corrected" one,
    with its bootstrap SE as its within-base SD), its two-sided "p" (t on bases - 1 df), the bases' values, how many
    lie above 0, and the run's retention and ID gain averaged over the bases}; one base alone gives its own
    bootstrap interval. With "corrected" the interval is bias-aware: widened each side by "bias_bound", the size of
    the bases' mean bootstrap bias (`intervals.bias_corrected`), the Hartung-Knapp one kept as "hk_low" /
    "hk_high", and "p" is `intervals.bias_aware_p`."""
    runs = [r for r in per_base[0] if all(r in b for b in per_base)]
    out = {}
    for r in runs:
        y = [b[r][key] for b in per_base]
        bound = abs(float(np.mean([b[r]["bias"] for b in per_base]))) if key == "corrected" else 0.0
        if len(per_base) == 1:
            b = per_base[0][r]
            low, high = (b["bc_low"], b["bc_high"]) if key == "corrected" else (b["low"], b["high"])
            pooled = {"mean": b[key], "se": b["se"], "low": low, "high": high, "df": None}
            pooled["p"] = bias_aware_p(b[key], b["se"], bound) if key == "corrected" else t_test_p(b[key], b["se"])
        else:
            pooled = hartung_knapp(y, [max(b[r]["se"], 1e-6) ** 2 for b in per_base], level)
            pooled["p"] = bias_aware_p(pooled["mean"], pooled["se"], bound, pooled["df"])
            if key == "corrected":
                pooled |= {"hk_low": pooled["low"], "hk_high": pooled["high"], "bias_bound": bound}
                pooled["low"], pooled["high"] = pooled["low"] - bound, pooled["high"] + bound
        where = {k: float(np.mean([b[r][k] for b in per_base])) for k in ("retention", "gain")}
        out[r] = {**pooled, "bases": len(y), "above": int(sum(v > 0 for v in y)), "per_base": y, **where}
        out[r]["past_front"] = int(sum(bool(b[r].get("past_front")) for b in per_base))
    return out


def item_keys(compare_dir: str | os.PathLike, split: str = "reported") -> dict[str, list[str]]:
    """{skill: the keys of its items, in the order of the grades} that a comparison scored (its base's record)."""
    rec = json.loads((Path(compare_dir) / "runs" / "base" / "scored_items.json").read_text())
    return rec[split]


def shared_items_intervals(
    pooled: dict[str, dict],
    per_base: Sequence[dict[str, dict]],
    folders: Sequence[Path],
    front_runs: Sequence[str],
    split: str = "reported",
    n_boot: int = 2000,
    seed: int = 0,
    also: Sequence[str] = (),
    method: str = "hull-bc",
) -> None:
    """Add to each pooled row "shared_items": the pooled interval widened for items that every base shares.

    When the comparisons scored the same items (`toy compare`'s `eval_seed`), the item sample's error is common to
    every base's estimate and does not average out over bases, while the Hartung-Knapp variance treats the bases'
    errors as independent. Added here: the variance, over the same item draws on every base (seeds held, items
    resampled), of the bases' mean excess, `se_items`; the interval mean +- t_{k-1} sqrt(SE_HK^2 + se_items^2),
    conservative (an item's part that differs between bases is counted twice), and its two-sided "p" (t on k - 1
    df). Nothing is added when the bases' items differ. `method`: the front's shape (`METHODS`)."""
    keys = [item_keys(f, split) for f in folders]
    if len(folders) < 2 or any(k != keys[0] for k in keys[1:]):
        return
    vals: dict[str, list[np.ndarray]] = {row: [] for row in pooled}
    for f, b in zip(folders, per_base):  # each base's scores read once, for every row's run there
        picked = {row: b[row].get("picked", row) for row in pooled}
        items_only = base_verdict(f, sorted(set(picked.values())), front_runs, split, n_boot, seed, also, seeds=False,
                                  keep=True, method=method)  # fmt: skip
        for row, run in picked.items():  # the same item draws on every base: equally seeded generators, same sizes
            vals[row].append(items_only[run]["values"])
    for row, p in pooled.items():
        se_items = float(np.mean(vals[row], axis=0).std(ddof=1))
        se = float(np.hypot(p["se"], se_items))
        bound = p.get("bias_bound", 0.0)  # the bias-aware widening of a bias-corrected row, kept
        p["shared_items"] = {
            "se_items": se_items,
            "se": se,
            "low": p["mean"] - p["t"] * se - bound,
            "high": p["mean"] + p["t"] * se + bound,
            "p": bias_aware_p(p["mean"], se, bound, p["df"]),
        }


def pilot_components(compare_dirs: Sequence[str | os.PathLike], run: str, reference: str) -> dict[str, float]:
    """Variance components (`intervals.variance_components`) of the per-item ID difference run - reference, in
    points, over a pilot's bases x seeds x items: what a power calculation for their paired difference needs."""
    d = []
    for folder in compare_dirs:
        s = load_scores(folder, [run, reference])
        d.append(100.0 * (s[run][ID] - s[reference][ID]))
    return variance_components(np.stack(d))


def comparison_folders(sources: Sequence[str | os.PathLike]) -> list[Path]:
    """The comparisons of `sources`: each a comparison folder (results.json) or a study over several bases (its
    base-seedB folders, `layout.base_folders`), in the order given."""
    out = []
    for src in sources:
        found = base_folders(src) if Path(src).is_dir() else {}
        if found:
            out.extend(found.values())
        elif (Path(src) / "results.json").is_file():
            out.append(Path(src))
        else:
            raise ValueError(f"--from {src}: neither a comparison (results.json) nor a study of base-seedB folders")
    return out


def run_verdict(
    sources: Sequence[str | os.PathLike],
    runs: Sequence[str],
    front_runs: Sequence[str],
    out: str | os.PathLike,
    split: str = "reported",
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    also: Sequence[str] = (),
    picks: dict[str, Sequence[str]] | None = None,
    method: str = "hull-bc",
    confirm: str | None = None,
    sesoi: float | None = None,
) -> dict:
    """`base_verdict` on every comparison of `sources` (and its folders `also`) for `runs`, and `base_picks` for
    the groups of `picks` (knobs chosen per base on the validation items; reported items only), `pooled_verdict`
    over them (of the bias-corrected estimates with "hull-bc"), and the decision (`decision.decide`: Holm over every
    row, the row `confirm` judged alone against `sesoi`); writes OUT/verdict.json and OUT/verdict.md; returns the
    verdict."""
    picks = dict(picks or {})
    if picks and split != "reported":
        raise ValueError("--pick: the knobs are chosen on the validation items and scored on the reported ones")
    if clash := sorted(set(picks) & set(runs)):
        raise ValueError(f"--pick: group names {clash} are also judged runs")
    if confirm is not None and confirm not in {*runs, *picks}:
        raise ValueError(f"--confirm {confirm}: not a judged run or --pick group ({sorted({*runs, *picks})})")
    m = _method(method)
    folders = comparison_folders(sources)
    per_base = []
    for f in folders:
        per_base.append(base_verdict(f, runs, front_runs, split, n_boot, seed, also, method=method, level=level)
                        if runs else {})  # fmt: skip
        per_base[-1].update(base_picks(f, picks, front_runs, n_boot, seed, also, method, level) if picks else {})
    pooled = pooled_verdict(per_base, level, "corrected" if m["correct"] else "estimate")
    shared_items_intervals(pooled, per_base, folders, front_runs, split, n_boot, seed, also, method)
    verdict = {
        "method": method,
        "split": split,
        "picks": {g: list(r) for g, r in picks.items()},
        "front": list(front_runs),
        "level": level,
        "replicates": n_boot,
        "bases": [str(f) for f in folders],
        "pooled": pooled,
        "per_base": per_base,
        "decision": decide(pooled, confirm, sesoi, level),
    }
    write_json(Path(out) / "verdict.json", verdict, indent=1)
    write_text(Path(out) / "verdict.md", verdict_markdown(verdict))
    write_forest_plot(verdict, Path(out) / "verdict.png")
    return verdict


def base_interval(verdict: dict, row: dict) -> tuple[float, float, float]:
    """(estimate, low, high) of one base's row as the verdict's method reports it: bias-corrected for "hull-bc"."""
    if _method(verdict.get("method", "first"))["correct"]:
        return row["corrected"], row["bc_low"], row["bc_high"]
    return row["estimate"], row["low"], row["high"]


def verdict_markdown(verdict: dict) -> str:
    """verdict.md: per run the pooled excess over the front, its interval, how many bases put it above, and each
    base's estimate with its bootstrap interval; then the decision (`decision.decision_markdown`)."""
    pct = round(100 * verdict["level"])
    method = verdict.get("method", "first")
    k = len(verdict["bases"])
    how = (
        f"Hartung-Knapp random-effects mean over {k} bases, t interval on {k - 1} degrees of freedom"
        if k > 1
        else "one base: its paired bootstrap interval"
    )
    lines = [
        f"# Excess ID gain over the front of {', '.join(verdict['front'])} (and the base)",
        "",
        f"Points of greedy ID accuracy above the front at the run's OOD retention, on the {verdict['split']} items "
        "(retention and ID gain: the run's, averaged over the bases); "
        f"{pct} % intervals: per base a paired bootstrap ({verdict['replicates']} replicates: seeds, then items, "
        f"the same draws for every run; the front refitted in each), pooled by {how}.",
        "",
        "Method: "
        + (
            "the front is the concave upper hull; per base the bootstrap's bias (replicate mean - estimate) is "
            "subtracted and the interval is the bias-corrected normal one; knobs are picked again in every replicate "
            "(pick share: the replicates that pick the data's knob)."
            if _method(method)["correct"]
            else "the first verdict's: the Pareto points joined by segments, percentile intervals, knobs picked once."
        ),
        "",
        f"| run | retention | ID gain | pooled excess | {pct} % interval | items shared: {pct} % | bases above the "
        "front | per base: estimate [interval] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if any("shared_items" in p for p in verdict["pooled"].values()):
        lines[-3:-3] = [
            "Items shared: every base scored the same items, whose sampling error does not average out over bases; "
            "this interval adds the variance of the bases' mean excess over the same item draws (seeds held) to "
            "the pooled variance (conservative).",
            "",
        ]
    if verdict.get("picks"):
        lines[-3:-3] = [
            "A group's knob is picked on each base's validation items (the largest excess over the front there) and "
            "scored on the reported ones; the run picked follows each base's estimate.",
            "",
        ]
    for run, p in verdict["pooled"].items():
        per = "; ".join(
            "{:+.1f} [{:+.1f}, {:+.1f}]".format(*base_interval(verdict, b[run]))
            + (f" ({b[run]['picked']}" if "picked" in b[run] else "")
            + (f", {b[run]['pick_share']:.2f}" if "pick_share" in b[run] else "")
            + (")" if "picked" in b[run] else "")
            for b in verdict["per_base"]
        )
        sh = p.get("shared_items")
        shared = f"[{sh['low']:+.1f}, {sh['high']:+.1f}]" if sh else "-"
        past = f" ({p['past_front']} past the front's last point)" if p.get("past_front") else ""
        lines.append(
            f"| {run} | {p['retention']:.3f} | {p['gain']:+.1f} | {p['mean']:+.1f} "
            f"| [{p['low']:+.1f}, {p['high']:+.1f}] | {shared} | {p['above']} of {p['bases']}{past} | {per} |"
        )
    if verdict.get("decision"):
        lines += ["", decision_markdown(verdict["decision"])]
    return "\n".join(lines) + "\n"


def write_forest_plot(verdict: dict, path: str | os.PathLike) -> None:
    """verdict.png, a forest plot: one row per run, each base's excess over the front with its bootstrap interval
    (small, grey), the pooled excess with its interval (black square and bar) and, when the bases share their items,
    the interval widened for it (thin black line), 0 (on the front) dashed."""
    plt = pyplot()

    runs = list(verdict["pooled"])
    k = len(verdict["per_base"])
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(runs)))
    for row, run in enumerate(runs):
        y = len(runs) - 1 - row  # the first run on top, as in verdict.md
        for j, b in enumerate(verdict["per_base"]):  # the bases spread a little around the row, in their order
            est, low, high = base_interval(verdict, b[run])
            dy = 0.25 * (j - (k - 1) / 2) / max(k - 1, 1)
            ax.errorbar(est, y + dy, xerr=[[est - low], [high - est]], fmt="o", ms=3, color="0.55", lw=0.8)
        p = verdict["pooled"][run]
        if sh := p.get("shared_items"):  # the interval widened for items every base shares: thin, behind
            ax.plot([sh["low"], sh["high"]], [y, y], color="k", lw=0.8)
        ax.errorbar(p["mean"], y, xerr=[[p["mean"] - p["low"]], [p["high"] - p["mean"]]], fmt="s", ms=6,
                    color="k", lw=2, capsize=4)  # fmt: skip
    ax.axvline(0.0, ls="--", color="0.4", lw=1)
    ax.set_yticks(range(len(runs)), [f"{r} ({verdict['pooled'][r]['retention']:.2f})" for r in reversed(runs)])
    ax.set_xlabel("excess ID gain over the front (points); in brackets: OOD retention")
    pct = round(100 * verdict["level"])
    ax.set_title(f"{pct} % intervals: per base (grey, paired bootstrap), pooled over {k} (black)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def power_table(
    sources: Sequence[str | os.PathLike],
    run: str,
    reference: str,
    bases: Sequence[int] = (4, 6, 8),
    seeds: Sequence[int] = (3, 5),
    items: int | None = None,
    level: float = 0.95,
    power: float = 0.8,
) -> dict:
    """The pilot's variance components of the per-item ID difference `run` - `reference` (points) and the
    detectable effect (`intervals.detectable_effect`) of each design bases x seeds at the pilot's item count (or
    `items`)."""
    folders = comparison_folders(sources)
    comp = pilot_components(folders, run, reference)
    n_items = items or load_scores(folders[0], [run])[run][ID].shape[1]
    rows = [
        {"bases": b, "seeds": s, "items": n_items, "detectable": detectable_effect(comp, b, s, n_items, level, power)}
        for b in bases
        for s in seeds
    ]
    return {"run": run, "reference": reference, "pilot_bases": len(folders), "components": comp, "designs": rows}
