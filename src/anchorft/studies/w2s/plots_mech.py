"""Figures of the mechanism sweeps (ablation, race, weak-quality; anchorft.studies.w2s.mechanisms), one per kind
(its `SweepKind.figure`)."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from anchorft.io import pyplot
from anchorft.studies.w2s.kinds import XAxis
from anchorft.studies.w2s.plots import save_figure

plt = pyplot()  # the Agg backend, set in anchorft.io

__all__ = ["plot_ablation", "plot_race", "plot_weak_quality"]

SHORT = {"identity": "id", "zexp": "zexp", "none": "raw", "mean": "centred", "planted": "planted", "unit": "unit"}


def _ablation(result: dict) -> plt.Figure:
    rows = result["rows"]
    losses = sorted({r["loss"] for r in rows})
    fig, axes = plt.subplots(
        1, len(losses), figsize=(6.5 * len(losses), 0.28 * len(rows) / len(losses) + 2), squeeze=False
    )
    for ax, loss in zip(axes[0], losses):
        sub = [r for r in rows if r["loss"] == loss]
        y = np.arange(len(sub))
        labels = [
            (f"{r['activation']} " if "activation" in r else "")
            + f"{SHORT.get(r['transform'], r['transform'])} {r['variant']} {SHORT.get(r['center'], r['center'])} "
            f"{SHORT.get(r['weak_norm'], r['weak_norm'])}{' bias' if r.get('bias') == 'trained' else ''} "
            f"(c2 {r['labels_c2']:+.2f})"
            for r in sub
        ]
        for key, color, name in (
            ("target", "C0", "target with theta_1"),
            ("nontarget", "C1", "non-target with theta_2"),
            ("nontarget_to_theta1", "C2", "non-target with theta_1"),
        ):
            vals = np.array([r[key] for r in sub], dtype=float)
            err = np.array([r.get(f"{key}_std") or 0.0 for r in sub], dtype=float)
            ax.errorbar(vals, y, xerr=err, fmt="o", color=color, ms=4, label=name)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_xlabel("final alignment (mean over seeds, bar = sample std)")
        ax.set_title(f"W2S ablation, {loss} loss", fontsize=10)
        ax.grid(alpha=0.3)
        ax.invert_yaxis()
    axes[0][0].legend(fontsize=7, loc="lower right")
    return fig


def _race(result: dict) -> plt.Figure:
    rows = result["rows"]
    panels = sorted({(r["mode"], r["loss"]) for r in rows})
    sizes = sorted({(r.get("d"), r.get("s")) for r in rows}, key=lambda x: (x[1] or 0, x[0] or 0))
    chis = sorted({r["chi"] for r in rows})
    xs = sorted({r["rho_sqrt_s"] for r in rows})
    fig, axes = plt.subplots(
        len(sizes), len(panels), figsize=(4.8 * len(panels), 2.6 * len(sizes) + 0.6), squeeze=False
    )
    colors = {"learn first": "C0", "forget first": "C3", "neither": "0.6"}
    for axrow, (d, s) in zip(axes, sizes):
        for ax, (mode, loss) in zip(axrow, panels):
            sub = [r for r in rows if r["mode"] == mode and r["loss"] == loss and (r.get("d"), r.get("s")) == (d, s)]
            for r in sub:
                y = chis.index(r["chi"])
                ax.scatter(r["rho_sqrt_s"], y, s=120, color=colors[r["winner"]])
                lm = "cens" if r["learn_samples"] is None else f"{r['learn_samples'] / 1000:.0f}k"
                fm = "cens" if r["forget_samples"] is None else f"{r['forget_samples'] / 1000:.0f}k"
                edge = "*" if r.get("eta_on_edge") else ""
                seeds = f" {r['forget_first_seeds']}/{r['n_seeds']}" if "forget_first_seeds" in r else ""
                ax.annotate(
                    f"L {lm}\nF {fm}{seeds}\neta {r['eta']:g}{edge}",
                    (r["rho_sqrt_s"], y),
                    fontsize=6,
                    xytext=(0, 9),
                    textcoords="offset points",
                    ha="center",
                )
            ax.set_yticks(range(len(chis)))
            ax.set_yticklabels([f"chi {c:g}" for c in chis])
            ax.set_ylim(-0.5, len(chis) - 0.1)
            ax.set_xlim(min(xs) - 0.35, max(xs) + 0.35)
            ax.set_xlabel("rho sqrt(s)")
            size = "" if s is None else f", d={d}, s={s}"
            ax.set_title(f"{mode.upper()}, {loss} loss{size}", fontsize=9)
            ax.grid(alpha=0.3)
    for name, c in colors.items():
        axes[0][0].scatter([], [], color=c, label=name)
    axes[0][0].legend(fontsize=6, loc="lower left")
    fig.suptitle(
        "Theorem 2's race: samples to learn (L) and to forget (F), median over seeds; k/n = seeds that forget first;"
        " * = best eta on the grid's edge",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def _weak_quality(result: dict) -> plt.Figure:
    rows = sorted(
        (r for r in result["rows"] if r.get("weak_alignment") is not None), key=lambda r: r["weak_alignment"]
    )
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), squeeze=False)
    for ax, dist in zip(axes[0], ("isotropic", "generative")):
        x = np.array([r["weak_alignment"] for r in rows], dtype=float)
        series = (
            ("weak", "C2"),
            ("w2s@link", "C0"),
            ("ceiling@link", "k"),
            ("ceiling_long@link", "0.5"),
            ("w2s", "C0"),
        )
        for name, color in series:
            key = f"{dist}_risk_{name}"
            if not rows or key not in rows[0]:
                continue
            y = np.array([r[key] for r in rows], dtype=float)
            e = np.array([r[f"{key}_se"] for r in rows], dtype=float)
            ls = ":" if name == "w2s" else "-"
            ax.errorbar(x, y, yerr=e, fmt="o" + ls, color=color, ms=4, label=name, capsize=2)
        for r in rows:
            if r.get(f"{dist}_surpasses_teacher_link"):
                ax.axvspan(r["weak_alignment"] - 0.01, r["weak_alignment"] + 0.01, color="C0", alpha=0.15, lw=0)
        ax.set_xlabel("weak model's alignment with theta_1")
        ax.set_ylabel("test risk on r*_1 (MSE / Var)")
        ax.set_title(f"inputs: {dist}\n(shaded: W2S beats its teacher by > 3 se)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.1)
    axes[0][0].legend(fontsize=7)
    ax = axes[0][2]
    for dist, color in (("isotropic", "C0"), ("generative", "C1")):
        for key, ls, what in (("pgr_link", "o-", "same budget"), ("pgr_long_link", "s--", "long ceiling")):
            pts = [(r["weak_alignment"], r.get(f"{dist}_{key}")) for r in rows]
            pts = [(a, p) for a, p in pts if p is not None]
            if pts:
                ax.plot(*zip(*pts), ls, color=color, ms=4, label=f"PGR ({dist}, {what})")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.axhline(1, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("weak model's alignment with theta_1")
    ax.set_ylabel("PGR (through the link)")
    ax.set_title("PGR where its denominator exceeds 3 se", fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return fig


def _draw(result: dict, path: str | os.PathLike, figure: Callable[[dict], plt.Figure]) -> None:
    """`figure(result)` written atomically (an empty figure when the sweep has no rows)."""
    save_figure(figure(result) if result["rows"] else plt.figure(), path)


def plot_ablation(result: dict, path: str | os.PathLike, axis: XAxis | None = None) -> None:
    """The ablation's figure: per loss, the final alignments of each point with their spread over seeds."""
    _draw(result, path, _ablation)


def plot_race(result: dict, path: str | os.PathLike, axis: XAxis | None = None) -> None:
    """The race's figure: per size, mode and loss, who finished first in each cell, with the medians."""
    _draw(result, path, _race)


def plot_weak_quality(result: dict, path: str | os.PathLike, axis: XAxis | None = None) -> None:
    """weak-quality's figure: the test risks against the weak model's alignment, and the PGR."""
    _draw(result, path, _weak_quality)
