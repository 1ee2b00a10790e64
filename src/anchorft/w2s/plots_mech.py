"""Figures of the mechanism sweeps (ablation, race, weak-quality; anchorft.w2s.mechanisms)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from anchorft.w2s.plots import save_figure  # noqa: E402

__all__ = ["plot_mech"]

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
            f"{SHORT.get(r['transform'], r['transform'])} {r['variant']} {SHORT.get(r['center'], r['center'])} "
            f"{SHORT.get(r['weak_norm'], r['weak_norm'])} (c2 {r['labels_c2']:+.2f})"
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
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    colors = {"learn first": "C0", "forget first": "C3", "neither": "0.6"}
    for ax, (mode, loss) in zip(axes[0], panels):
        sub = [r for r in rows if r["mode"] == mode and r["loss"] == loss]
        for r in sub:
            ax.scatter(r["rho_sqrt_s"], r["chi"], s=140, color=colors[r["winner"]])
            lm = "cens" if r["learn_samples"] is None else f"{r['learn_samples'] / 1000:.0f}k"
            fm = "cens" if r["forget_samples"] is None else f"{r['forget_samples'] / 1000:.0f}k"
            ax.annotate(
                f"L {lm}\nF {fm}", (r["rho_sqrt_s"], r["chi"]), fontsize=6, xytext=(6, -6), textcoords="offset points"
            )
        ax.set_yscale("log")
        ax.set_xlabel("rho sqrt(s)")
        ax.set_ylabel("chi_2 = N_1 / N_2")
        ax.set_title(f"{mode.upper()}, {loss} loss", fontsize=10)
        ax.grid(alpha=0.3)
    for name, c in colors.items():
        axes[0][0].scatter([], [], color=c, label=name)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Theorem 2's race: samples to learn (L) and to forget (F), median over seeds", fontsize=10)
    return fig


def _weak_quality(result: dict) -> plt.Figure:
    rows = [r for r in result["rows"] if r.get("weak_alignment") is not None]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), squeeze=False)
    for ax, dist in zip(axes[0], ("isotropic", "generative")):
        x = np.array([r["weak_alignment"] for r in rows], dtype=float)
        for name, color in (("weak", "C2"), ("w2s@link", "C0"), ("ceiling@link", "k"), ("w2s", "C0")):
            key = f"{dist}_risk_{name}"
            if not rows or key not in rows[0]:
                continue
            y = np.array([r[key] for r in rows], dtype=float)
            e = np.array([r[f"{key}_se"] for r in rows], dtype=float)
            ls = ":" if name == "w2s" else "-"
            ax.errorbar(x, y, yerr=e, fmt="o" + ls, color=color, ms=4, label=name, capsize=2)
        ax.set_xlabel("weak model's alignment with theta_1")
        ax.set_ylabel("test risk on r*_1 (MSE / Var)")
        ax.set_title(f"inputs: {dist}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.1)
    axes[0][0].legend(fontsize=7)
    return fig


def plot_mech(result: dict, path: str | os.PathLike) -> None:
    """The figure of a mechanism sweep, written atomically."""
    kind = result["kind"]
    if not result["rows"]:
        fig = plt.figure()
    elif kind == "ablation":
        fig = _ablation(result)
    elif kind == "race":
        fig = _race(result)
    else:
        fig = _weak_quality(result)
    save_figure(fig, path)
