"""Figures of the weak-to-strong simulator (matplotlib Agg, written atomically): an experiment's alignment curves,
and the figure of each scaling and full-run sweep kind (its `SweepKind.figure`, drawn against its x-axis)."""

from __future__ import annotations

import os

import numpy as np

from anchorft.io import pyplot
from anchorft.io import save_figure as _save_figure
from anchorft.studies.w2s.kinds import XAxis

plt = pyplot()  # the Agg backend, set in anchorft.io

__all__ = ["plot_alignment", "save_figure", "plot_scaling", "plot_runs", "plot_overlap", "plot_rpsft"]

TITLES = {
    "w2s": "W2S",
    "sft": "SFT",
    "sft_anchor": "SFT + RPSFT anchor",
    "ceiling": "ceiling (true labels, W2S inputs)",
}
PANEL_ORDER = ("w2s", "ceiling", "sft", "sft_anchor")  # every mode of config.MODES
CURVES = (
    ("target_alignment", "target neurons, |cos(w, theta_1)|", "C0"),
    ("nontarget_alignment", "non-target neurons, |cos(w, theta_2)|", "C1"),
    ("nontarget_target_alignment", "non-target neurons, |cos(w, theta_1)|", "C2"),
)


def save_figure(fig: plt.Figure, path: str | os.PathLike) -> None:
    """Save a figure as PNG atomically (tmp file then os.replace) and close it."""
    _save_figure(fig, path, dpi=120, bbox_inches="tight")


def plot_alignment(metrics: dict, path: str | os.PathLike, title: str | None = None) -> None:
    """One panel per mode that metrics holds (any non-empty subset of W2S, ceiling, SFT, SFT + anchor): alignments
    against samples (log x), mean over seeds with a min-max band over seeds; the mean-field prediction dashed where
    metrics has an `ode` entry for the mode."""
    modes = [m for m in PANEL_ORDER if m in metrics]
    if not modes:
        raise ValueError(f"plot_alignment: metrics holds none of the modes {list(PANEL_ORDER)}")
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.8), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes):
        m = metrics[mode]
        x = np.maximum(np.asarray(m["samples"], dtype=float), 1.0)
        for key, label, color in CURVES:
            per_seed = np.asarray(m[f"{key}_seeds"], dtype=float)  # (logs, S)
            ax.plot(x, per_seed.mean(1), color=color, label=label)
            ax.fill_between(x, per_seed.min(1), per_seed.max(1), color=color, alpha=0.2, lw=0)
            ode = metrics.get("ode", {}).get(mode, {})
            if key in ode:
                xo = np.maximum(np.asarray(ode["samples"], dtype=float), 1.0)
                ax.plot(
                    xo, ode[key], color=color, ls="--", lw=1.2, label="mean-field ODE" if key == CURVES[0][0] else None
                )
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


def _num(v: float | None) -> str:
    return "open" if v is None else f"{v:.2f}"


def _scaling_thresholds(result: dict) -> list[str]:
    spec = result["spec"]
    thr = spec.get("thresholds", spec.get("threshold"))
    return [str(float(t)) for t in (thr if isinstance(thr, list) else [thr])]


def _plot_scaling(result: dict, ax: plt.Axes, axis: XAxis, thr: str | None = None) -> None:
    """Hitting samples against the swept axis at threshold `thr` (default the first): per point the median over
    seeds at the best eta (open triangle at the budget: censored), the seeds' range, the fitted line with its
    interval and the theory's slope (dashed)."""
    colors = {"w2s": "C0", "sft": "C3", "weak": "C2"}
    thr = thr or _scaling_thresholds(result)[0]
    by_thr = result.get("fits_by_threshold")
    for series, fit in result["fits"].items():
        if by_thr is not None:
            fit = by_thr[series][thr]
        color = colors.get(series, "C4")
        xs = np.array([pt["x"] for pt in result["points"]], dtype=float)
        meds = []  # the median over seeds per point (None: censored)
        for x, pt in zip(xs, result["points"]):
            e = pt["series"][series]
            e = {**e, **e.get("best", {}).get(thr, {})}
            meds.append(e["median_samples"])
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
                label=f"{series}: slope {fit['slope']:.2f} [{_num(fit['ci'][0])}, {_num(fit['ci'][1])}]",
            )
            th = result["theories"][series]["slope"]
            x0 = [x for x, m in zip(xs, meds) if m is not None]
            y0 = [m for m in meds if m is not None]
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
    ax.set_xlabel(axis.label)
    ax.set_ylabel(f"samples to alignment {thr} (median; open triangles: censored)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")


def _plot_summary(result: dict, ax: plt.Axes, axis: XAxis) -> None:
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
    if axis.log:
        ax.set_xscale("log")
    ax.set_xlabel(axis.label)
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
            x = np.maximum(np.asarray(e["samples"], dtype=float), 1.0)
            for ax, (key, _, _) in zip(axes, CURVES):
                ax.plot(x, e[key], color=f"C{k}", label=label)
            k += 1
    for ax, t in zip(
        axes, ("target |cos(w, theta_1)|", "non-target |cos(w, theta_2)|", "non-target |cos(w, theta_1)|")
    ):
        ax.set_xscale("log")
        ax.set_xlabel("samples")
        ax.set_title(t, fontsize=9)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)


def _cell_edges(v: np.ndarray) -> np.ndarray:
    """Edges of cells centred on the sorted values v (midpoints; the end cells mirror their neighbour)."""
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _plot_phase(result: dict) -> plt.Figure:
    """Phase diagram of the overlap sweep: x = rho sqrt(s), y = s (one row of cells per s); per mode, the non-target
    group's change of |cos(w, theta_1)| (turning to the target) and its drop of |cos(w, theta_2)|; the boundary
    of `phase` (black), Theorem 2's threshold rho = s^{-1/2} (x = 1, dashed) and a fixed rho through the smallest
    s's boundary (dotted; where the boundary would sit if it did not collapse)."""
    rows, phase = result["summary"], result.get("phase", {})
    modes = [m for m in ("sft", "w2s") if any(r["mode"] == m for r in rows)]
    xs = np.array(sorted({round(r["x"], 6) for r in rows}))
    ss = np.array(sorted({r["s"] for r in rows}))
    panels = (
        ("nontarget_to_target_change", "turn", "non-target: final - initial |cos(w, theta_1)|", "RdBu_r"),
        ("nontarget_drop", "drop", "non-target: drop of |cos(w, theta_2)|", "Reds"),
    )
    fig, axes = plt.subplots(len(modes), 2, figsize=(12, 4.2 * len(modes)), squeeze=False, layout="constrained")
    xe, ye = _cell_edges(xs), np.arange(len(ss) + 1) - 0.5
    for i, mode in enumerate(modes):
        for j, (field, name, title, cmap) in enumerate(panels):
            ax = axes[i][j]
            z = np.full((len(ss), len(xs)), np.nan)
            for r in rows:
                if r["mode"] == mode:
                    z[np.searchsorted(ss, r["s"]), np.searchsorted(xs, round(r["x"], 6))] = r[field]
            if name == "turn":
                lim = max(float(np.nanmax(np.abs(z))), 1e-3)
                mesh = ax.pcolormesh(xe, ye, z, cmap=cmap, vmin=-lim, vmax=lim)
            else:
                mesh = ax.pcolormesh(xe, ye, z, cmap=cmap, vmin=min(0.0, float(np.nanmin(z))), vmax=1.0)
            for a in range(len(ss)):
                for b in range(len(xs)):
                    if np.isfinite(z[a, b]):
                        ax.text(xs[b], a - 0.28, f"{z[a, b]:.2f}", ha="center", va="center", fontsize=7)
            fig.colorbar(mesh, ax=ax)
            ax.axvline(1.0, color="k", ls="--", lw=1, label="rho = s^{-1/2} (Theorem 2)")
            per_s = phase.get("modes", {}).get(mode, {}).get("per_s", [])
            pts = [(np.searchsorted(ss, e["s"]), e[f"{name}_x"]) for e in per_s if e.get(f"{name}_x") is not None]
            if pts:
                level = phase["levels"][name]
                ax.plot([x for _, x in pts], [a for a, _ in pts], "ko-", ms=5, label=f"boundary ({name} = {level})")
                inner = [(a, x) for a, x in pts if x > 0]  # x = 0: the level is already reached at rho = 0
                if inner:
                    rho0 = inner[0][1] / np.sqrt(ss[inner[0][0]])
                    ax.plot(rho0 * np.sqrt(ss), np.arange(len(ss)), "k:", lw=1, label=f"fixed rho = {rho0:.3f}")
            ax.set_xlim(xe[0], xe[-1])
            ax.set_yticks(np.arange(len(ss)))
            ax.set_yticklabels([str(s) for s in ss])
            ax.set_xlabel("rho sqrt(s)")
            ax.set_ylabel("s")
            ax.set_title(f"{TITLES.get(mode, mode)}: {title}", fontsize=9)
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return fig


def _save_sweep(fig: plt.Figure, result: dict, path: str | os.PathLike) -> None:
    fig.suptitle(f"sweep {result['kind']}" + (" (quick)" if result.get("quick") else ""), fontsize=10)
    save_figure(fig, path)


def plot_scaling(result: dict, path: str | os.PathLike, axis: XAxis) -> None:
    """The figure of a scaling sweep: log-log hitting samples against `axis` with the fit and the theory, one
    panel per threshold."""
    thrs = _scaling_thresholds(result)
    fig, axes = plt.subplots(1, len(thrs), figsize=(6.5 * len(thrs), 4.5), squeeze=False)
    for ax, thr in zip(axes[0], thrs):
        _plot_scaling(result, ax, axis, thr)
    _save_sweep(fig, result, path)


def plot_runs(result: dict, path: str | os.PathLike, axis: XAxis) -> None:
    """The figure of a full-run sweep: final alignments and the non-target group's change against `axis`."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _plot_summary(result, ax, axis)
    _save_sweep(fig, result, path)


def plot_overlap(result: dict, path: str | os.PathLike, axis: XAxis) -> None:
    """The figure of an overlap sweep: a phase diagram over rho sqrt(s) and s when the grid has several s, else
    the full-run figure."""
    if len({r.get("s") for r in result["summary"]}) > 1:
        _save_sweep(_plot_phase(result), result, path)
    else:
        plot_runs(result, path, axis)


def plot_rpsft(result: dict, path: str | os.PathLike, axis: XAxis | None = None) -> None:
    """The figure of the rpsft sweep: the SFT / SFT + anchor / W2S curves, one panel per alignment."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    _plot_rpsft(result, axes)
    _save_sweep(fig, result, path)
