"""docs/recipes.md's table of settings (ours vs the release's) against the recipes' YAML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from anchorft.rpsft.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RPSFT = ROOT / "configs" / "rpsft"
LEAVES = sorted(p for p in RPSFT.glob("*/*.yaml") if p.parent.name != "_base")
VARIES_BY_LEAF = {"method", "output_dir"}  # one value per leaf: checked by test_recipes.py
ROW = re.compile(r"^\| `(\w+)`(?: \(([\w.-]+)\))? \| (.*?) \| (.*?) \| (.*?) \| (yes|no|equivalent) \|(.*)\|$")


def table_rows() -> list[dict]:
    text = (ROOT / "docs" / "recipes.md").read_text()
    start = text.index("### Every setting, ours vs the release's")
    rows = []
    for line in text[start:].splitlines():
        m = ROW.match(line)
        if m:
            key, model, ours, release, files, same, note = m.groups()
            rows.append(
                dict(key=key, model=model, ours=ours, release=release, files=files, same=same, note=note.strip())
            )
        elif rows and not line.startswith("|"):
            break
    return rows


def test_table_parses_and_names_release_files() -> None:
    rows = table_rows()
    assert len(rows) >= 35
    for r in rows:
        known = ("S", "Z", "P", "T", "TR", "D", "RM", "DQ", "DL")
        assert r["files"] and all(f in known for f in r["files"].split(", ")), r
        if r["same"] != "yes":
            assert r["note"], f"{r['key']}: a divergence or an equivalence says why"


def test_every_recipe_key_has_a_row() -> None:
    keys = {r["key"] for r in table_rows()}
    for leaf in LEAVES:
        args, _ = load_recipe(leaf)
        missing = sorted(set(args) - keys)
        assert not missing, f"{leaf.relative_to(ROOT)}: no table row for {missing}"


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_ours_column_is_the_yaml(leaf: Path) -> None:
    args, _ = load_recipe(leaf)
    model = leaf.parent.name
    for r in table_rows():
        if r["key"] in VARIES_BY_LEAF or (r["model"] and r["model"] != model) or r["key"] not in args:
            continue
        assert yaml.safe_load(r["ours"]) == args[r["key"]], f"{r['key']} ({model})"


def test_same_column_compares_as_stated() -> None:
    for r in table_rows():
        ours, release = yaml.safe_load(r["ours"]), yaml.safe_load(r["release"])
        if r["same"] == "yes":
            assert ours == release, r["key"]
        elif r["same"] == "no":
            assert ours != release, r["key"]
