"""report.md (a table like the paper's, with changes against base) and tradeoff.png for `toy compare`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np

from anchorft.io import pyplot, save_figure, write_text
from anchorft.resources import configs_dir
from anchorft.runs import check_output_dir, run_claimed
from anchorft.studies.testbed.results import (
    RESULTS_FILE,
    CompareResults,
    load_results,
    merge_results,
    sample_std,
    save_results,
)
from anchorft.studies.testbed.wise_curves import draw_interpolation_curves

__all__ = [
    "write_report",
    "write_tradeoff_plot",
    "acceptance",
    "acceptance_line",
    "plumbing_line",
    "verdict_headline",
    "pareto_front",
    "front_weights",
    "front_table",
    "pick_on_val",
    "parse_picks",
    "write_front",
    "write_merged_report",
]

COLS = (("id_avg@k", "ID Avg@k"), ("id_pass@k", "ID Pass@k"), ("id_greedy", "ID greedy"), ("ood_mean", "OOD mean"))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _delta(x: float, base: float) -> str:
    return f"{100 * (x - base):+.1f}"


# The acceptance check (SFT vs base, in points): the phenomenon is that SFT learns the ID task and forgets the rest.
# The ID bar is what the six verdict bases' records (records/verdict, lr 1e-3, 200 steps) show on every base: SFT's
# mean gain there is +8.4 to +32.1 points (over fine-tuning seeds 0 and 1 alone +7.5 to +39.0), so a +10 bar, set on
# one base at lr 5e-4 where SFT gained +12.2, failed on base 15 (+8.4) while its OOD loss was 80 points. +5 points is
# over 2 item standard errors at 200 items and under every recorded base's mean. The OOD bar: every base lost 60-80.
ACCEPT_ID_GAIN = 5.0
ACCEPT_OOD_LOSS = 10.0


def acceptance(results: dict) -> dict | None:
    """The testbed's acceptance check: SFT gains >= ACCEPT_ID_GAIN points ID greedy and loses >= ACCEPT_OOD_LOSS
    points OOD mean; `judged` False for a plumbing check (`compare_config.plumbing_only`), whose numbers say nothing
    of the phenomenon."""
    if "sft" not in results["methods"]:
        return None
    b, s = results["base"], results["methods"]["sft"]
    id_gain = 100 * (s["id_greedy"] - b["id_greedy"])
    ood_loss = 100 * (b["ood_mean"] - s["ood_mean"])
    judged = not results.get("settings", {}).get("plumbing_only")
    ok = id_gain >= ACCEPT_ID_GAIN and ood_loss >= ACCEPT_OOD_LOSS
    return {"id_gain_points": id_gain, "ood_loss_points": ood_loss, "ok": ok, "judged": judged}


def acceptance_line(results: dict) -> str | None:
    """The report's acceptance line: "met" or "NOT met", or "not judged on the smoke preset" for a plumbing check."""
    acc = acceptance(results)
    if acc is None:
        return None
    values = (f"ID greedy {acc['id_gain_points']:+.1f} points (need >= +{ACCEPT_ID_GAIN:.0f}), "
              f"OOD mean {-acc['ood_loss_points']:+.1f} points (need <= -{ACCEPT_OOD_LOSS:.0f})")  # fmt: skip
    if not acc["judged"]:
        why = results["settings"]["plumbing_only"]
        return f"Acceptance (SFT vs base): not judged on the smoke preset (a plumbing check: {why}); {values}."
    return f"Acceptance (SFT vs base): {values}: {'met' if acc['ok'] else 'NOT met'}."


def plumbing_line(results: dict) -> str | None:
    """The first line of a plumbing check's report (`settings.plumbing_only`), None for other comparisons."""
    why = results.get("settings", {}).get("plumbing_only")
    if not why:
        return None
    return f"Plumbing check only (smoke preset: {why}): its numbers say nothing about the methods."


VERDICT_SUMMARY = "toy/verdict-summary.json"  # under configs/: written from records/verdict.json by make docs-tables


def verdict_headline(results: dict, summary: dict | None = None) -> str | None:
    """The first line of a one-base comparison run at the verdict's settings (its lr and steps, every run one the
    verdict judged or its front): "One base (pretraining seed S); the verdict over N bases: ..." with each shown
    option's pooled excess over the L2 front, then the runs above this base's front of sft, l2 and rpsft-k24. None
    for other comparisons. `summary`: configs/toy/verdict-summary.json (`anchorft.studies.records`)."""
    st = results.get("settings", {})
    if st.get("plumbing_only") or "sft" not in results["methods"]:
        return None
    if summary is None:
        path = configs_dir(*VERDICT_SUMMARY.split("/"))
        if not path.is_file():
            return None
        summary = json.loads(path.read_text(encoding="utf-8"))
    runs = summary["runs"]
    if (st.get("learning_rate"), st.get("max_steps")) != (summary["learning_rate"], summary["max_steps"]):
        return None
    if any(runs.get(n) is None or runs[n]["settings"] != m["settings"] for n, m in results["methods"].items()):
        return None
    shown = dict.fromkeys(runs[n]["option"] for n in results["methods"] if runs[n]["option"])
    opts = summary["options"]
    words = {"under": "under the L2 front (both intervals below 0)", "above": "above it (both above 0)"}
    words[None] = "neither"
    parts = []
    for state, word in words.items():
        these = [f"{o} {opts[o]['interval']}" for o in shown if opts[o]["decided"] == state]
        if these:
            parts.append(f"{word}: {', '.join(these)}")
    front = [n for n in results["methods"] if runs[n]["front"]]
    rows = front_table(results, front)
    above = [f"{r['run']} ({r['excess']:+.1f}, joint SE {r['se_joint'] or 0:.1f})" for r in rows
             if r["excess"] > 0 and r["run"] not in front]  # fmt: skip
    return (
        f"One base (pretraining seed {st.get('pretrain_seed', '?')}); the verdict over {summary['bases']} bases "
        f"({summary['record']}, its {summary.get('method', 'first')} method; excess ID points over the L2 front, 95 % "
        f"interval): {'; '.join(parts)}. "
        f"Here, above the front of {', '.join(front)}: {', '.join(above) or 'none'}."
    )


def write_report(results: dict, path: str | Path) -> None:
    """Markdown table: each model's metrics (mean over seeds, +- sample std) and change against base."""
    base, methods, st = results["base"], results["methods"], results["settings"]
    skills = list(base["ood"])
    k = st["k"]
    plumbing = plumbing_line(results)
    headline = verdict_headline(results)
    lines = [
        *([headline, ""] if headline else []),
        f"# {plumbing}" if plumbing else "# Toy testbed: forgetting and its remedies",
        "",
        f"ID: {st['id_items']} held-out {st.get('id_skill', 'math')} problems (the fine-tuning distribution), "
        f"Avg@{k} and Pass@{k} from n={st['n_samples']} samples "
        f"(temperature {st['temperature']}, top_p {st['top_p']}, unbiased estimator), greedy accuracy. "
        f"OOD: greedy accuracy on {', '.join(skills)} and their mean. Seeds: {st['seeds']}. "
        "Values in %, mean over seeds (+- sample std, ddof 1), change against base in parentheses.",
        "",
        "| model | settings | " + " | ".join(c for _, c in COLS) + " | " + " | ".join(skills) + " | train s |",
        "|---|---|" + "---|" * (len(COLS) + len(skills) + 1),
    ]
    row = ["base", "pretrained"] + [_pct(base[c]) for c, _ in COLS] + [_pct(base["ood"][s]) for s in skills] + ["-"]
    lines.append("| " + " | ".join(row) + " |")
    for name, m in methods.items():
        sett = ", ".join(f"{a}={b}" for a, b in m["settings"].items() if a != "method")
        sett = f"{sett or m['method']}, {len(m['per_seed'])} seed(s)"
        cells = [f"{_pct(m[c])} +- {_pct(m.get('std', {}).get(c, 0.0))} ({_delta(m[c], base[c])})" for c, _ in COLS]
        cells += [f"{_pct(m['ood'][s])} ({_delta(m['ood'][s], base['ood'][s])})" for s in skills]
        cells.append(f"{m['train_seconds']:.0f}")
        lines.append(f"| {name} | {sett} | " + " | ".join(cells) + " |")
    if (line := acceptance_line(results)) is not None:
        lines += ["", line]
    if "pretrain" in base:
        p = base["pretrain"]
        accs = ", ".join(f"{s} {_pct(v)}" for s, v in p["greedy_accuracy"].items())
        lines += ["", f"Base model: {p['params']:,} parameters; greedy accuracy after pretraining: {accs}."]
    lines += [
        "",
        "Trade-off: tradeoff.png (ID greedy gain against OOD retention = OOD mean / base OOD mean; "
        "error bars: sample std over seeds).",
    ]
    write_text(path, "\n".join(lines) + "\n")


def write_tradeoff_plot(results: dict, path: str | Path, front_runs: list[str] | None = None) -> None:
    """ID gain (points of greedy accuracy) against OOD retention, one point per run, seed spread as bars; with
    `front_runs`, their front (and the base's), as `front_table` interpolates it, dashed."""
    plt = pyplot()

    base = results["base"]
    # a merged report (sweeps) gets more room for its labels
    fig, ax = plt.subplots(figsize=(7, 5) if len(results["methods"]) <= 10 else (11, 8))
    from anchorft.rpsft.methods import METHODS  # lazy: loads torch

    labels: dict[tuple[int, int], list[tuple[str, float, float]]] = {}
    for name, m in results["methods"].items():
        keep, gains = _point(m, base)
        c = METHODS[m["method"]].colour if m["method"] in METHODS else "k"
        xerr, yerr = sample_std(keep), sample_std(gains)
        ax.errorbar(keep.mean(), gains.mean(), xerr=xerr, yerr=yerr, fmt="o", color=c, capsize=3)
        ax.scatter(keep, gains, s=8, color=c, alpha=0.35)
        # the label's cell: points closer than 0.01 in retention and 1 point of gain share one
        cell = round(float(keep.mean()) / 0.01), round(float(gains.mean()) / 1.0)
        labels.setdefault(cell, []).append((name, keep.mean(), gains.mean()))
    for names in labels.values():  # runs at the same place (to the plot's resolution) share one label
        ax.annotate(", ".join(n for n, _, _ in names), names[0][1:], textcoords="offset points", xytext=(4, 4),
                    fontsize=7)  # fmt: skip
    if front_runs:
        pts = [(1.0, 0.0)] + [tuple(float(v.mean()) for v in _point(results["methods"][r], base)) for r in front_runs]
        ax.plot(*zip(*pareto_front(pts)), "--", color="0.4", lw=1, label="front: " + ", ".join(front_runs))
        ax.legend(fontsize=7, loc="lower left")

    draw_interpolation_curves(ax, results)  # WiSE-FT curves, when the results hold interpolated runs
    ax.scatter([1.0], [0.0], marker="*", s=120, color="k")
    ax.annotate("base", (1.0, 0.0), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("OOD retention (OOD mean / base OOD mean)")
    ax.set_ylabel("ID gain (points of greedy accuracy)")
    title = "toy testbed: ID gain vs OOD retention (up and right is better)"
    if plumbing := plumbing_line(results):  # the first line a reader sees, as in report.md
        ax.set_title("\n".join([*textwrap.wrap(plumbing, 70), title]), fontsize=9, color="C3")
    else:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _point(m: dict, base: dict, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """Per-seed (retention, ID gain in points) of run `m` on the reported items (`split` "test") or on the
    validation items ("val": the `val` metrics of each seed and of the base)."""
    if split not in ("test", "val"):
        raise ValueError(f"split: must be 'test' or 'val', got {split!r}")
    seeds = m["per_seed"]
    if split == "val":
        if "val" not in base or any("val" not in s for s in seeds):
            raise ValueError("the comparison has no validation split (set eval.val_items > 0 and run it again)")
        seeds, base = [s["val"] for s in seeds], base["val"]
    keep = np.array([s["ood_mean"] / max(base["ood_mean"], 1e-9) for s in seeds])
    gain = np.array([100 * (s["id_greedy"] - base["id_greedy"]) for s in seeds])
    return keep, gain


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated (retention, gain) points (no other point at least as high on both), sorted by retention."""
    return sorted(p for p in points if not any(q != p and q[0] >= p[0] and q[1] >= p[1] for q in points))


def front_weights(points: list[tuple[float, float]], x: float) -> list[tuple[int, float]]:
    """(index into `points`, weight) pairs whose weighted sum of gains is the Pareto front of (retention, gain)
    `points` (the base (1, 0) included by the caller) linearly interpolated at retention `x`: the non-dominated
    points sorted by retention, joined by segments; left of the first, its gain (one point, weight 1: a run that
    keeps less is dominated by it); two on a segment; right of the last, none (gain 0)."""
    front = sorted((p, i) for i, p in enumerate(points) if p in pareto_front(points))
    if x <= front[0][0][0]:
        return [(front[0][1], 1.0)]
    for ((x0, _), i0), ((x1, _), i1) in zip(front, front[1:]):
        if x0 <= x <= x1:
            t = (x - x0) / max(x1 - x0, 1e-12)
            return [(i0, 1.0 - t), (i1, t)]
    return []


def front_table(results: dict, front_runs: list[str], split: str = "test") -> list[dict]:
    """Each run against the front of `front_runs` (and the base): mean retention and ID gain (points) over its
    seeds, the front's gain at its retention, the excess, its standard error (std ddof=1 / sqrt(n), None for one
    seed) and whether it lies above the front by more than two standard errors; `se_front`, the front's standard
    error at that retention (the gain and retention SEs of the two front runs it interpolates, weighted, retention
    through the front's slope), `se_joint` (with the run's own gain SE and retention SE x slope) and
    `above_2se_joint`. `split` "val": all of it on the validation items instead of the reported ones."""
    base = results["base"]
    if missing := [r for r in front_runs if r not in results["methods"]]:
        raise ValueError(f"front: runs {missing} not in the results (have {sorted(results['methods'])})")

    def se_of(v: np.ndarray) -> float | None:
        return float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None

    # the base is a measured point too, but every gain and retention is relative to it
    pts, pt_se, pt_se_x = [(1.0, 0.0)], [0.0], [0.0]
    for r in front_runs:
        keep, gain = _point(results["methods"][r], base, split)
        pts.append((float(keep.mean()), float(gain.mean())))
        pt_se.append(se_of(gain) or 0.0)
        pt_se_x.append(se_of(keep) or 0.0)
    rows = []
    for name, m in results["methods"].items():
        keep, gain = _point(m, base, split)
        x, y = float(keep.mean()), float(gain.mean())
        weights = front_weights(pts, x)
        f = float(sum(w * pts[i][1] for i, w in weights))
        se = se_of(gain)
        # the joint SE, to first order: the run's gain SE; the front's gain SE at x (its two points' SEs by their
        # weights); and every retention SE (the run's and the front points') times the front's slope at x, since a
        # shift along the retention axis moves the front by slope x shift (steep next to the base)
        slope = 0.0
        if len(weights) == 2:
            (i0, _), (i1, _) = weights
            slope = (pts[i1][1] - pts[i0][1]) / max(pts[i1][0] - pts[i0][0], 1e-12)
        se_front = float(np.sqrt(sum((w * pt_se[i]) ** 2 + (w * slope * pt_se_x[i]) ** 2 for i, w in weights)))
        se_x = se_of(keep)
        se_joint = None if se is None else float(np.sqrt(se**2 + se_front**2 + (slope * (se_x or 0.0)) ** 2))
        rows.append({
            "run": name, "seeds": len(gain), "retention": x, "id_gain": y, "front_gain": f, "excess": y - f,
            "se": se, "above_2se": se is not None and y - f > 2 * se, "front_run": name in front_runs,
            "se_front": se_front, "se_joint": se_joint,
            "above_2se_joint": se_joint is not None and y - f > 2 * se_joint,
        })  # fmt: skip
    return rows


def pick_on_val(results: dict, front_runs: list[str], groups: dict[str, list[str]]) -> list[dict]:
    """For each group (an option and the runs of its knob values), the run with the largest excess over the front
    on the validation items, then that run's row on the reported items (`front_table`), with `group`, `val_excess`
    and `candidates` (run -> validation excess) added. The reported items never take part in the choice."""
    val = {r["run"]: r for r in front_table(results, front_runs, "val")}
    test = {r["run"]: r for r in front_table(results, front_runs)}
    rows = []
    for group, runs in groups.items():
        missing = [r for r in runs if r not in val]
        if missing or not runs:
            raise ValueError(f"pick {group}: runs {missing or runs} not in the results (have {sorted(val)})")
        best = max(runs, key=lambda r: val[r]["excess"])
        cands = {r: val[r]["excess"] for r in runs}
        rows.append({**test[best], "group": group, "val_excess": val[best]["excess"], "candidates": cands})
    return rows


def parse_picks(specs: list[str]) -> dict[str, list[str]]:
    """`GROUP=RUN,RUN,...` strings (the `toy report --pick` values) -> {group: runs}."""
    groups = {}
    for spec in specs:
        group, sep, runs = spec.partition("=")
        names = [r for r in runs.split(",") if r]
        if not sep or not group or not names or group in groups:
            raise ValueError(f"--pick: expected GROUP=RUN,RUN,... with a new GROUP, got {spec!r}")
        groups[group] = names
    return groups


def _front_cells(r: dict) -> str:
    se = "-" if r["se"] is None else f"{r['se']:.1f}"
    joint = "-" if r["se_joint"] is None else f"{r['se_joint']:.1f}"
    if r["front_run"]:
        tags = "(front) | (front)"
    else:
        tags = f"{'yes' if r['above_2se'] else 'no'} | {'yes' if r['above_2se_joint'] else 'no'}"
    return (
        f"{r['retention']:.3f} | {r['id_gain']:+.1f} | {r['front_gain']:+.1f} | {r['excess']:+.1f} | {se} | "
        f"{joint} | {tags}"
    )


def write_front(
    results: dict, front_runs: list[str], path: str | Path, picks: dict[str, list[str]] | None = None
) -> list[dict]:
    """front.md: `front_table` as a Markdown table (and, with `picks`, the same on the validation items and the
    knobs chosen there, `pick_on_val`)."""
    rows = front_table(results, front_runs)
    lines = [
        f"# Against the front of {', '.join(front_runs)} (and the base)",
        "",
        "Retention = OOD mean / base OOD mean; ID gain in points of greedy accuracy; front = the non-dominated "
        "front runs joined by segments, at the run's retention; SE = std (ddof=1) / sqrt(seeds) of the run's gain; "
        "with the front's: adds the front's SE at that retention (its two runs' SEs by their weights) and every "
        "retention SE times the front's slope there.",
        "",
        "| run | seeds | retention | ID gain | front at it | excess | SE | SE with the front's | above by > 2 SE "
        "| above by > 2 SE with the front's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['run']} | {r['seeds']} | {_front_cells(r)} |")
    if picks:
        lines += ["", "## On the validation items (disjoint from the reported ones)", ""]
        lines += ["| run | seeds | retention | ID gain | front at it | excess |", "|---|---|---|---|---|---|"]
        for r in front_table(results, front_runs, "val"):
            lines.append(
                f"| {r['run']} | {r['seeds']} | {r['retention']:.3f} | {r['id_gain']:+.1f} | "
                f"{r['front_gain']:+.1f} | {r['excess']:+.1f} |"
            )
        lines += ["", "## Knobs chosen on the validation items, scored on the reported ones", ""]
        lines += [
            "| option | candidates (validation excess) | chosen | retention | ID gain | front at it | excess | SE "
            "| SE with the front's | above by > 2 SE | above by > 2 SE with the front's |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in pick_on_val(results, front_runs, picks):
            cands = ", ".join(f"{k} {v:+.1f}" for k, v in r["candidates"].items())
            lines.append(f"| {r['group']} | {cands} | {r['run']} | {_front_cells(r)} |")
    write_text(path, "\n".join(lines) + "\n")
    return rows


def write_merged_report(
    parts: list[CompareResults], out: str | Path, front: list[str] | None = None, picks: dict | None = None
) -> dict:
    """`toy report`: the comparisons `parts` merged (`merge_results`: a run found in several pooled over its
    seeds) into OUT/results.json, report.md, tradeoff.png and, with `front`, front.md (`picks` chosen on the
    validation items); returns the merged results."""
    out = Path(out)
    merged = merge_results(parts).to_dict()
    save_results(merged, out / RESULTS_FILE)
    write_report(merged, out / "report.md")
    write_tradeoff_plot(merged, out / "tradeoff.png", front)
    if front:
        write_front(merged, front, out / "front.md", picks)
    return merged


def report_into(
    sources: list[str], out: str | Path, front: list[str] | None = None, pick: list[str] = (), overwrite: bool = False
) -> dict:
    """`anchorft toy report`: the comparisons in the folders `sources` merged into `out` (`write_merged_report`),
    the folder claimed for them (recomputed on every call: seconds); `pick`: GROUP=RUN,RUN choices, with `front`.
    Everything is checked before a file is read or written; returns the merged results."""
    picks = parse_picks(list(pick))
    if picks and not front:
        raise ValueError("--pick: needs --front (the knobs are chosen against the front)")
    check_output_dir(out)  # before the sources are read
    parts = []
    for src in sources:
        path = Path(src) / RESULTS_FILE
        if not path.is_file():
            raise ValueError(f"--from: {path} does not exist")
        parts.append(load_results(path))
    return run_claimed(
        out, "toy report", {"sources": [p.to_dict() for p in parts], "front": front, "pick": list(pick)},
        lambda claim: write_merged_report(parts, out, front, picks), overwrite=overwrite,
        rerun_finished=True,  # recomputed every time (seconds): "running" while its files are rewritten
    )  # fmt: skip
