"""The front a verdict measures against: the concave upper hull of (OOD retention, ID gain) points.

A point on the chord between two fine-tunes is reachable: answer each query with one model or the other at a fixed
rate, and retention and gain are the same mixture of theirs. So what a set of front runs (and the base, (1, 0))
offers at retention x is the upper concave hull of their points, flat at its highest gain for any lower retention
(a run that keeps less than the highest-gain point and gains no more is dominated) and 0 right of its last point (a
run that keeps more than every front point gains in full). The hull is `rpsft.anchor_plan.hull_points` on cost =
-retention: the Pareto points by falling retention, then Andrew's monotone chain (Andrew 1979).

The first verdict joined the Pareto points by straight segments instead (`report.front_weights`); a Pareto point
below the chord of its neighbours then pulls the front down, which a hull does not allow.

Two forms, tested against each other and a brute force: `hull_weights` (a point's front as weights on the input
points, for the verdict's statistic) and `hull_at` (vectorised over bootstrap replicates, for the simulations).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["hull_vertices", "hull_weights", "hull_at"]


def hull_vertices(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of `points` ((retention, gain) pairs) on their concave upper hull, by rising retention: from the
    highest-gain point (the most retentive of equal gains) to the most retentive point."""
    from anchorft.rpsft.anchor_plan import hull_points  # here: its module loads torch, which a verdict never needs

    return hull_points([-x for x, _ in points], [y for _, y in points])[::-1]


def hull_weights(points: Sequence[tuple[float, float]], x: float) -> list[tuple[int, float]]:
    """(index into `points`, weight) pairs whose weighted sum of gains is the hull's gain at retention `x`: one
    point (weight 1) at or left of the hull's first vertex, two on a hull edge, none (gain 0) right of its last."""
    hull = hull_vertices(points)
    if x <= points[hull[0]][0]:
        return [(hull[0], 1.0)]
    for i0, i1 in zip(hull, hull[1:]):
        x0, x1 = points[i0][0], points[i1][0]
        if x0 <= x <= x1:
            t = (x - x0) / max(x1 - x0, 1e-12)
            return [(i0, 1.0 - t), (i1, t)]
    return []


def hull_at(xs: np.ndarray, ys: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The hull's gain at retention x[r] of the points (xs[r, i], ys[r, i]), for each row r (a replicate).

    By Caratheodory in one dimension a point of the hull (with free disposal towards lower retention) is a mixture
    of at most two input points, so its gain is the largest of: a point's gain with xs >= x, and the chord of two
    points with xs[i] < x < xs[j] at x; 0 where no point has xs >= x. O(n^2) a row, no loops over rows."""
    xs, ys = np.atleast_2d(np.asarray(xs, dtype=float)), np.atleast_2d(np.asarray(ys, dtype=float))
    x = np.asarray(x, dtype=float).reshape(-1, 1)
    single = np.where(xs >= x, ys, -np.inf).max(axis=1)
    xi, xj = xs[:, :, None], xs[:, None, :]
    yi, yj = ys[:, :, None], ys[:, None, :]
    inside = (xi < x[:, :, None]) & (x[:, :, None] < xj)
    t = np.divide(x[:, :, None] - xi, xj - xi, out=np.zeros_like(xi * xj), where=inside)
    chord = np.where(inside, yi + t * (yj - yi), -np.inf).max(axis=(1, 2))
    best = np.maximum(single, chord)
    return np.where(np.isfinite(best), best, 0.0)
