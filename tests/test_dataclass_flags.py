"""The flag idiom (`anchorft.dataclass_flags`): a dataclass's fields as flags, NAME=DIR pairs. The commands' own
flags: tests/commands/test_flags.py."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, field_values, parse_named, subcommand


def test_field_values_are_the_flags_named_as_fields():
    """A command hands its parsed flags to a config by field name: other flags stay out, `override` wins."""

    @dataclasses.dataclass
    class Config:
        a: int = 0
        b: str = "x"
        c: bool = False  # no flag of this name

    args = argparse.Namespace(a=3, b="y", out="o")
    assert field_values(args, Config) == {"a": 3, "b": "y"}
    assert field_values(args, Config, b="z", c=True) == {"a": 3, "b": "z", "c": True}


def test_parse_named_pairs_in_order_and_errors():
    assert list(parse_named(["b=x", "a=y=z"], "--tuned").items()) == [("b", "x"), ("a", "y=z")]
    with pytest.raises(ValueError, match="--models must be NAME=DIR"):
        parse_named(["noequals"], "--models")
    with pytest.raises(ValueError, match="the name 'a' is given twice"):
        parse_named(["a=x", "a=y"], "--tuned")


def test_field_flags_take_type_default_choices_and_help_and_both_spellings():
    @dataclasses.dataclass
    class Config:
        rank: int = dataclasses.field(default=8, metadata={"help": "the rank"})
        kind: str = dataclasses.field(default="block", metadata={"help": "which", "choices": ("block", "subspace")})
        layers: tuple[int, ...] | None = None
        plots: bool = True
        quiet: bool = False

    p = FlagParser(prog="x")
    add_field_flags(p, Config)
    both_spellings(p)
    assert vars(p.parse_args([])) == {"rank": 8, "kind": "block", "layers": None, "plots": True, "quiet": False}
    got = vars(p.parse_args(["--rank", "3", "--kind", "subspace", "--layers", "1", "2", "--no-plots", "--quiet"]))
    assert got == {"rank": 3, "kind": "subspace", "layers": [1, 2], "plots": False, "quiet": True}
    assert "the rank (default 8)" in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--kind", "other"])  # not a choice
    with pytest.raises(SystemExit):
        p.parse_args(["--ran", "3"])  # no prefix matching: a misspelt flag is an error


def test_field_metadata_spells_required_repeated_positional_exclusive_and_hidden_flags(capsys):
    """A command's whole parser from one dataclass: no default is a required flag; "flag" another spelling;
    "repeat" a list by repetition; "positional" a bare list; "exclusive" fields refused together; "hidden" out of
    --help; the docstring is `subcommand`'s description."""

    @dataclasses.dataclass(kw_only=True)
    class Args:
        """Do a thing. More words."""

        sources: list[str] = dataclasses.field(metadata={"help": "folders", "flag": "--from"})
        pick: list[str] = dataclasses.field(default_factory=list, metadata={"repeat": True, "metavar": "G=R"})
        seeds: list[int] | None = dataclasses.field(default=None, metadata={"exclusive": "s"})
        n_seeds: int | None = dataclasses.field(default=None, metadata={"exclusive": "s"})
        old: str | None = dataclasses.field(default=None, metadata={"hidden": True})
        keep: bool = dataclasses.field(default=True, metadata={"flag": "--drop"})
        rest: list[str] = dataclasses.field(default_factory=list, metadata={"positional": True})

    top = FlagParser(prog="x")
    p = subcommand(top.add_subparsers(dest="cmd"), "do", Args)
    assert p.description == "Do a thing. More words."
    got = vars(p.parse_args(["--from", "a", "b", "--pick", "g=1", "--pick", "h=2", "--drop", "k=v", "z=w"]))
    assert got == {"sources": ["a", "b"], "pick": ["g=1", "h=2"], "seeds": None, "n_seeds": None, "old": None,
                   "keep": False, "rest": ["k=v", "z=w"]}  # fmt: skip
    assert Args(**got).pick == ["g=1", "h=2"]
    for bad in ([], ["--from", "a", "--seeds", "1", "--n_seeds", "2"]):
        with pytest.raises(SystemExit):
            p.parse_args(bad)
    p.print_help()
    shown = capsys.readouterr().out
    assert "--from" in shown and "--old" not in shown and "G=R" in shown
