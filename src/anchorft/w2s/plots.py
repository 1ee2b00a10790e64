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
