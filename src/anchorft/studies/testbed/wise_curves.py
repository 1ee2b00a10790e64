"""The WiSE-FT curves on the testbed's trade-off plot (`anchorft.studies.testbed.report.write_tradeoff_plot` calls it).

Its own module so that the report, which draws the curves, and `anchorft.studies.testbed.interpolate`, which writes
the report, do not import each other."""

from __future__ import annotations

import numpy as np

__all__ = ["draw_interpolation_curves"]


def draw_interpolation_curves(ax, results: dict) -> None:
    """On a trade-off axis (OOD retention, ID gain in points): for each run with WiSE-FT rows (`settings.wise_from`),
    a dotted line through the base (1, 0), its interpolations by increasing alpha and the run itself when present,
    in the source method's colour. Additive: draws nothing when `results` has no interpolated runs."""
    from anchorft.rpsft.methods import METHODS  # lazy: loads torch

    base = results["base"]
    curves: dict[str, list[tuple[float, str]]] = {}
    for name, m in results["methods"].items():
        src = m.get("settings", {}).get("wise_from")
        if src is not None:
            curves.setdefault(src, []).append((float(m["settings"]["wise_alpha"]), name))

    def point(m):
        keep = np.mean([s["ood_mean"] / max(base["ood_mean"], 1e-9) for s in m["per_seed"]])
        gain = np.mean([100 * (s["id_greedy"] - base["id_greedy"]) for s in m["per_seed"]])
        return float(keep), float(gain)

    for src, rows in curves.items():
        names = [n for _, n in sorted(rows)] + ([src] if src in results["methods"] else [])
        pts = [(1.0, 0.0)] + [point(results["methods"][n]) for n in names]
        method = results["methods"][names[0]]["method"]
        colour = METHODS[method].colour if method in METHODS else "k"
        ax.plot(*zip(*pts), ":", color=colour, lw=1.2, alpha=0.8, label=f"WiSE-FT from {src}")
    if curves:
        ax.legend(fontsize=7, loc="lower left")
