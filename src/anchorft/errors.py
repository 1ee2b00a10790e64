"""One error path for every command: bad input is one line on stderr and exit code 2.

Library and command code raise `UsageError` (or a ValueError / OSError naming the file, line, key or
flag); `anchorft.cli.main` prints `anchorft CMD: error: MESSAGE` on one line and returns 2. With
`--debug` (anywhere on the command line) or `ANCHORFT_DEBUG=1` the traceback is printed instead.
The readers here (`read_yaml`, `check_jsonl`) turn a malformed file into such a message, naming the
file and the line.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import traceback
import types
import typing
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "UsageError",
    "MissingExtra",
    "CellLost",
    "one_line",
    "debug_enabled",
    "read_yaml",
    "check_jsonl",
    "check_keys",
]
__all__ += ["check_mapping_types"]
__all__ += ["EXIT_USAGE", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "did_you_mean", "close_hint"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class UsageError(ValueError):
    """Bad input from the user (a file, a line, a key or a flag): one line, exit code 2.

    A ValueError, so that callers that already catch ValueError keep working.
    """


class MissingExtra(ImportError):
    """An optional dependency the user asked for is not installed (the message names the extra to install): one
    line, exit code 2. An ImportError, so that callers that already catch ImportError keep working."""


class CellLost(RuntimeError):
    """Cells of a study lost with the cluster workers or nodes that ran them, after their retries
    (`anchorft.studies.grid`): one line, exit code 1, once every other cell ran; those are recorded, and the same
    command runs the lost ones."""


def one_line(exc: BaseException) -> str:
    """The message of `exc` on a single line (newlines become "; ", blank lines dropped)."""
    text = str(exc) if str(exc) else type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, KeyError):
        text = f"missing key {exc.args[0]!r}" if exc.args else "missing key"
    return "; ".join(p.strip() for p in text.splitlines() if p.strip())


def debug_enabled(argv: list[str] | None = None) -> bool:
    """True when `--debug` is in `argv` or ANCHORFT_DEBUG is set to something other than "", "0", "false"."""
    env = os.environ.get("ANCHORFT_DEBUG", "").strip().lower()
    return bool(argv and "--debug" in argv) or env not in ("", "0", "false", "no")


def read_yaml(path: str | os.PathLike, what: str = "config") -> Any:
    """Parse a YAML file; a missing file or malformed YAML is a UsageError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{what}: {path} does not exist" if not path.exists() else f"{what}: {path} is not a file")

    try:
        with path.open(encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        raise UsageError(f"{where}: malformed YAML: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: malformed YAML: {one_line(e)}") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e


def check_jsonl(path: str | os.PathLike, what: str = "dataset", max_lines: int | None = None) -> int:
    """Check that every line of a .jsonl file (blank lines aside) is a JSON object; return the row count.

    Empty files and malformed lines are UsageErrors naming the file and the 1-based line number.
    `max_lines` stops the check early (for files too large to read twice).
    """
    path = Path(path)
    n = 0
    try:
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UsageError(f"{what}: {path}:{i}: not JSON ({e.msg} at column {e.colno})") from e
                if not isinstance(obj, dict):
                    raise UsageError(f"{what}: {path}:{i}: expected a JSON object, got {type(obj).__name__}")
                n += 1
                if max_lines is not None and i >= max_lines:
                    break
    except UnicodeDecodeError as e:
        raise UsageError(f"{what}: {path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    if n == 0:
        raise UsageError(f"{what}: {path} is empty (no JSON lines)")
    return n


def _type_ok(value: Any, tp: Any) -> bool:
    if tp is Any or tp is object:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if origin is not None:
        tp = origin
    if not isinstance(tp, type):
        return True  # a form this check does not know: left to the config's own validation
    if tp in (int, float):  # an int is a float too; a bool is neither
        return isinstance(value, (int, tp)) and not isinstance(value, bool)
    if tp in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, tp)


def check_keys(value: Any, cls: type, where: str) -> dict:
    """`value` is a mapping whose keys are fields of the dataclass `cls`, else a UsageError naming `where`,
    the key and the closest field names. Returns `value`."""
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping of {cls.__name__} fields, got {type(value).__name__}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in value:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else f"; known: {', '.join(names)}"
            raise UsageError(f"{where}: unknown key {key!r}{hint}")
    return value


def check_mapping_types(value: dict, cls: type, where: str) -> dict:
    """Each value of the mapping has the annotated type of the field of dataclass `cls` it names, else a
    UsageError naming `where`: key, the value and the type expected (keys that are no field are left alone)."""
    hints = typing.get_type_hints(cls)
    for key, v in value.items():
        tp = hints.get(key, Any)
        if not _type_ok(v, tp):
            name = getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
            raise UsageError(f"{where}: {key}: expected {name}, got {v!r} ({type(v).__name__})")
    return value


_DEBUG_FLAG = False  # set by anchorft.cli.main for the duration of a call with --debug


def report(prog: str, exc: BaseException) -> int:
    """Print `exc` as the one-line error of `prog` (the traceback first when debugging); return exit code 2."""
    if _DEBUG_FLAG or debug_enabled():
        traceback.print_exception(exc)
    print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
    return EXIT_USAGE


def close_hint(word: str, choices, n: int = 1, cutoff: float = 0.6) -> str:
    """The hint "; did you mean 'x'?" (or "'x' or 'y'" with `n` > 1) for the `choices` closest to `word`, "" when
    none is close (difflib's ratio >= `cutoff`): the one suggestion wording of every unknown name (commands,
    presets, configs, sweep kinds and keys)."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def did_you_mean(parser, tokens: list[str]) -> str:
    """Each unknown `--flag` of `tokens` with the closest flag `parser` knows ("--learnig_rate (did you mean
    --learning_rate?)"), or, for a flag another subcommand takes, "(an option of another subcommand)"; the tokens as
    they are when none is close."""
    known = sorted(_long_flags(parser))
    out = []
    for tok in tokens:
        flag = tok.split("=", 1)[0]
        if flag in known:  # unknown here, known to a sibling subcommand: the closest match would be itself
            out.append(f"{tok} (an option of another subcommand)")
            continue
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if flag.startswith("--") else []
        out.append(f"{tok} (did you mean {close[0]}?)" if close else tok)
    return " ".join(out)


def _long_flags(parser) -> set[str]:
    """The `--flags` of an argparse parser and of its subcommands' parsers (an unknown flag after a subcommand is
    reported by the parent)."""
    flags = {o for o in parser._option_string_actions if o.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                flags |= _long_flags(sub)
    return flags
