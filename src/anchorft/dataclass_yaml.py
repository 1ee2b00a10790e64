"""Configs as dataclasses: the one small YAML -> dataclass module of the simulator and the testbed.

`update(obj, values, what)` returns a copy of the dataclass `obj` with `values` (a mapping, e.g. a YAML
file's, or `key=value` strings) applied, and `from_mapping(cls, values, what)` builds one. Each value is
coerced to its field's type (int, float, bool, str, `X | None`, `list[X]`, `dict[str, X]`, nested
dataclasses, which merge key by key), and an unknown key is a ValueError that names it, what it belongs
to and the closest known keys: "unknown w2s config key 'step', did you mean 'steps'? (known keys: ...)".
`read_yaml_mapping(path, what)` reads a YAML file that must hold a mapping; `check_choices(obj)` checks the
fields that name their "choices". `resolve_presets` is the inheritance rule of every config (the TRL trainers'
too, then read by TrlParser): `preset:` names parents, merged first.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from anchorft.errors import close_hint, read_yaml

__all__ = ["coerce", "from_mapping", "parse_overrides", "read_yaml_mapping", "unknown_key_error", "update"]
__all__ += ["PRESET_KEY", "check_choices", "merge_mappings", "resolve_presets"]

PRESET_KEY = "preset"
YAML = (".yaml", ".yml")


def check_choices(obj: Any, skip: type | None = None) -> None:
    """ValueError for the first field of the dataclass `obj` whose value is not one of its metadata's "choices"
    (the list the command-line parsers offer, HfArgumentParser's and `add_field_flags`' alike). The fields of
    `skip` (a base class that checks its own, e.g. a TRL config) are left out."""
    inherited = {f.name for f in dataclasses.fields(skip)} if skip is not None else set()
    for f in dataclasses.fields(obj):
        choices = f.metadata.get("choices")
        if choices is not None and f.name not in inherited and getattr(obj, f.name) not in choices:
            raise ValueError(f"{f.name} must be one of {list(choices)}, got {getattr(obj, f.name)!r}")


def unknown_key_error(key: str, known: list[str], what: str) -> ValueError:
    """ValueError for an unknown key, with the closest known keys (difflib) and the full list."""
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f", did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"unknown {what} key {key!r}{hint} (known keys: {', '.join(sorted(known))})")


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The one parser of overrides on a command line: `key=value` tokens (`anchorft w2s run ... eta=0.1`) and
    `--key value` / `--key=value` flags (`anchorft train --dry-run ... --max_steps 3`), in order, a later one
    winning: `["a=1", "--b", "x,y"]` -> {"a": "1", "b": "x,y"}. The values stay text, read later by the field's type
    (`coerce`) or as YAML; a token of neither form is a ValueError."""
    out, items, i = {}, list(items), 0
    while i < len(items):
        item = items[i]
        if item.startswith("--"):
            key, eq, value = item[2:].partition("=")
            if not eq:
                if i + 1 == len(items) or items[i + 1].startswith("--"):
                    raise ValueError(f"override {item}: needs a value (--key value)")
                i, value = i + 1, items[i + 1]
        elif "=" in item:
            key, value = item.split("=", 1)
        else:
            raise ValueError(f"override {item!r} must look like key=value or --key value")
        out[key.strip()] = value
        i += 1
    return out


def read_yaml_mapping(path: str | os.PathLike, what: str = "config") -> dict[str, Any]:
    """The mapping in the YAML file `path`; a ValueError naming the file otherwise. An empty file (nothing but
    comments) is an error too, most likely a file not written yet; a file that means the defaults says `{}`."""
    data = read_yaml(path, what)  # a malformed file: an error naming the file and line
    if data is None:
        raise ValueError(f"{what} {str(path)!r} is empty (write `{{}}` in it for the defaults)")
    if not isinstance(data, dict):
        raise ValueError(f"{what} {str(path)!r} must be a YAML mapping")
    return data


def merge_mappings(base: Mapping, over: Mapping) -> dict:
    """`base` with `over`'s keys on top (nested mappings merged key by key; values copied)."""
    out = dict(base)
    for k, v in over.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = merge_mappings(out[k], v) if both else copy.deepcopy(v)
    return out


def resolve_presets(
    spec: Mapping | str | os.PathLike, preset_dir: Path | None = None, what: str = "config", origin: dict | None = None
) -> dict[str, Any]:
    """The mapping `spec` (or the file a preset name or path names) with its `preset:` parents merged in, recursively:
    each parent in order, then the file's own keys. A parent is a path (relative to the naming file's folder, else to
    the working directory; a .yaml one where `preset_dir` is given), else `preset_dir/NAME.yaml`. `origin` (if
    given) gets, per top-level key, the file that set it last. A missing parent, a cycle or `_base_` is an error."""
    origin = {} if origin is None else origin

    def find(name: str, folder: Path | None) -> Path | None:
        paths = [Path(name)] if folder is None else [folder / name, Path(name)]
        tries = [p for p in paths if not preset_dir or p.suffix in YAML]
        tries += [preset_dir / f"{name}.yaml"] if preset_dir else []
        return next((p.resolve() for p in tries if p.is_file()), None)

    def walk(data: dict, path: Path | None, chain: tuple) -> dict:
        if "_base_" in data:
            raise ValueError(f"{path or what}: `_base_` is now `{PRESET_KEY}:` (a name, a path or a list of them)")
        names = data.pop(PRESET_KEY, [])
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{path or what}: {PRESET_KEY} must be a name, a path or a list of them, got {names!r}")
        merged: dict = {}
        for name in names:  # the caller's own file, if missing: read_yaml_mapping says so
            file = find(name, path and path.parent) or (Path(name) if not (path or preset_dir) else None)
            if file is None:
                where = f" (named in {path})" if path else ""
                presets = sorted(p.stem for p in preset_dir.glob("*.yaml")) if preset_dir else None
                hint = close_hint(name, presets or ())
                what_is = "not a YAML file" if presets is None else "neither a preset nor a YAML file" + hint
                what_is = what_is if hint or presets is None else f"neither a preset {presets} nor a YAML file"
                raise ValueError(f"{PRESET_KEY}: not found: {name!r}{where} is {what_is}")
            if file in chain:
                raise ValueError(f"{PRESET_KEY}: cycle: {' -> '.join(map(str, (*chain, file)))}")
            merged = merge_mappings(merged, walk(read_yaml_mapping(file, what), file, (*chain, file)))
        origin.update(dict.fromkeys(data, str(path)) if path else {})
        return merge_mappings(merged, data)

    return walk(dict(spec) if isinstance(spec, Mapping) else {PRESET_KEY: str(spec)}, None, ())


def _scalar(name: str, typ: Any, value: Any, what: str) -> Any:
    try:
        if typ is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
        if typ is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, float) and number != int(number):
                raise ValueError
            return int(number)
        if typ is float:
            return float(value)
        if typ is str:
            return str(value).strip()
        return value  # Any, or a type this module does not coerce
    except (TypeError, ValueError):
        raise ValueError(f"invalid {what}: {name}={value!r} is not a valid {typ.__name__}") from None


def coerce(hint: Any, value: Any, name: str = "value", what: str = "config") -> Any:
    """`value` (from YAML or a `key=value` string) coerced to the type `hint`."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None
        return coerce(args[0], value, name, what) if len(args) == 1 else value
    if origin in (list, tuple):
        inner = (typing.get_args(hint) or (Any,))[0]
        if isinstance(value, str):
            parsed = yaml.safe_load(value) if value.strip().startswith("[") else value.split(",")
            value = parsed if isinstance(parsed, list) else [parsed]
        if not isinstance(value, (list, tuple)):
            value = [value]
        out = [coerce(inner, v, name, what) for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, Mapping):
            raise ValueError(f"invalid {what}: {name}={value!r} is not a mapping")
        _, val_t = typing.get_args(hint) or (Any, Any)
        return {k: coerce(val_t, v, f"{name}.{k}", what) for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"invalid {what}: {name} must be a mapping of {hint.__name__} fields, got {value!r}")
        return from_mapping(hint, value, f"{what} {name}")
    return _scalar(name, hint, value, what)


def from_mapping(cls: type, values: Mapping[str, Any], what: str = "config") -> Any:
    """`cls(**values)` with each value coerced to its field's type; unknown keys and missing required
    fields raise ValueError."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in values:
        if key not in fields:
            raise unknown_key_error(key, sorted(fields), what)
    missing = [
        n
        for n, f in fields.items()
        if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{what}: missing required key(s) {missing}")
    return cls(**{k: coerce(hints[k], v, k, what) for k, v in values.items()})


def update(obj: Any, values: Mapping[str, Any] | list[str], what: str = "config") -> Any:
    """A copy of the dataclass `obj` with `values` applied (coerced; nested dataclasses merged key by key).

    `values` is a mapping or a list of `key=value` strings. Unknown keys raise ValueError with close matches.
    `__post_init__` runs again on the copy (validation stays the dataclass's own `validate()`)."""
    if isinstance(values, (list, tuple)):
        values = parse_overrides(values)
    hints = typing.get_type_hints(type(obj))
    fields = {f.name for f in dataclasses.fields(obj) if f.init}
    changes = {}
    for key, value in values.items():
        if key not in fields:
            raise unknown_key_error(key, sorted(fields), what)
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            changes[key] = update(current, value, f"{what} {key}")
        else:
            changes[key] = coerce(hints[key], value, key, what)
    return dataclasses.replace(obj, **changes)
