"""PNG plots of an analysis (matplotlib, Agg backend). Each function writes one file and returns its path."""

from __future__ import annotations

import math
import os

import numpy as np

from anchorft.io import pyplot, save_figure

plt = pyplot()

__all__ = [
    "rotation_heatmap",
    "rotation_comparison",
    "singular_value_change",
    "drift_plot",
    "fisher_plot",
    "rank_plot",
]


def _save(fig, path: str | os.PathLike) -> str:
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    return str(path)


def rotation_heatmap(grid: dict, model: str, path: str | os.PathLike) -> str:
    """grid = {"rows": [...], "types": [...], "values": [[deg or None]]}: mean principal angle per cell."""
    vals = np.array([[np.nan if v is None else v for v in row] for row in grid["values"]], dtype=float)
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(grid["types"]), 1.2 + 0.32 * len(grid["rows"])))
    im = ax.imshow(np.ma.masked_invalid(vals), aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(grid["types"])), grid["types"], rotation=45, ha="right")
    ax.set_yticks(range(len(grid["rows"])), grid["rows"])
    ax.set_xlabel("matrix type")
    ax.set_ylabel("layer")
    ax.set_title(f"{model}: mean principal angle (deg), top-{grid['k']} U and V")
    if vals.size <= 400:
        for (i, j), v in np.ndenumerate(vals):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=ax, label="degrees")
    return _save(fig, path)


def rotation_comparison(by_type: dict[str, dict[str, dict]], path: str | os.PathLike) -> str:
    """by_type[model][type] = {"angle_u_mean_deg", "angle_v_mean_deg", ...}: grouped bars, one group per type."""
    models = list(by_type)
    types = list(by_type[models[0]])
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 0.9 * len(types) + 2), 6.5), sharey=True)
    width = 0.8 / max(len(models), 1)
    for ax, key, side in zip(axes, ("angle_u_mean_deg", "angle_v_mean_deg"), ("left (U)", "right (V)")):
        for i, mname in enumerate(models):
            ys = [by_type[mname][t][key] for t in types]
            ax.bar(np.arange(len(types)) + (i - (len(models) - 1) / 2) * width, ys, width, label=mname)
        ax.set_xticks(range(len(types)), types)
        ax.set_title(f"mean principal angle, {side} subspace")
        ax.set_ylabel("degrees")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def singular_value_change(curves: dict[str, dict[str, list[float]]], path: str | os.PathLike) -> str:
    """curves[model] = {"sv_rel_dev": [...], "vec_angle_deg": [...]} per singular index (mean over matrices)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for mname, c in curves.items():
        idx = np.arange(1, len(c["sv_rel_dev"]) + 1)
        axes[0].plot(idx, c["sv_rel_dev"], label=mname)
        axes[1].plot(idx, c["vec_angle_deg"], label=mname)
    axes[0].set_title("|sigma_i / sigma0_i - 1| (mean over matrices)")
    axes[1].set_title("angle between u_i and u0_i, deg (mean over matrices)")
    for ax in axes:
        ax.set_xlabel("singular index i")
        ax.set_yscale("symlog", linthresh=1e-4)
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def drift_plot(per_model: dict[str, dict[str, list[float]]], eval_set: str, path: str | os.PathLike) -> str:
    """per_model[model] = drift_metrics(...): rel_l2 and cos_dist per layer, one line per method."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for mname, d in per_model.items():
        layers = np.arange(len(d["rel_l2"]))
        for ax, key in zip(axes, ("rel_l2", "cos_dist", "prompt_cos_dist")):
            ax.plot(layers, d[key], marker=".", label=mname)
    for ax, t in zip(axes, ("||mu - mu0|| / ||mu0||", "1 - cos(mu, mu0)", "mean over prompts of 1 - cos(h, h0)")):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"hidden-state drift from base: {eval_set}")
    return _save(fig, path)


def fisher_plot(by_type: dict[str, dict], path: str | os.PathLike) -> str:
    """by_type[type] = {"share": {k: v}, "random_share": {k: v}, "expected_random": {k: v}}: share vs k."""
    types = list(by_type)
    cols = min(len(types), 5)
    rows = math.ceil(len(types) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.8 * rows), squeeze=False)
    for ax, t in zip(axes.flat, types):
        d = by_type[t]
        ks = [int(k) for k in d["share"]]
        ax.plot(ks, list(d["share"].values()), marker="o", label="top-k block of W0")
        ax.plot(ks, list(d["random_share"].values()), marker="x", label="random block (measured)")
        ax.plot(ks, list(d["expected_random"].values()), ls="--", label="k^2/(mn)")
        ax.set_title(t)
        ax.set_xlabel("k")
        top = max([*d["share"].values(), *d["random_share"].values(), *d["expected_random"].values()])
        ax.set_ylim(0, min(1.0, max(0.02, 1.15 * top)))
    for ax in list(axes.flat)[len(types) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("Fisher energy share")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def rank_plot(rs: dict, path: str | os.PathLike) -> str:
    """ID metrics and OOD mean against the anchor rank k (k = 0 SFT, k = full rank L2).

    Base: dotted lines in each metric's colour; methods without a rank (DFT, IW-SFT): grey lines for the
    first metric of each panel (id_avg@k, ood_mean)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    pts = rs["points"]
    styles = ["--", "-.", (0, (5, 1)), (0, (1, 1)), (0, (3, 1, 1, 1))]
    for ax, metrics in zip(axes, (("id_avg@k", "id_pass@k", "id_greedy"), ("ood_mean",))):
        for j, m in enumerate(metrics):
            xs = [p["k"] for p in pts if m in p]
            if not xs:
                continue
            # percent, as the comparison's report.md shows them
            line = ax.plot(xs, [100 * p[m] for p in pts if m in p], marker="o", label=m)[0]
            if m in rs["base"]:
                ax.axhline(100 * rs["base"][m], color=line.get_color(), ls=":", lw=1)
            if j == 0:
                for i, (ref, vals) in enumerate(rs["references"].items()):
                    if m in vals:
                        ax.axhline(
                            100 * vals[m], ls=styles[i % len(styles)], lw=0.9, color="gray", label=f"{ref} ({m})"
                        )
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("anchor rank k")
        ax.set_ylabel("accuracy (%)")
        ax.legend(fontsize=7)
    ks = sorted({p["k"] for p in pts})
    full = rs.get("full_rank")
    labels = [("0\n(SFT)" if k == 0 else f"{k}\n(L2)" if k == full else str(k)) for k in ks]
    for ax in axes:
        ax.set_xticks(ks, labels)
    axes[0].set_title("in-domain (dotted: base)")
    axes[1].set_title("out-of-domain (dotted: base)")
    fig.tight_layout()
    return _save(fig, path)
