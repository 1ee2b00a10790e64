"""The flag idiom of the configuration (docs/architecture.md, "Configuration"): a dataclass's fields as `--flags`.

A setting is declared once, as a dataclass field with its type, default, `"help"` and `"choices"` metadata; the
commands' parsers are built from the fields (`add_field_flags`), give the parsed values back as the dataclass's
keyword arguments (`field_values`), and take a library function's defaults from its signature
(`keyword_defaults`) instead of restating them. Every parser is a `FlagParser` (no prefix matching, a did-you-mean
on an unknown flag) that accepts `--snake_case` and `--kebab-case` alike (`both_spellings`). The YAML idiom, with its
one inheritance rule, is `anchorft.dataclass_yaml`.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable

from anchorft.errors import did_you_mean

__all__ = ["FlagParser", "both_spellings", "add_field_flags", "field_values", "keyword_defaults", "field_help"]
__all__ += ["parse_named", "pop_flag"]


class FlagParser(argparse.ArgumentParser):
    """The commands' parser: no prefix matching (a misspelt flag is an error, never another flag) and a
    did-you-mean on an unknown flag; subcommand parsers are FlagParsers too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message = prefix + did_you_mean(self, message[len(prefix) :].split())
        super().error(message)


# one output flag everywhere: --out, and TRL's --output_dir (either spelling) for the same option
OUTPUT_SPELLINGS = {"--out": ("--output_dir", "--output-dir"), "--output_dir": ("--out",)}


def both_spellings(parser) -> None:
    """Let every `--snake_case` option of `parser` (and of its subcommands) also be given as `--kebab-case`,
    and the reverse, and `--out` as `--output_dir` / `--output-dir` (and the reverse): one flag style across
    commands, whichever a user types."""
    for action in list(parser._actions):
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                both_spellings(sub)
            continue
        for opt in list(action.option_strings):
            if not opt.startswith("--") or len(opt) < 4:
                continue
            body = opt[2:]
            others = ["--" + body.replace("_", "-"), "--" + body.replace("-", "_"), *OUTPUT_SPELLINGS.get(opt, ())]
            for other in others:
                if other != opt and other not in parser._option_string_actions:
                    action.option_strings.append(other)
                    parser._option_string_actions[other] = action


def add_field_flags(
    p: argparse.ArgumentParser,
    cls: type,
    names: tuple[str, ...] | None = None,
    *,
    aliases: dict[str, tuple[str, ...]] | None = None,
    defaults: dict | None = None,
) -> None:
    """One `--name` flag per field of the dataclass `cls` (`names`: only these) with the field's type, default
    (`defaults` may replace it, e.g. with None for "the recipe's"), choices and help; no default is restated. A bool
    is `--name` (default False) or `--no_name` (default True); a tuple or list field takes several values;
    `aliases`: more spellings of a field's flag. `both_spellings` adds the --kebab-case ones."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names or tuple(fields):
        f, typ = fields[name], hints[name]
        if typing.get_origin(typ) in (typing.Union, types.UnionType):  # X | None
            typ = next(a for a in typing.get_args(typ) if a is not type(None))
        default = (defaults or {}).get(name, f.default)
        kw: dict = {"dest": name, "help": f"{f.metadata.get('help', '')} (default {default!r})"}
        flags = [f"--{name}", *(aliases or {}).get(name, ())]
        if typ is bool:
            flags[0] = f"--no_{name}" if default else flags[0]
            kw.update(action="store_false" if default else "store_true")
            kw["help"] = ("turns off: " if default else "") + kw["help"]
        elif typing.get_origin(typ) in (tuple, list):
            kw.update(type=typing.get_args(typ)[0], nargs="+", default=default)
        else:
            kw.update(type=typ, default=default, choices=f.metadata.get("choices"))
        p.add_argument(*flags, **kw)


def field_values(args: argparse.Namespace, cls: type, **override) -> dict:
    """The parsed flags named as fields of the dataclass `cls` (`add_field_flags`' or a command's own), `override`
    on top: the keyword arguments of `cls`."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)} | override


def keyword_defaults(fn: Callable) -> dict:
    """{parameter: default} of the parameters of `fn` that have one: a command's flags take a library function's
    defaults from here instead of restating them."""
    params = inspect.signature(fn).parameters.items()
    return {k: p.default for k, p in params if p.default is not inspect.Parameter.empty}


def field_help(f: dataclasses.Field, default: bool = True, alias: str = "") -> str:
    """One field of a short help: `--name` (its alias, its default) and its help's first sentence, cut at a word
    (" ..." marks a cut; `--help-all` prints it whole), wrapped to 112 columns."""
    value = f" (default {f.default!r})" if default else ""
    text = " ".join(f.metadata.get("help", "").split())
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)[0]  # a sentence ends before a capital, not at "e.g. x"
    first = textwrap.shorten(first, width=220, placeholder=" ...")
    body = textwrap.fill(first, width=112, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return f"  --{f.name}{alias}{value}\n{body}"


def parse_named(specs: list[str], flag: str) -> dict[str, str]:
    """NAME=DIR pairs of a repeatable flag (`--tuned`, `--models`) in order; a malformed or repeated name is a
    ValueError naming the flag."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{flag} must be NAME=DIR, got {spec!r}")
        if name in out:
            raise ValueError(f"{flag}: the name {name!r} is given twice")
        out[name] = path
    return out


def pop_flag(argv: list[str], *names: str) -> tuple[list[str], bool]:
    """Remove the boolean flag `names` (any spelling given) from argv; whether it was there."""
    kept = [a for a in argv if a not in names]
    return kept, len(kept) != len(argv)
