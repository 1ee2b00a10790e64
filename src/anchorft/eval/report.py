"""The evaluation's reports: the suite's main table (JSON, markdown, figure) and `anchorft eval`'s figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from anchorft.io import pyplot, save_figure, write_text
from anchorft.provenance import write_metrics

__all__ = ["main_table", "table_markdown", "plot_table", "write_table", "plot_metrics"]


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def main_table(results: dict[str, dict[str, dict]], domains: dict[str, str], base: str) -> dict:
    """Per model: each benchmark's Avg@k and Pass@k, the ID and OOD means (unweighted over benchmarks),
    and their differences from the base model."""
    rows = {}
    for model, per in results.items():
        row = {"benches": {b: {"avg@k": m["avg@k"], "pass@k": m["pass@k"]} for b, m in per.items()}}
        for dom in ("id", "ood"):
            for met in ("avg@k", "pass@k"):
                row[f"{dom}_mean_{met}"] = _mean([m[met] for b, m in per.items() if domains[b] == dom])
        rows[model] = row
    for row in rows.values():
        for key in [k for k in row if k.endswith("@k") and "_mean_" in k]:
            b, r = rows[base][key], row[key]
            row["delta_" + key] = None if b is None or r is None else r - b
    k = next(iter(next(iter(results.values())).values()))["k"]
    return {"base": base, "k": k, "domains": domains, "models": rows}


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def table_markdown(table: dict) -> str:
    k, doms = table["k"], table["domains"]
    benches = [b for b in doms if doms[b] == "id"] + [b for b in doms if doms[b] == "ood"]
    lines = []
    for met, label in (("avg@k", f"Avg@{k}"), ("pass@k", f"Pass@{k}")):
        head = ["model"] + [f"{b} ({doms[b].upper()})" for b in benches]
        head += ["ID mean", "OOD mean", f"ID vs {table['base']}", f"OOD vs {table['base']}"]
        lines += [f"### {label} (%)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for model, row in table["models"].items():
            cells = [model] + [_pct(row["benches"].get(b, {}).get(met)) for b in benches]
            cells += [_pct(row[f"id_mean_{met}"]), _pct(row[f"ood_mean_{met}"])]
            cells += [_pct(row[f"delta_id_mean_{met}"], True), _pct(row[f"delta_ood_mean_{met}"], True)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _bars(path: Path, names: list, series: dict, figsize, rotation: int, ylabel: str, ylim=None, **legend) -> None:
    """A grouped bar chart saved to `path`: one group per name, one bar per series (in the legend). Where every
    value is 0 (bars of no height, which read as an empty plot), the plot says "all scores 0"."""
    x = np.arange(len(names))
    width = 0.8 / len(series)
    fig, ax = pyplot().subplots(figsize=figsize)
    for j, (label, vals) in enumerate(series.items()):
        ax.bar(x + j * width, vals, width, label=label)
    ax.set_xticks(x + width * (len(series) - 1) / 2, names, rotation=rotation, ha="right")
    if ylim is not None:
        ax.set_ylim(*ylim)
    if not any(v for vals in series.values() for v in vals):
        ax.set_ylim(*(ylim or (0, 1)))
        ax.text(0.5, 0.5, "all scores 0", transform=ax.transAxes, ha="center", va="center", fontsize=14, color="C3")
    ax.set_ylabel(ylabel)
    ax.legend(**legend)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def plot_table(table: dict, path: Path) -> None:
    """The suite's figure: Avg@k per benchmark and the ID and OOD means, one bar per model."""
    doms = table["domains"]
    benches = [b for b in doms if doms[b] == "id"] + [b for b in doms if doms[b] == "ood"] + ["ID mean", "OOD mean"]
    series = {}
    for m, row in table["models"].items():
        vals = [row["benches"].get(b, {}).get("avg@k") for b in benches[:-2]]
        vals += [row["id_mean_avg@k"], row["ood_mean_avg@k"]]
        series[m] = [0.0 if v is None else 100 * v for v in vals]
    _bars(path, benches, series, (max(6, 0.7 * len(benches) + 2), 3.8), 35, f"Avg@{table['k']} (%)", fontsize=8)


def write_table(table: dict, out: Path) -> None:
    """out/table.json (with provenance), table.md and table.png."""
    write_metrics(out / "table.json", table, indent=2)
    write_text(out / "table.md", table_markdown(table))
    plot_table(table, out / "table.png")


def plot_metrics(all_metrics: dict[str, dict], path: Path) -> None:
    """`anchorft eval`'s figure: Avg@k, Pass@k and greedy accuracy per benchmark."""
    names = list(all_metrics)
    keys = [key for key in ("avg@k", "pass@k", "greedy_acc") if any(key in m for m in all_metrics.values())]
    series = {key: [all_metrics[n].get(key, 0.0) for n in names] for key in keys}
    _bars(path, names, series, (max(5, 1.2 * len(names) + 2), 3.5), 30, "accuracy", ylim=(0, 1))
