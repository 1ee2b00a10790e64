"""The flags TrlParser makes of TRL's config classes, as a table shipped with the package (`trl_fields.json`).

Importing TRL's `SFTConfig` or `GRPOConfig` loads transformers (seconds), and what their source declares is not
enough to check a flag's value: a field typed `Union[SchedulerType, str]` takes the enum's values as choices, an
`Optional[bool]` is read by transformers' `string_to_bool`. So `anchorft train` and `anchorft rl` read each TRL
field's value type, choices, default and help from this table (`trl_table`), generated from the installed TRL by
`build_table` (`python -m anchorft.rpsft.trl_fields` rewrites it); `tests/rpsft/test_trl_fields.py` holds it equal
to the installed TRL's parser. The project's own fields (`RPSFTConfig`'s, `DAPOConfig`'s) are read from their
source instead (`anchorft.rpsft.prechecks`).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["TABLE_FILE", "TRL_CLASSES", "trl_table", "build_table", "value_kind"]

TABLE_FILE = Path(__file__).with_name("trl_fields.json")
# the TRL classes whose flags the table holds: `anchorft train`'s and `anchorft rl`'s bases
TRL_CLASSES = ("SFTConfig", "GRPOConfig")


@cache
def trl_table() -> dict[str, dict[str, dict[str, Any]]]:
    """{class name: {field: {"type", "choices", "default", "help"}}} of `TRL_CLASSES`, as shipped; {} when the
    file is missing or unreadable (the checks are then left to TrlParser)."""
    try:
        return json.loads(TABLE_FILE.read_text(encoding="utf-8"))["classes"]
    except (OSError, ValueError, KeyError):
        return {}


def value_kind(action) -> str:
    """The table's name of an argparse action's value conversion: int, float, str, bool (transformers'
    `string_to_bool`), choice (an enum's values, `make_choice_type_function`), or the callable's name."""
    fn = action.type
    if fn is None or fn is str:
        return "str"
    if fn in (int, float):
        return fn.__name__
    name = getattr(fn, "__name__", type(fn).__name__)
    if name == "string_to_bool":
        return "bool"
    if name == "<lambda>" and action.choices is not None:
        return "choice"
    return name


def _plain(value: Any) -> Any:
    """A default as JSON holds it: its enum's value, else itself when JSON can write it, else its repr."""
    value = getattr(value, "value", value)
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def build_table() -> dict[str, Any]:
    """The table of the installed TRL (imports TRL and transformers): each class's flags as HfArgumentParser
    builds them, the `--no_X` complements left out (they set the same field)."""
    import trl  # lazy: loads TRL
    from transformers import HfArgumentParser  # lazy: loads transformers

    classes: dict[str, dict[str, dict[str, Any]]] = {}
    for name in TRL_CLASSES:
        rows: dict[str, dict[str, Any]] = {}
        for action in HfArgumentParser(getattr(trl, name))._actions:
            if not action.option_strings or action.dest == "help" or action.dest in rows:
                continue
            choices = [_plain(c) for c in action.choices] if action.choices is not None else None
            kind = value_kind(action)
            rows[action.dest] = {"type": kind, "choices": choices, "default": _plain(action.default),
                                 "help": action.help or ""}  # fmt: skip
        classes[name] = rows
    return {"trl": trl.__version__, "classes": classes}


if __name__ == "__main__":  # python -m anchorft.rpsft.trl_fields: rewrite the table from the installed TRL
    TABLE_FILE.write_text(json.dumps(build_table(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TABLE_FILE}", file=sys.stderr)
