"""The YAML -> dataclass helper: coercion by field type, nested merges, unknown keys with close matches."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from anchorft.dataclass_yaml import from_mapping, read_yaml_mapping, update


@dataclass
class Inner:
    lr: float = 1e-3
    steps: int = 10
    mix: dict[str, float] = field(default_factory=lambda: {"a": 1.0})


@dataclass
class Item:
    name: str
    rank: int | None = None


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    items: list[Item] = field(default_factory=list)
    sizes: list[int] = field(default_factory=lambda: [1])
    flag: bool = False
    label: str = "x"


def test_types_are_coerced():
    got = update(Outer(), {"sizes": "8,16", "flag": "true", "label": " y ", "inner": {"lr": "1e-4", "steps": "1e3"}})
    assert got.sizes == [8, 16] and got.flag is True and got.label == "y"
    assert got.inner.lr == 1e-4 and got.inner.steps == 1000 and isinstance(got.inner.steps, int)
    assert update(Outer(), ["sizes=[3, 4]"]).sizes == [3, 4]
    with pytest.raises(ValueError, match="steps=1.5 is not a valid int"):
        update(Outer(), {"inner": {"steps": 1.5}})


def test_nested_sections_merge_key_by_key():
    got = update(Outer(inner=Inner(lr=0.5, steps=3)), {"inner": {"steps": 7}})
    assert got.inner == Inner(lr=0.5, steps=7)
    assert update(Outer(), {"inner": {"mix": {"b": 2}}}).inner.mix == {"b": 2.0}


def test_lists_of_dataclasses_and_optional_fields():
    got = update(Outer(), {"items": [{"name": "a"}, {"name": "b", "rank": "4"}]})
    assert got.items == [Item("a"), Item("b", 4)]
    assert from_mapping(Item, {"name": "c", "rank": None}) == Item("c", None)
    with pytest.raises(ValueError, match="missing required"):
        from_mapping(Item, {"rank": 1})


def test_unknown_keys_name_the_closest_known_ones():
    with pytest.raises(ValueError, match=r"unknown demo key 'flg', did you mean 'flag'\? \(known keys: flag, "):
        update(Outer(), {"flg": True}, "demo")
    with pytest.raises(ValueError, match="unknown demo inner key 'stpes', did you mean 'steps'"):
        update(Outer(), {"inner": {"stpes": 1}}, "demo")
    with pytest.raises(ValueError, match="unknown demo items key 'nam'"):
        update(Outer(), {"items": [{"nam": "a"}]}, "demo")
    with pytest.raises(ValueError, match="key=value"):
        update(Outer(), ["flag"])


def test_read_yaml_mapping(tmp_path):
    (tmp_path / "a.yaml").write_text("# a comment only\n")
    with pytest.raises(ValueError, match="a.yaml' is empty"):  # not a silent run of the defaults
        read_yaml_mapping(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("# the defaults\n{}\n")
    assert read_yaml_mapping(tmp_path / "c.yaml") == {}
    (tmp_path / "b.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="must be a YAML mapping"):
        read_yaml_mapping(tmp_path / "b.yaml")
