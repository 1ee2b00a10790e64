"""Rank sensitivity: ID and OOD scores of a comparison against the anchor rank k.

Reads `results.json` of a comparison (`anchorft toy compare ... --sweep anchor_rank=...`):
{"base": {...}, "methods": {name: {"method", "settings", "id_avg@k", "id_pass@k", "id_greedy", "ood_mean", ...}}}.
Each run's place on the k axis comes from its method's row of the methods table (`anchorft.rpsft.methods`)
and its settings: an anchor below full rank sits at `settings["anchor_rank"]`, a full-rank anchor (L2) at
`full_rank` (k = min(m, n)), SFT at k = 0; the other methods (DFT, IW-SFT, ...) are kept as references.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["load_results", "method_rank", "rank_sensitivity", "METRICS"]

METRICS = ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean")


def read_comparison_results(path: str | os.PathLike) -> dict:
    """results.json of a comparison (`path` the file or its folder), its `base` and `methods` checked to be mappings;
    ValueError naming what is missing. The one reader of the file: the study that writes it
    (`anchorft.studies.testbed.results`) reads it back through here, so the library imports no study."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise ValueError(f"{p} not found (run `anchorft toy compare` first)")
    res = json.loads(p.read_text())
    for key in ("base", "methods"):
        if not isinstance(res.get(key), dict):
            raise ValueError(f"{p}: field {key!r} is missing or not a mapping")
    return res


def load_results(compare_dir: str | os.PathLike) -> dict:
    """`read_comparison_results` of a comparison directory, with at least one method."""
    res = read_comparison_results(compare_dir)
    if not res["methods"]:
        raise ValueError(f"--compare: {compare_dir}: field 'methods' is empty")
    return res


def method_rank(name: str, entry: dict, full_rank: int | None) -> int | None:
    """The anchor rank k of a run (None: not on the k axis); ValueError when its method or rank is missing."""
    from anchorft.rpsft.methods import METHODS  # lazy: loads torch

    kind = entry.get("method")
    if kind not in METHODS:
        raise ValueError(f"results.json: run {name!r} has no known 'method' (got {kind!r}; known: {list(METHODS)})")
    spec = METHODS[kind]
    if spec.full_rank:
        return full_rank
    if spec.uses_rank:
        r = (entry.get("settings") or {}).get("anchor_rank")
        if not isinstance(r, int) or isinstance(r, bool):
            raise ValueError(f"results.json: run {name!r} ({kind}) has no integer settings.anchor_rank")
        return min(r, full_rank) if full_rank is not None else r
    return 0 if kind == "sft" else None


def rank_sensitivity(results: dict, full_rank: int | None) -> dict:
    """{"points": [{method, k, metrics...}] sorted by k, "references": {method: metrics}, "base": metrics}."""
    points, refs = [], {}
    for name, entry in results["methods"].items():
        metrics = {m: entry.get(m) for m in METRICS if isinstance(entry.get(m), int | float)}
        k = method_rank(name, entry, full_rank)
        if k is None:
            refs[name] = metrics
        else:
            points.append({"method": name, "k": k, **metrics})
    points.sort(key=lambda p: (p["k"], p["method"]))
    base = {
        m: results.get("base", {}).get(m) for m in METRICS if isinstance(results.get("base", {}).get(m), int | float)
    }
    return {"full_rank": full_rank, "points": points, "references": refs, "base": base}
