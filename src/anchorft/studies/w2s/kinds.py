"""What a W2S sweep kind is: one row (`SweepKind`) that carries everything the sweep engine and the figures would
otherwise have to ask its name about: how its points are laid out and checked, a point's config, its measurement,
its summary, its x-axis, its table and its figure.

The rows themselves live beside the code they use: the scaling and full-run kinds in
`anchorft.studies.w2s.sweeps`, the mechanism kinds in `anchorft.studies.w2s.mechanisms`; `sweeps.KINDS` is the
table of all of them, and adding a kind is adding a row there (docs/architecture.md, "How to add").

This module imports neither torch nor matplotlib, so that the rows can be built (and a sweep file loaded) without
loading either; a kind's figure is imported when it is drawn (`Figure`).
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SweepKind", "XAxis", "Figure", "is_count", "is_number", "base_overrides", "plain_overrides"]


def is_number(v: Any) -> bool:
    """A finite int or float (a bool is not one): what a numeric sweep key must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_count(v: Any) -> bool:
    """An integer >= 1 (a bool is not one): a size, a budget or a number of steps in a sweep file."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def base_overrides(spec: dict) -> dict:
    """The spec's overrides of its preset (`base` without its `preset`), a fresh dict a kind may extend."""
    base = dict(spec["base"])
    base.pop("preset", None)
    return base


def plain_overrides(spec: dict, point: dict) -> dict:
    """A point's overrides of the preset when the point is itself config keys (the scaling, full-run and
    weak-quality kinds): the spec's overrides, then the point's."""
    return {**base_overrides(spec), **point}


@dataclass(frozen=True)
class XAxis:
    """The swept axis of a kind whose points lie on one: `name` (a W2SConfig field for the scaling kinds, whose
    fit is against it), the figure's `label`, whether the figure draws it in `log` scale, and `of(config, point)`,
    a point's x (its record's "x")."""

    name: str
    label: str
    of: Callable[[Any, dict], float]
    log: bool = False


@dataclass(frozen=True)
class Figure:
    """A kind's figure: the function `name` of `anchorft.studies.w2s.<module>`, called as `fn(result, path,
    axis)`. It is looked up when drawn, so that loading a sweep does not import matplotlib (and so that a test
    can stand in for the module's function)."""

    module: str
    name: str

    def function(self) -> Callable[[dict, str | os.PathLike, XAxis | None], None]:
        """The drawing function (imports its module)."""
        return getattr(importlib.import_module(f"anchorft.studies.w2s.{self.module}"), self.name)

    def __call__(self, result: dict, path: str | os.PathLike, axis: XAxis | None = None) -> None:
        self.function()(result, path, axis)


@dataclass(frozen=True)
class SweepKind:
    """One kind of sweep, a row of `sweeps.KINDS`; the engine (`sweeps.run_sweep`) reads everything from it.

    - `prepare(spec, fixed)` lays out the spec's `points` and checks its keys, before any work (`fixed`: the keys
      set on the command line, which win over grid rows; None when the file is loaded); the engine then builds
      and validates every point's config;
    - `overrides(spec, point)`: the point's overrides of the preset;
    - `measure(spec, point, config, cache, shared)`: the point's record, cached in DIR/cache/ (`shared`: what the
      points of one run share, e.g. the long ceiling of weak-quality); the unit of work of the sweep's grid;
    - `summarise(spec, records, configs)`: the result's fields (a kind with a table: its `rows`);
    - `figure`: DIR/<kind>.png, drawn with the kind's `axis`;
    - `axis`: the swept axis (the kinds whose points lie on one; their records carry its "x");
    - `evaluate(spec, config, cache, progress)`: what `sweeps.evaluate_point` measures and caches for a point
      (the scaling and full-run kinds);
    - `controlled(spec)`: the config keys its points set (a command-line override of one is refused);
    - `table(spec, rows)`: DIR/table.md; a kind with a table writes DIR/results.json, one without DIR/sweep.json;
    - `bisect`: accepts `bisect:` (each seed's turn boundary bisected after the grid, `sweeps.bisect_turns`).
    """

    name: str
    prepare: Callable[[dict, set[str] | None], None]
    overrides: Callable[[dict, dict], dict]
    measure: Callable[[dict, dict, Any, Path | None, dict], dict]
    summarise: Callable[[dict, list[dict], list[Any]], dict]
    figure: Figure
    axis: XAxis | None = None
    evaluate: Callable[[dict, Any, Path | None, bool], dict] | None = None
    controlled: Callable[[dict], set[str]] = lambda spec: set()
    table: Callable[[dict, list[dict]], str] | None = None
    bisect: bool = False

    @property
    def results_file(self) -> str:
        """The result's file in the sweep's folder: results.json beside table.md, or sweep.json."""
        return "results.json" if self.table is not None else "sweep.json"
