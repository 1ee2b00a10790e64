"""The RPSFT paper's recipes (Jin et al., arXiv:2605.10973): config composition.

A recipe is a YAML file for `anchorft train --config` (TrlParser) that may name
parent files with `_base_: [a.yaml, b.yaml]` (paths relative to the file). Parents are merged in order,
then the file itself (a later value wins; mappings merge key by key). `configs/rpsft/` holds one
`_base/base.yaml` (the paper's settings), `_base/models/<model>.yaml` (model, epochs, real config.json),
`_base/methods/<method>.yaml` (method overrides) and 15 leaves `<model>/<method>.yaml` of three lines.
Keys starting with `_` are recipe metadata, removed before TrlParser sees the file:
`_base_` and `_model_config_` (the real model's config.json, used by the dry run and the estimate).
`resolve_config_argv` turns `--config leaf.yaml` into `--config <flat temp file>` for the train command;
`write_flat_config(leaf, out)` writes the flat file that plain TRL scripts can read.

Stand-in models and the dry run of a recipe are in `anchorft.rpsft.stand_in`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from anchorft.errors import read_yaml
from anchorft.io import write_text

__all__ = ["META_KEYS", "load_recipe", "known_fields", "write_flat_config", "resolve_config_argv"]

META_KEYS = ("_base_", "_model_config_")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _load_tree(path: Path, chain: tuple[Path, ...], origin: dict[str, str]) -> dict:
    path = path.resolve()
    if path in chain:
        raise ValueError(f"_base_: cycle in config inheritance: {' -> '.join(map(str, chain + (path,)))}")
    if not path.is_file():
        where = f" (named in _base_ of {chain[-1]})" if chain else ""
        raise ValueError(f"config file not found: {path}{where}")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping")
    bases = data.pop("_base_", [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ValueError(f"{path}: _base_ must be a path or a list of paths, got {bases!r}")
    if "_model_config_" in data:
        data["_model_config_"] = str((path.parent / str(data["_model_config_"])).resolve())
    merged: dict = {}
    for b in bases:
        merged = _merge(merged, _load_tree(path.parent / b, chain + (path,), origin))
    for k in data:
        origin[k] = str(path)
    return _merge(merged, data)


def known_fields() -> dict[str, str]:
    """Every key `anchorft train --config` accepts (its ScriptArguments and RPSFTConfig), with its help text."""
    fields = {}
    for dc in _train_dataclasses():
        fields.update({f.name: f.metadata.get("help", "") for f in dataclasses.fields(dc) if f.init})
    return fields


def _train_dataclasses() -> tuple[type, type]:
    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments

    return ScriptArguments, RPSFTConfig


def load_recipe(path: str | os.PathLike, validate: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainer arguments, metadata) of a recipe with its `_base_` parents merged in.

    With `validate`, unknown keys (with the file that set them and close matches) and an unknown method are a
    ValueError before anything is built."""
    origin: dict[str, str] = {}
    merged = _load_tree(Path(path), (), origin)
    env = merged.pop("env", None)
    meta = {k: merged.pop(k) for k in list(merged) if k.startswith("_")}
    unknown_meta = sorted(set(meta) - set(META_KEYS))
    if unknown_meta:
        raise ValueError(f"unknown recipe key(s) {unknown_meta} in {origin[unknown_meta[0]]}; known: {META_KEYS}")
    if env is not None:
        meta["env"] = env
    if validate:
        fields = known_fields()
        for key in merged:
            if key not in fields:
                close = difflib.get_close_matches(key, list(fields), n=3, cutoff=0.6)
                hint = f"; did you mean {close}?" if close else ""
                if key == "warmup_ratio":
                    hint = "; transformers 5 takes a ratio as a float warmup_steps (e.g. warmup_steps: 0.03)"
                raise ValueError(f"unknown field {key!r} in {origin.get(key, path)}{hint}")
        from anchorft.rpsft.methods import METHODS

        method = merged.get("method", "rpsft")
        if method not in METHODS:
            raise ValueError(
                f"method must be one of {tuple(METHODS)}, got {method!r} (in {origin.get('method', path)})"
            )
    return merged, meta


def write_flat_config(path: str | os.PathLike, out: str | os.PathLike, command: str | None = None) -> Path:
    """Write the recipe `path` as one flat YAML that plain TrlParser reads (first line: the command)."""
    args, meta = load_recipe(path)
    if "env" in meta:
        args["env"] = meta["env"]
    out = Path(out)
    head = f"# {command or 'anchorft train --config ' + str(out)}\n# resolved from {path}\n"
    write_text(out, head + yaml.safe_dump(args, sort_keys=True))
    return out


def resolve_config_argv(argv: Sequence[str], tmp_dir: str | os.PathLike | None = None) -> list[str]:
    """`--config leaf.yaml` -> `--config <flat file>` when the recipe uses `_base_` or metadata keys.

    For `anchorft train`: call on argv before TrlParser. Other argv are returned unchanged."""
    argv = list(argv)
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ValueError("--config needs a path")
    path = argv[i + 1]
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict) or not any(str(k).startswith("_") for k in raw):
        if isinstance(raw, dict):
            load_recipe(path)  # unknown keys: the message a `_base_` recipe gets, before TrlParser's own
        return argv
    fd, flat = tempfile.mkstemp(prefix="anchorft-recipe-", suffix=".yaml", dir=tmp_dir)
    os.close(fd)
    write_flat_config(path, flat, command=f"anchorft train --config {path}")
    argv[i + 1] = flat
    return argv
