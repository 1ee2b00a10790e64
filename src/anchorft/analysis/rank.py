"""Rank sensitivity: ID and OOD scores of a comparison against the anchor rank k.

Reads `results.json` of a comparison (`anchorft toy compare ... --sweep anchor_rank=...`):
{"base": {...}, "methods": {name: {"id_avg@k", "id_pass@k", "id_greedy", "ood_mean", "ood": {...}, ...}}}.
The rank of each method comes from, in order: its resolved config (an `anchor_rank` key in the method's
entry, in `entry["settings"]` (what `anchorft toy compare` writes), `entry["config"]` /
`entry["resolved_config"]`, or in a config file beside its model,
DIR/models/NAME/ or DIR/NAME/: resolved_config.json|yaml, config.yaml, train_config.json), then its name
(`rpsft_k32`, `rpsft-k32`, `..._anchor_rank=32`). The kind (entry["method"], else the name) decides first:
SFT is k = 0 and L2 anchoring is the full
rank k = min(m, n) (placed at `full_rank`). Methods with no rank (DFT, IW-SFT, ...) are kept as references.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

__all__ = ["load_results", "method_rank", "rank_sensitivity", "METRICS"]

METRICS = ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean")
_CONFIG_FILES = ("resolved_config.json", "resolved_config.yaml", "config.yaml", "train_config.json", "run_config.json")


def load_results(compare_dir: str | os.PathLike) -> dict:
    """results.json of a comparison directory; ValueError naming what is missing."""
    p = Path(compare_dir) / "results.json"
    if not p.is_file():
        raise ValueError(f"--compare: {p} not found")
    res = json.loads(p.read_text())
    if not isinstance(res.get("methods"), dict) or not res["methods"]:
        raise ValueError(f"{p}: field 'methods' is missing or empty")
    return res


def _find_rank(obj, depth: int = 0) -> int | None:
    if depth > 4:
        return None
    if isinstance(obj, dict):
        for key in ("anchor_rank", "rank_k", "rpsft_rank"):
            if isinstance(obj.get(key), int | float) and not isinstance(obj.get(key), bool):
                return int(obj[key])
        for key in ("settings", "config", "resolved_config", "rpsft", "anchor", "method_config", "train"):
            if key in obj:
                r = _find_rank(obj[key], depth + 1)
                if r is not None:
                    return r
    return None


def _method_kind(name: str, entry: dict) -> str:
    kind = str(entry.get("method") or entry.get("kind") or (entry.get("config") or {}).get("method") or name).lower()
    return kind


def method_rank(name: str, entry: dict, compare_dir: str | os.PathLike | None, full_rank: int | None) -> int | None:
    """The anchor rank k of a method (None: not on the k axis). See the module docstring for the order."""
    kind = _method_kind(name, entry)
    base_kind = re.split(r"[_\-=]", kind)[0]
    if base_kind in ("sft", "nll"):
        return 0
    if base_kind in ("l2", "l2sp", "l2_anchor"):
        return full_rank
    r = _find_rank(entry)
    if r is None and compare_dir is not None:
        for sub in (Path(compare_dir) / "models" / name, Path(compare_dir) / name, Path(compare_dir) / "runs" / name):
            for fname in _CONFIG_FILES:
                f = sub / fname
                if f.is_file():
                    text = f.read_text()
                    cfg = json.loads(text) if f.suffix == ".json" else yaml.safe_load(text)
                    r = _find_rank(cfg)
                    if r is not None:
                        break
            if r is not None:
                break
    if r is None:
        m = re.search(r"(?:_k|-k|anchor_rank=?|rank=?)(\d+)", name)
        r = int(m.group(1)) if m else None
    if r is not None and full_rank is not None:
        r = min(r, full_rank)
    return r


def rank_sensitivity(results: dict, compare_dir: str | os.PathLike | None, full_rank: int | None) -> dict:
    """{"points": [{method, k, metrics...}] sorted by k, "references": {method: metrics}, "base": metrics}."""
    points, refs = [], {}
    for name, entry in results["methods"].items():
        metrics = {m: entry.get(m) for m in METRICS if isinstance(entry.get(m), int | float)}
        k = method_rank(name, entry, compare_dir, full_rank)
        if k is None:
            refs[name] = metrics
        else:
            points.append({"method": name, "k": k, **metrics})
    points.sort(key=lambda p: (p["k"], p["method"]))
    base = {
        m: results.get("base", {}).get(m) for m in METRICS if isinstance(results.get("base", {}).get(m), int | float)
    }
    return {"full_rank": full_rank, "points": points, "references": refs, "base": base}
