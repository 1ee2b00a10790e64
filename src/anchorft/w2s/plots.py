"""Figures of the weak-to-strong simulator (matplotlib Agg, written atomically)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_alignment", "save_figure"]

TITLES = {"w2s": "W2S", "sft": "SFT", "sft_anchor": "SFT + RPSFT anchor"}
CURVES = (
    ("target_alignment", "target neurons, |cos(w, theta_1)|", "C0"),
    ("nontarget_alignment", "non-target neurons, |cos(w, theta_2)|", "C1"),
    ("nontarget_target_alignment", "non-target neurons, |cos(w, theta_1)|", "C2"),
)


def save_figure(fig: plt.Figure, path: str | os.PathLike) -> None:
    """Save a figure as PNG atomically (tmp file then os.replace) and close it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    os.replace(tmp, path)


def plot_alignment(metrics: dict, path: str | os.PathLike, title: str | None = None) -> None:
    """One panel per mode: alignments against samples (log x), mean over seeds with a min-max band over seeds."""
    modes = [m for m in ("w2s", "sft", "sft_anchor") if m in metrics]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.8), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes):
        m = metrics[mode]
        x = np.maximum(np.asarray(m["samples"], dtype=float), 1.0)
        for key, label, color in CURVES:
            per_seed = np.asarray(m[f"{key}_seeds"], dtype=float)  # (logs, S)
            ax.plot(x, per_seed.mean(1), color=color, label=label)
            ax.fill_between(x, per_seed.min(1), per_seed.max(1), color=color, alpha=0.2, lw=0)
        name = TITLES.get(mode, mode)
        if m.get("diverged_at") is not None:
            name += f" (diverged at step {m['diverged_at']})"
        ax.set_title(name)
        ax.set_xscale("log")
        ax.set_xlabel("samples")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("alignment")
    axes[0][0].legend(fontsize=8, loc="center left")
    if title:
        fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def _plot_scaling(result: dict, ax: plt.Axes) -> None:
    colors = {"w2s": "C0", "sft": "C3", "weak": "C2"}
    for series, fit in result["fits"].items():
        color = colors.get(series, "C4")
        xs = np.array([pt["x"] for pt in result["points"]], dtype=float)
        for x, pt in zip(xs, result["points"]):
            e = pt["series"][series]
            vals = [v for v in e["samples_per_seed"] if v is not None]
            if e["censored"]:
                ax.scatter([x], [e["budget_samples"]], marker="^", color=color, facecolors="none", s=50)
            else:
                ax.scatter([x], [e["median_samples"]], color=color, s=30)
            if vals:
                ax.plot([x, x], [min(vals), max(vals)], color=color, alpha=0.4)
        if fit["slope"] is not None:
            grid = np.geomspace(xs.min(), xs.max(), 50)
            ax.plot(
                grid,
                np.exp(fit["intercept"]) * grid ** fit["slope"],
                color=color,
                label=f"{series}: slope {fit['slope']:.2f} [{fit['ci'][0]:.2f}, {fit['ci'][1]:.2f}]",
            )
            th = result["theories"][series]["slope"]
            ok = [pt["series"][series]["median_samples"] for pt in result["points"]]
            x0 = [x for x, m in zip(xs, ok) if m is not None]
            y0 = [m for m in ok if m is not None]
            if x0:  # theory line through the geometric mean of the measured points
                lx, ly = np.mean(np.log(x0)), np.mean(np.log(y0))
                ax.plot(
                    grid,
                    np.exp(ly + th * (np.log(grid) - lx)),
                    color=color,
                    ls="--",
                    alpha=0.7,
                    label=f"{series}: theory slope {th:.2f}",
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("s" if result["kind"] == "s-scaling" else "d")
    ax.set_ylabel(f"samples to alignment {result['spec']['threshold']} (median; open triangles: censored)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")


def _plot_summary(result: dict, ax: plt.Axes) -> None:
    rows = result["summary"]
    for mode, ls in (("w2s", "-"), ("sft", "--")):
        r = sorted([x for x in rows if x["mode"] == mode], key=lambda x: x["x"])
        if not r:
            continue
        xs = [x["x"] for x in r]
        ax.plot(xs, [x["nontarget_final"] for x in r], "o" + ls, color="C1", label=f"{mode}: non-target, own theta")
        ax.plot(xs, [x["target_final"] for x in r], "s" + ls, color="C0", label=f"{mode}: target, theta_1")
        ax.plot(xs, [x["nontarget_init"] for x in r], ":", color="gray")
        ax.plot(
            xs,
            [x["nontarget_to_target_change"] for x in r],
            "^" + ls,
            color="C2",
            label=f"{mode}: non-target change of |cos(w, theta_1)|",
        )
    if result["kind"] == "chi":
        ax.set_xscale("log")
        ax.set_xlabel("chi_2 = N_1 pi_2 / (N_2 pi_1)")
    else:
        ax.set_xlabel("rho sqrt(s)")
    ax.set_ylabel("final alignment (dotted: initial non-target)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _plot_rpsft(result: dict, axes) -> None:
    k = 0
    for pt in result["points"]:
        for mode, e in pt["modes"].items():
            label = TITLES.get(mode, mode)
            if mode == "sft_anchor":
                label += f", weight {pt['params'].get('anchor_weight')}"
            color = f"C{k}"
            k += 1
            x = np.maximum(np.asarray(e["samples"], dtype=float), 1.0)
            axes[0].plot(x, e["target_alignment"], color=color, label=label)
            axes[1].plot(x, e["nontarget_alignment"], color=color, label=label)
            axes[2].plot(x, e["nontarget_target_alignment"], color=color, label=label)
    for ax, t in zip(
        axes, ("target |cos(w, theta_1)|", "non-target |cos(w, theta_2)|", "non-target |cos(w, theta_1)|")
    ):
        ax.set_xscale("log")
        ax.set_xlabel("samples")
        ax.set_title(t, fontsize=9)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)


def plot_sweep(result: dict, path: str | os.PathLike) -> None:
    """The figure of a sweep: log-log hitting samples with fit and theory (scaling kinds), final alignments
    against chi or rho sqrt(s), or the SFT / SFT + anchor / W2S curves (rpsft)."""
    kind = result["kind"]
    if kind == "rpsft":
        fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
        _plot_rpsft(result, axes)
    else:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        if kind in ("s-scaling", "d-scaling"):
            _plot_scaling(result, ax)
        else:
            _plot_summary(result, ax)
    fig.suptitle(f"sweep {kind}" + (" (quick)" if result.get("quick") else ""), fontsize=10)
    save_figure(fig, path)
