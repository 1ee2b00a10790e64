"""The YAML -> dataclass helper: coercion by field type, nested merges, unknown keys with close matches."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from anchorft.dataclass_yaml import from_mapping, read_yaml_mapping, resolve_presets, update


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


def test_resolve_presets_by_name_path_and_list(tmp_path):
    """`preset:` names parents (a name in the preset folder, a path relative to the naming file, a list); later
    parents and then the file's own keys win, nested mappings merge key by key; cycles, missing parents and the
    former key `_base_` are errors naming the file."""
    presets, sub = tmp_path / "presets", tmp_path / "sub"
    presets.mkdir(), sub.mkdir()
    (presets / "base.yaml").write_text("lr: 1.0\nsteps: 5\nmix: {a: 1.0, b: 2.0}\n")
    (sub / "more.yaml").write_text("preset: base\nsteps: 7\nmix: {b: 3.0}\n")
    (sub / "leaf.yaml").write_text("preset: [base, more.yaml]\nlr: 0.5\n")
    origin: dict = {}
    got = resolve_presets(sub / "leaf.yaml", presets, origin=origin)
    assert got == {"lr": 0.5, "steps": 7, "mix": {"a": 1.0, "b": 3.0}}
    assert origin == {"lr": str(sub / "leaf.yaml"), "steps": str(sub / "more.yaml"), "mix": str(sub / "more.yaml")}
    assert resolve_presets({"preset": "base", "steps": 1}, presets) == {
        "lr": 1.0,
        "steps": 1,
        "mix": {"a": 1.0, "b": 2.0},
    }
    assert resolve_presets("base", presets) == resolve_presets(str(presets / "base.yaml"), presets)
    (sub / "more.yaml").write_text("preset: leaf.yaml\n")
    with pytest.raises(ValueError, match=r"preset: cycle: .*leaf.yaml -> .*more.yaml -> .*leaf.yaml"):
        resolve_presets(sub / "leaf.yaml", presets)
    with pytest.raises(ValueError, match=r"not found: 'nope' is neither a preset \['base'\] nor a YAML file"):
        resolve_presets({"preset": "nope"}, presets)
    (sub / "old.yaml").write_text("_base_: [leaf.yaml]\n")
    with pytest.raises(ValueError, match=r"old.yaml: `_base_` is now `preset:`"):
        resolve_presets(sub / "old.yaml")
    with pytest.raises(ValueError, match="must be a name, a path or a list"):
        resolve_presets({"preset": 3})


def test_check_choices_reads_the_fields_choices_and_leaves_a_base_class_its_own():
    from anchorft.dataclass_yaml import check_choices

    @dataclass
    class Base:
        level: str | None = field(default=None, metadata={"choices": ["a", "b"]})  # None: the base's own rule

    @dataclass
    class Child(Base):
        kind: str = field(default="x", metadata={"choices": ("x", "y")})
        free: str = "anything"

    check_choices(Child(kind="y"), Base)
    with pytest.raises(ValueError, match=r"^kind must be one of \['x', 'y'\], got 'z'$"):
        check_choices(Child(kind="z"), Base)
    with pytest.raises(ValueError, match=r"^level must be one of \['a', 'b'\], got None$"):
        check_choices(Child())


def test_overrides_are_key_value_tokens_or_flags_in_one_parser():
    from anchorft.dataclass_yaml import parse_overrides

    got = parse_overrides(["a=1", "--b", "x,y", "--c=[1, 2]", "d==e", "a=2"])
    assert got == {"a": "2", "b": "x,y", "c": "[1, 2]", "d": "=e"}  # in order, a later one winning
    for bad, message in (
        (["x"], "must look like key=value"),
        (["--flag"], "needs a value"),
        (["--a", "--b", "1"], "needs a value"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_overrides(bad)
