"""The comparison's results file, `results.json`: one typed home for writing, reading and merging it.

`CompareResults` holds the three parts every reader uses (the report, the RL stage, the analysis, the
`toy report` command): `base` (the base model's metrics, and its pretraining), `methods` (run name ->
mean and sample std (ddof 1) over seeds, the mean per OOD skill, `method`, `settings` and `per_seed`) and
`settings` (the evaluation settings, seeds and the pretrained model); and the `provenance` of the code that
made it (see anchorft.provenance: set when the object is built, kept when read back). `save_results`
writes it (atomically; the file's bytes are those of `json.dumps(..., indent=2)`), `load_results` reads
it back from a file or a comparison folder, `merge_results` pools several comparisons of the same base.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anchorft.analysis.rank import read_comparison_results
from anchorft.io import write_json
from anchorft.provenance import provenance

__all__ = [
    "RESULTS_FILE",
    "CompareResults",
    "load_results",
    "save_results",
    "merge_results",
    "mean_over_seeds",
    "sample_std",
]

RESULTS_FILE = "results.json"


@dataclass
class CompareResults:
    """results.json of a comparison (see the module docstring for the fields)."""

    base: dict[str, Any]
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] | None = field(default_factory=provenance)  # None: read from a file without one

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "methods": self.methods, "settings": self.settings, "provenance": self.provenance}

    def record(self, name: str, method: str, settings: dict[str, Any], per_seed: list[dict]) -> None:
        """Set run `name`'s entry from its per-seed metrics (in seed order)."""
        entry = {**mean_over_seeds(per_seed), "method": method, "settings": settings, "per_seed": per_seed}
        self.methods[name] = entry


def save_results(results: CompareResults | dict, path: str | os.PathLike) -> None:
    """Write `results` to `path` (a results.json file) atomically."""
    data = results.to_dict() if isinstance(results, CompareResults) else results
    write_json(path, data, indent=2)


def load_results(path: str | os.PathLike) -> CompareResults:
    """The results of a comparison: `path` is its results.json or its folder. ValueError naming what is missing."""
    data = read_comparison_results(path)
    return CompareResults(data["base"], data["methods"], data.get("settings") or {}, data.get("provenance"))


def sample_std(values) -> float:
    """Sample standard deviation (ddof = 1) of `values`; 0.0 for a single value (no spread measured)."""
    values = np.asarray(values, dtype=float)
    return float(np.std(values, ddof=1)) if values.size > 1 else 0.0


def mean_over_seeds(per_seed: list[dict]) -> dict:
    """Mean and sample std (ddof = 1) over seeds of the metrics a comparison reports, and the mean per OOD skill."""
    keys = ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean", "train_seconds")
    out = {k: float(np.mean([m[k] for m in per_seed])) for k in keys if k in per_seed[0]}
    out["std"] = {k: sample_std([m[k] for m in per_seed]) for k in keys if k in per_seed[0]}
    out["ood"] = {s: float(np.mean([m["ood"][s] for m in per_seed])) for s in per_seed[0]["ood"]}
    if all("val" in m for m in per_seed):  # the validation split's greedy metrics, when the comparison has one
        out["val"] = {k: float(np.mean([m["val"][k] for m in per_seed])) for k in ("id_greedy", "ood_mean")}
    return out


def merge_results(parts: list[CompareResults | dict]) -> CompareResults:
    """One results dict from several comparisons of the same base and evaluation (e.g. a preset and a sweep).

    The bases must agree (same pretrained model, same evaluation settings and base scores): otherwise their
    methods are not comparable and this raises ValueError. Methods keep the order of `parts`. A name present
    in several parts is one run measured at more seeds (e.g. a sweep rerun at new seeds): its per-seed values
    are pooled and the means recomputed, provided its method and settings agree and no seed repeats;
    otherwise ValueError (rename the runs)."""
    if not parts:
        raise ValueError("parts: need at least one results dict")
    parts = [p.to_dict() if isinstance(p, CompareResults) else p for p in parts]
    first = parts[0]
    merged = {"base": first["base"], "methods": {}, "settings": first["settings"]}
    for i, r in enumerate(parts):
        for key in (
            "pretrained",
            "id_skill",
            "id_items",
            "ood_items",
            "val_items",
            "k",
            "n_samples",
            "temperature",
            "top_p",
        ):
            a, b = r["settings"].get(key), first["settings"].get(key)
            if key == "pretrained" and a and b:  # the cache key (a hash of the pretraining config), wherever cached
                a, b = Path(a).name, Path(b).name
            if a != b:
                raise ValueError(f"results {i}: settings[{key!r}] differs from the first ({r['settings'].get(key)!r})")
        if r["base"]["ood"] != first["base"]["ood"] or r["base"]["id_greedy"] != first["base"]["id_greedy"]:
            raise ValueError(f"results {i}: its base scores differ from the first: not the same base or evaluation")
        for name, m in r["methods"].items():
            if name not in merged["methods"]:
                merged["methods"][name] = m
                continue
            old = merged["methods"][name]
            if (old.get("method"), old.get("settings")) != (m.get("method"), m.get("settings")):
                raise ValueError(f"results {i}: run {name!r} appears twice with different methods or settings")
            seeds_old = {s["seed"] for s in old["per_seed"]}
            if seeds_old & {s["seed"] for s in m["per_seed"]}:
                raise ValueError(f"results {i}: run {name!r} appears twice with the same seed")
            per_seed = sorted(old["per_seed"] + m["per_seed"], key=lambda s: s["seed"])
            merged["methods"][name] = {**old, **mean_over_seeds(per_seed), "per_seed": per_seed}
    seeds = sorted({s for r in parts for s in r["settings"].get("seeds", [])})
    merged["settings"] = {**first["settings"], "seeds": seeds}
    prov = {**provenance(), "parts": [p.get("provenance") for p in parts]}  # the merge's code, then each part's
    return CompareResults(merged["base"], merged["methods"], merged["settings"], prov)
