"""The RPSFT paper's recipes (Jin et al., arXiv:2605.10973): config composition.

A recipe is a YAML file for `anchorft train --config` that may name parent files with `preset:` (merged by
`anchorft.dataclass_yaml.resolve_presets`, the rule every config follows; the layout of `configs/rpsft/`:
docs/recipes.md, section 2). Keys starting with `_` are recipe metadata, kept from the trainer: `_model_config_`
(the real model's config.json, relative to the file that sets it; used by the dry run and the estimate).
`parse_with_config(parser, argv, load)` is the one TrlParser entry of `anchorft train` and `anchorft rl`: the
`--config` file's mapping becomes the parser's defaults, so flags win, without a flattened copy on disk;
`write_flat_config(leaf, out)` writes the flat file that plain TRL scripts can read.

Stand-in models and the dry run of a recipe are in `anchorft.rpsft.stand_in`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from anchorft.dataclass_yaml import resolve_presets
from anchorft.errors import check_mapping_types, did_you_mean
from anchorft.io import write_text
from anchorft.resources import config_path

__all__ = ["META_KEYS", "load_recipe", "read_recipe", "check_recipe_keys", "known_fields", "write_flat_config"]
__all__ += ["trainer_mapping", "parse_with_config", "NOT_HASHED", "as_trl_reads"]

META_KEYS = ("_model_config_",)


# TRL / transformers fields that name where output goes or how it is shown, not what is computed: left out of the
# hash of a run's marker (`anchorft rl`; `anchorft train` also leaves out resume_from_checkpoint)
NOT_HASHED = (
    "output_dir",
    "logging_dir",
    "run_name",
    "disable_tqdm",
    "report_to",
    "dataloader_num_workers",
    "hub_token",
)


def known_fields() -> dict[str, str]:
    """Every key `anchorft train --config` accepts (its ScriptArguments and RPSFTConfig), with its help text."""
    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch

    fields = {}
    for dc in (ScriptArguments, RPSFTConfig):
        fields.update({f.name: f.metadata.get("help", "") for f in dataclasses.fields(dc) if f.init})
    return fields


def _numeric_fields(dc: type) -> set[str]:
    """The fields of dataclass `dc` typed int, float or bool (or one of them | None)."""
    out = set()
    for name, tp in typing.get_type_hints(dc).items():
        args = [a for a in typing.get_args(tp) if a is not type(None)] if isinstance(tp, types.UnionType) or (
            typing.get_origin(tp) is typing.Union) else [tp]  # fmt: skip
        if len(args) == 1 and args[0] in (int, float, bool):
            out.add(name)
    return out


def _scalar_type(tp: Any) -> type | None:
    """int, float or bool when `tp` is one of them (or one of them | None), else None."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if isinstance(tp, types.UnionType) or (
        typing.get_origin(tp) is typing.Union) else [tp]  # fmt: skip
    return args[0] if len(args) == 1 and args[0] in (int, float, bool) else None


def as_trl_reads(mapping: dict[str, Any], *dcs: type) -> dict[str, Any]:
    """The string values of `mapping` for int, float and bool fields of the dataclasses `dcs`, converted as TrlParser
    reads a `--config` YAML: its values become argparse defaults, and argparse converts a string default with the
    option's type (`learning_rate: 1e-4`, a string to YAML 1.1, is the float 0.0001 there; a bool with
    HfArgumentParser's `string_to_bool`). A string the type refuses is left for the type check to name. In place;
    returns `mapping`."""
    from transformers.hf_argparser import string_to_bool  # lazy: loads transformers (the callers have)

    hints: dict[str, Any] = {}
    for dc in dcs:
        hints.update(typing.get_type_hints(dc))
    for key, value in mapping.items():
        tp = _scalar_type(hints.get(key))
        if tp is None or not isinstance(value, str):
            continue
        try:
            mapping[key] = string_to_bool(value) if tp is bool else tp(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            pass
    return mapping


def read_recipe(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], Path]:
    """(trainer arguments, metadata, the file that set each key, the recipe's file) of a recipe with its `preset:`
    parents merged in; the keys are not checked against the trainer's fields (`check_recipe_keys`)."""
    origin: dict[str, str] = {}
    path = config_path(path)  # a file, else a shipped recipe by name (rpsft/qwen2.5-7b-instruct/rpsft)
    merged = resolve_presets(path, what="recipe", origin=origin)
    if "_model_config_" in merged:
        merged["_model_config_"] = str(
            (Path(origin["_model_config_"]).parent / str(merged["_model_config_"])).resolve()
        )
    env = merged.pop("env", None)
    meta = {k: merged.pop(k) for k in list(merged) if k.startswith("_")}
    unknown_meta = sorted(set(meta) - set(META_KEYS))
    if unknown_meta:
        raise ValueError(f"unknown recipe key(s) {unknown_meta} in {origin[unknown_meta[0]]}; known: {META_KEYS}")
    if env is not None:
        meta["env"] = env
    return merged, meta, origin, path


def check_recipe_keys(merged: Mapping[str, Any], origin: Mapping[str, str], path: Path, fields: Sequence[str]) -> None:
    """Every key of the recipe is one of `fields`, else a ValueError naming the file that set it and close
    matches (the field names come from the imported configs, or from their source before TRL is imported)."""
    for key in merged:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=3, cutoff=0.6)
            hint = f"; did you mean {close}?" if close else ""
            if key == "warmup_ratio":
                hint = "; transformers 5 takes a ratio as a float warmup_steps (e.g. warmup_steps: 0.03)"
            raise ValueError(f"unknown field {key!r} in {origin.get(key, path)}{hint}")


def load_recipe(path: str | os.PathLike, validate: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainer arguments, metadata) of a recipe with its `preset:` parents merged in.

    With `validate`, unknown keys (with the file that set them and close matches) and an unknown method are a
    ValueError before anything is built."""
    merged, meta, origin, path = read_recipe(path)
    if validate:
        check_recipe_keys(merged, origin, path, list(known_fields()))
        from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch
        from anchorft.rpsft.methods import METHODS  # lazy: loads torch

        as_trl_reads(merged, ScriptArguments, RPSFTConfig)  # `learning_rate: 1e-4` is a float, as TrlParser reads it
        for dc in (ScriptArguments, RPSFTConfig):  # a wrong-typed number or flag named with the file that set it
            numeric = _numeric_fields(dc)  # (str fields may take a mapping that the config parses: anchor_map)
            for key, value in merged.items():
                if key in numeric:
                    check_mapping_types({key: value}, dc, origin.get(key, str(path)))
        method = merged.get("method", "rpsft")
        if method not in METHODS:
            raise ValueError(
                f"method must be one of {tuple(METHODS)}, got {method!r} (in {origin.get('method', path)})"
            )
    return merged, meta


def trainer_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """The recipe `path` as TrlParser's `--config` mapping: its trainer arguments and its `env`, no metadata."""
    args, meta = load_recipe(path)
    return {**args, **({"env": meta["env"]} if "env" in meta else {})}


def write_flat_config(path: str | os.PathLike, out: str | os.PathLike, command: str | None = None) -> Path:
    """Write the recipe `path` as one flat YAML that plain TrlParser reads (first line: the command)."""
    out = Path(out)
    head = f"# {command or 'anchorft train --config ' + str(out)}\n# resolved from {path}\n"
    write_text(out, head + yaml.safe_dump(trainer_mapping(path), sort_keys=True))
    return out


def parse_with_config(parser, argv: Sequence[str], load: Callable[[str], Mapping[str, Any]]) -> tuple:
    """`parser.parse_args_into_dataclasses(argv)` (a TrlParser) with `--config FILE` (or `--config=FILE`) read by
    `load(FILE)`: its mapping (and its `env`, exported as TrlParser does) becomes the parser's defaults, so the
    other flags win over the file."""
    argv = list(argv)
    for i, a in enumerate(argv):
        if a == "--config" or a.startswith("--config="):
            path = a.partition("=")[2] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            del argv[i : i + (1 if "=" in a else 2)]
            if not path:
                raise ValueError("--config needs a YAML file")
            cfg = dict(load(path))
            env = cfg.pop("env", None) or {}
            if not isinstance(env, Mapping):
                raise ValueError(f"{path}: `env` must be a mapping")
            os.environ.update({str(k): str(v) for k, v in env.items()})
            unknown = parser.set_defaults_with_config(**cfg)
            if unknown:
                raise ValueError(f"{path}: unknown key(s) {unknown[::2]}")
            break
    parser.allow_abbrev = False  # a misspelt flag is an error, never a prefix of another flag
    *dataclasses_, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if rest:
        raise ValueError(f"unrecognized arguments: {did_you_mean(parser, rest)}")
    return tuple(dataclasses_)
