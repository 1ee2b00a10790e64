"""The verdict's forest plot draws what verdict.json holds: each run's pooled excess and interval (and the one
widened for shared items), each base's."""

from __future__ import annotations

import numpy as np

from anchorft.studies.testbed import verdict as v


def _made_up() -> dict:
    """Two runs on three bases, distinct numbers everywhere."""
    per_base = [
        {r: {"estimate": e, "low": e - 1.0 - j, "high": e + 2.0 + j} for r, e in (("a", 1.0 + j), ("g", -3.0 - j))}
        for j in range(3)
    ]
    pooled = {
        "a": {
            "mean": 2.0,
            "low": -0.5,
            "high": 4.5,
            "retention": 0.91,
            "gain": 7.0,
            "shared_items": {"low": -1.5, "high": 5.5},
        },  # fmt: skip
        "g": {"mean": -4.0, "low": -9.0, "high": 1.0, "retention": 0.5, "gain": 20.0},
    }
    return {"pooled": pooled, "per_base": per_base, "level": 0.95}


def test_forest_plot_draws_the_pooled_and_per_base_intervals(monkeypatch, tmp_path):
    saved = {}
    monkeypatch.setattr(v, "save_figure", lambda fig, path, **kw: saved.update(fig=fig, path=path))
    verdict = _made_up()
    v.write_forest_plot(verdict, tmp_path / "verdict.png")
    ax = saved["fig"].axes[0]
    bars = []  # (x of the marker, y, the bar's x span) of each errorbar drawn
    for c in ax.containers:
        (x,), (y,) = c.lines[0].get_data()
        (seg,) = c.lines[2][0].get_segments()
        bars.append((float(x), float(y), (float(seg[0][0]), float(seg[1][0]))))
    # the pooled rows: "a" on top (y 1), "g" below (y 0), each at its mean, its bar its interval
    for run, y in (("a", 1.0), ("g", 0.0)):
        p = verdict["pooled"][run]
        assert (p["mean"], y, (p["low"], p["high"])) in bars
        for b in verdict["per_base"]:  # every base's estimate and interval, near its run's row
            e = b[run]
            assert any(
                x == e["estimate"] and abs(yy - y) < 0.5 and span == (e["low"], e["high"]) for x, yy, span in bars
            )
    assert len(bars) == 2 * (1 + 3)
    # the interval widened for items every base shares, where the verdict has one: a thin line on its row
    widened = [ln for ln in ax.lines if list(ln.get_xdata()) == [-1.5, 5.5] and list(ln.get_ydata()) == [1.0, 1.0]]
    assert len(widened) == 1
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["g (0.50)", "a (0.91)"]
    assert any(np.allclose(line.get_xdata(), 0.0) and line.get_linestyle() == "--" for line in ax.lines)  # the front


def test_forest_plot_is_a_png_on_disk(tmp_path):
    v.write_forest_plot(_made_up(), tmp_path / "verdict.png")
    assert (tmp_path / "verdict.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not any(p.name != "verdict.png" for p in tmp_path.iterdir())  # written atomically: no temp file left
