"""The verdict's front, the concave upper hull of (retention, gain) points, against a brute force written here on
random point sets: every input point on or below every hull edge, hull vertices input points, and the hull's gain
at any retention the best mixture of at most two points (with free disposal towards lower retention)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from anchorft.studies.testbed.front import hull_at, hull_vertices, hull_weights


def _brute(points: list[tuple[float, float]], x: float) -> float:
    """The best gain at retention >= x of any point or any mixture of two points whose retention is exactly x."""
    best = max((y for px, y in points if px >= x), default=None)
    for (x0, y0), (x1, y1) in itertools.permutations(points, 2):
        if x0 < x < x1:
            g = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            best = g if best is None else max(best, g)
    return 0.0 if best is None else best


def _random_points(rng: np.random.Generator) -> list[tuple[float, float]]:
    n = int(rng.integers(1, 9))
    xs = rng.uniform(0.2, 1.05, n)
    if rng.random() < 0.3:  # nearly collinear points on a line to the base
        ys = 30 * (1 - xs) + rng.normal(0, 0.01, n)
    else:
        ys = rng.uniform(-5, 30, n)
    if rng.random() < 0.2:  # ties in retention or gain
        xs[: n // 2] = xs[0]
    return [(1.0, 0.0)] + [(float(a), float(b)) for a, b in zip(xs, ys)]


def test_hull_vertices_are_input_points_with_every_point_on_or_below_every_edge():
    rng = np.random.default_rng(7)
    for _ in range(400):
        pts = _random_points(rng)
        hull = hull_vertices(pts)
        assert len(set(hull)) == len(hull) and all(0 <= i < len(pts) for i in hull)
        hx = [pts[i][0] for i in hull]
        assert hx == sorted(hx) and len(set(hx)) == len(hx)
        assert pts[hull[0]][1] == max(y for _, y in pts)  # the first vertex has the highest gain
        for i0, i1 in zip(hull, hull[1:]):
            (x0, y0), (x1, y1) = pts[i0], pts[i1]
            assert y1 < y0  # gain falls as retention rises along the hull
            for px, py in pts:  # every point on or below the line through the edge
                assert py <= y0 + (y1 - y0) * (px - x0) / (x1 - x0) + 1e-9
        for x, y in pts:  # every point on the hull's front or below it
            assert y <= _brute(pts, x) + 1e-9


def test_hull_gain_at_any_retention_is_the_brute_force_best_mixture():
    rng = np.random.default_rng(11)
    rows = []
    for _ in range(300):
        pts = _random_points(rng)
        for x in (*rng.uniform(0.1, 1.1, 4), *(p[0] for p in pts)):  # vertices themselves included
            want = _brute(pts, float(x))
            got = sum(w * pts[i][1] for i, w in hull_weights(pts, float(x)))
            assert got == pytest.approx(want, abs=1e-9), (pts, x)
            assert sum(w for _, w in hull_weights(pts, float(x))) in (0, pytest.approx(1.0))
            rows.append((pts, float(x), want))
    for n in {len(p) for p, _, _ in rows}:  # the vectorised form, rows of equal size stacked
        same = [(p, x, w) for p, x, w in rows if len(p) == n]
        xs = np.array([[a for a, _ in p] for p, _, _ in same])
        ys = np.array([[b for _, b in p] for p, _, _ in same])
        got = hull_at(xs, ys, np.array([x for _, x, _ in same]))
        assert got == pytest.approx([w for _, _, w in same], abs=1e-9)


def test_a_pareto_point_under_the_chord_of_its_neighbours_leaves_the_front():
    """Base 17's shape: a point far below the chord from a higher-gain point to the base is not on the hull; the
    segment front (`report.front_weights`) goes through it."""
    from anchorft.studies.testbed.report import front_weights

    pts = [(1.0, 0.0), (0.910, 28.8), (0.944, 8.0)]
    assert hull_vertices(pts) == [1, 0]
    hull = sum(w * pts[i][1] for i, w in hull_weights(pts, 0.967))
    segments = sum(w * pts[i][1] for i, w in front_weights(pts, 0.967))
    assert hull == pytest.approx(28.8 * (1 - 0.967) / (1 - 0.910)) and segments < hull
