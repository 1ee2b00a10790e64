"""A comparison's folder layout, written once (`anchorft toy compare` writes it; interpolation, the RL stage and
`anchorft analyze --compare` read it):

    OUT/models/base             the base model, evaluated
    OUT/models/RUN              RUN's fine-tune at the comparison's first seed
    OUT/models/RUN-seedS        RUN's fine-tune at seed S (any other seed)
    OUT/runs/RUN-seedS          the trainer's own folder of RUN at seed S (config, metrics.json, training.png)
    OUT/runs/base               the base model's scored items
    OUT/base-seedB              with several pretrained bases (`CompareConfig.bases`): the whole comparison of
                                the base pretrained at seed B, laid out as above

A saved model's name is therefore RUN (first seed) or RUN-seedS; `parse_model_name` turns it back into (RUN, S).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "model_name",
    "model_dir",
    "run_dir",
    "base_folder",
    "base_folders",
    "parse_model_name",
    "first_seed_models",
]

_SEEDED = re.compile(r"(.+)-seed(\d+)")
_BASE = re.compile(r"base-seed(\d+)")


def model_name(run: str, seed: int, first_seed: int) -> str:
    """The folder name under OUT/models of `run` at `seed`: RUN for the first seed, else RUN-seedS."""
    return run if seed == first_seed else f"{run}-seed{seed}"


def model_dir(out: str | os.PathLike, run: str, seed: int, first_seed: int) -> Path:
    """Where a comparison in `out` keeps a fine-tune it evaluated (module docstring)."""
    return Path(out) / "models" / model_name(run, seed, first_seed)


def run_dir(out: str | os.PathLike, run: str, seed: int) -> Path:
    """The trainer's own folder of `run` at `seed` (every seed named, the first one too)."""
    return Path(out) / "runs" / f"{run}-seed{seed}"


def base_folder(out: str | os.PathLike, base_seed: int) -> Path:
    """The comparison of one base in a study over several (OUT/base-seedB)."""
    return Path(out) / f"base-seed{base_seed}"


def base_folders(out: str | os.PathLike) -> dict[int, Path]:
    """{B: OUT/base-seedB} of a study over several bases, in seed order; {} for a single comparison."""
    found = [(int(m.group(1)), d) for d in Path(out).iterdir() if d.is_dir() and (m := _BASE.fullmatch(d.name))]
    return dict(sorted(found))


def parse_model_name(name: str, first_seed: int, runs: set[str] | None = None) -> tuple[str, int]:
    """(run, seed) of a folder name under OUT/models: RUN-seedS is (RUN, S) unless RUN-seedS is itself a run of
    `runs` (then its first seed); any other name is (name, first_seed)."""
    if runs is not None and name in runs:
        return name, first_seed
    if m := _SEEDED.fullmatch(name):
        return m.group(1), int(m.group(2))
    return name, first_seed


def first_seed_models(out: str | os.PathLike) -> dict[str, Path]:
    """{run: folder} of the fine-tunes a comparison saved at its first seed (OUT/models/RUN; not base, not
    RUN-seedS), in name order."""
    models = Path(out) / "models"
    if not models.is_dir():
        return {}
    return {
        d.name: d
        for d in sorted(models.iterdir())
        if d.is_dir() and d.name != "base" and not _SEEDED.fullmatch(d.name)
    }
