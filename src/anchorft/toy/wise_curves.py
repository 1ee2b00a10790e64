"""The WiSE-FT curves on the testbed's trade-off plot (`anchorft.toy.report.write_tradeoff_plot` calls it).

Its own module so that the report, which draws the curves, and `anchorft.toy.interpolate`, which writes the report,
do not import each other."""

from __future__ import annotations

__all__ = ["draw_interpolation_curves"]


def draw_interpolation_curves(ax, results: dict) -> None:
    """On a trade-off axis (OOD retention, ID gain in points): for each run with WiSE-FT rows (`settings.wise_from`),
    a dotted line through the base (1, 0), its interpolations by increasing alpha and the run itself when present,
    in the source method's colour. Additive: draws nothing when `results` has no interpolated runs."""
    from anchorft.rpsft.methods import METHODS
    from anchorft.toy.report import _point

    base = results["base"]
    curves: dict[str, list[tuple[float, str]]] = {}
    for name, m in results["methods"].items():
        src = m.get("settings", {}).get("wise_from")
        if src is not None:
            curves.setdefault(src, []).append((float(m["settings"]["wise_alpha"]), name))

    for src, rows in curves.items():
        names = [n for _, n in sorted(rows)] + ([src] if src in results["methods"] else [])
        pts = [(1.0, 0.0)] + [tuple(float(v.mean()) for v in _point(results["methods"][n], base)) for n in names]
        method = results["methods"][names[0]]["method"]
        colour = METHODS[method].colour if method in METHODS else "k"
        ax.plot(*zip(*pts), ":", color=colour, lw=1.2, alpha=0.8, label=f"WiSE-FT from {src}")
    if curves:
        ax.legend(fontsize=7, loc="lower left")
