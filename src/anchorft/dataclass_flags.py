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
__all__ += ["parse_named", "pop_flag", "subcommand", "meta", "OVERWRITE"]


def meta(text: str, **more) -> dict:
    """`field(default=..., **meta("help", choices=...))`: a field's help and its other metadata (`add_field_flags`
    reads "choices", "flag", "aliases", "metavar", "repeat", "positional", "exclusive", "hidden")."""
    return {"metadata": {"help": text, **more}}


OVERWRITE = meta("replace an output folder that holds another run")  # every command's --overwrite


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
) -> argparse.ArgumentParser:
    """One `--name` flag per field of the dataclass `cls` (`names`: only these) with the field's type, default
    (`defaults` may replace it, e.g. with None for "the recipe's"), choices and help; no default is restated; `p`
    back. A field without a default is a required flag. A bool is `--name` (default False) or `--no_name` (default
    True); a tuple or list field takes several values. A field's metadata may also give "flag" (its spelling instead
    of `--name`, e.g. "--from" for `sources`), "aliases" (more spellings; `aliases` too), "metavar", "repeat" (a
    list built by repeating the flag), "positional" (an argument without a flag; a list: any number) and "hidden"
    (left out of --help), "exclusive" (fields of the same "exclusive" name are not given together).
    `both_spellings` adds the --kebab-case ones."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name in names or tuple(fields):
        f, typ, meta = fields[name], hints[name], fields[name].metadata
        if typing.get_origin(typ) in (typing.Union, types.UnionType):  # X | None
            typ = next(a for a in typing.get_args(typ) if a is not type(None))
        default = (defaults or {}).get(name, f.default)
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        quiet = any(default is v for v in (dataclasses.MISSING, None, False)) or default in ((), [])
        quiet = quiet or "default" in meta.get("help", "")
        shown = "" if quiet else f" (default {default!r})"  # None, False, empty: nothing to show
        kw: dict = {"help": f"{meta.get('help', '')}{shown}", "metavar": meta.get("metavar")}
        if meta.get("hidden"):
            kw["help"] = argparse.SUPPRESS
        flags = [meta.get("flag", f"--{name}"), *meta.get("aliases", ()), *(aliases or {}).get(name, ())]
        is_list = typing.get_origin(typ) in (tuple, list)
        if meta.get("positional"):
            flags, many = [name], is_list
            kw.update(type=typing.get_args(typ)[0] if is_list else typ, nargs="*" if many else None)
            if default is not dataclasses.MISSING:
                kw.update(default=default, nargs="*" if many else "?")
            p.add_argument(*flags, **{k: v for k, v in kw.items() if v is not None})
            continue
        kw["dest"] = name
        if default is dataclasses.MISSING:
            kw["required"] = True
        else:
            kw["default"] = default
        if typ is bool:
            flags[0] = f"--no_{name}" if default and "flag" not in meta else flags[0]
            kw.update(action="store_false" if default else "store_true")
            if default and kw["help"] != argparse.SUPPRESS:  # --no_name, or the flag's own spelling of "off"
                kw["help"] = meta.get("help", "") if "flag" in meta else "turns off: " + kw["help"]
        elif is_list and meta.get("repeat"):
            kw.update(type=typing.get_args(typ)[0], action="append", default=list(default))
        else:
            kw.update(type=typing.get_args(typ)[0] if is_list else typ, choices=meta.get("choices"))
            kw.update(nargs="+" if is_list else None)
        if "exclusive" in meta and meta["exclusive"] not in groups:
            groups[meta["exclusive"]] = p.add_mutually_exclusive_group()
        to = groups[meta["exclusive"]] if "exclusive" in meta else p
        to.add_argument(*flags, **{k: v for k, v in kw.items() if v is not None or k == "default"})
    return p


def subcommand(sub, name: str, cls: type, help: str | None = None, **kwargs) -> argparse.ArgumentParser:
    """A subcommand `name` of the subparsers `sub` whose flags are the fields of the dataclass `cls`
    (`add_field_flags`), described by its docstring; `help`: the line in the parent's --help (default: the
    docstring's first sentence)."""
    doc = " ".join((cls.__doc__ or "").split())
    if help is None:
        first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", doc)[0].rstrip(".")
        help = first[:1].lower() + first[1:]
    return add_field_flags(sub.add_parser(name, help=help, description=doc, **kwargs), cls)


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
