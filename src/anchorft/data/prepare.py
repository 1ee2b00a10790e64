"""`anchorft data openr1-math` and `anchorft data dapo-math` as one entry: the source checked, the folder claimed
for the settings, the dataset's preparation run in it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anchorft.data import dapo, openr1, release  # called as module.function: a test may stand in for one
from anchorft.errors import UsageError
from anchorft.preflight import check_hub_dataset, check_input_file, looks_like_path
from anchorft.runs import run_claimed

__all__ = ["LOCAL", "prepare_into"]

LOCAL = (".jsonl", ".json", ".parquet")  # --source names a local file


def prepare_into(
    out: str | os.PathLike, spec: dict[str, Any], overwrite: bool = False, progress: bool = True
) -> dict | None:
    """The dataset `spec["dataset"]` ("openr1-math" with `sampler` "release" or "verified", or "dapo-math") from
    `spec["source"]` (a hub name or a local file or folder; a JSONL file or a hub name is checked before the folder
    is claimed), written into `out`, which is claimed for `spec` (the same settings finished: reused, None). A hub
    that fails while it is read is the user's input: a one-line error naming --source."""
    source = spec["source"]
    if source.lower().endswith(".jsonl"):
        check_input_file(source, "--source")
    elif not (Path(source).exists() or looks_like_path(source) or source.endswith(LOCAL)):
        check_hub_dataset(source, "--source")  # a hub name: before the folder is claimed

    def prepare(claim) -> dict:
        try:
            if spec["dataset"] == "dapo-math":
                keys = ("source", "split", "limit", "prompt_style", "dedupe")
                return dapo.prepare_dapo_math(out, **{k: spec[k] for k in keys})
            if spec["sampler"] == "release":
                keys = ("source", "limit", "fmt", "split")
                return release.prepare_release_set(out, **{k: spec[k] for k in keys})
            keys = ("source", "size", "seed", "limit", "fmt", "subset", "split")
            return openr1.prepare_openr1_math(out, progress=progress, **{k: spec[k] for k in keys})
        except ConnectionError as err:  # the hub, or its cached copy, failed while reading
            raise UsageError(f"--source: {source}: {err}; pass --source PATH (a local copy)") from err

    # a source refused before anything was written leaves no folder behind (the run marked failed)
    return run_claimed(out, f"data {spec['dataset']}", spec, prepare, overwrite=overwrite)
