"""`AnchorOptions` declares the anchor's options once: no other class of the package declares a field of the same
name, except the ones listed here with their reason. Read with `ast` (a class made by `make_dataclass` is a call,
checked too)."""

from __future__ import annotations

import ast
from pathlib import Path

from anchorft.rpsft.anchor_options import anchor_option_names

SRC = Path(__file__).resolve().parents[2] / "src" / "anchorft"
ALLOWED = {
    # the weak-to-strong simulator's own anchor (its N x d first layer), the same option for another model
    ("w2s/config.py", "W2SConfig", "anchor_rank"),
    # the testbed RL stage's default rank: the paper's k at the testbed's width 128 (24), not a 7B model's 768
    ("studies/testbed/rl_stage_config.py", "RLStageSettings", "anchor_rank"),
    # a comparison's defaults for its runs; its record is keyed by the config's fields, so moving them (to
    # AnchorOptions as a base class) would run every recorded comparison again: docs/architecture.md, "Configuration"
    ("studies/testbed/compare_config.py", "CompareConfig", "anchor_lambda"),
    ("studies/testbed/compare_config.py", "CompareConfig", "anchor_targets"),
    ("studies/testbed/compare_config.py", "CompareConfig", "anchor_include_embeddings"),
}


def declarations(root: Path = SRC) -> set[tuple[str, str, str]]:
    """(file, class, field) of every class body field (an annotated name) and every `make_dataclass` field given as
    a literal (name, ...) tuple, named like an anchor option, outside `AnchorOptions` itself."""
    names, found = set(anchor_option_names()), set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name != "AnchorOptions":
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) in names:
                        found.add((rel, node.name, stmt.target.id))
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == (
                "make_dataclass"
            ):
                for elt in ast.walk(node):
                    if isinstance(elt, ast.Tuple) and elt.elts and isinstance(elt.elts[0], ast.Constant):
                        if elt.elts[0].value in names:
                            found.add((rel, "make_dataclass", elt.elts[0].value))
    return found


def test_anchor_options_are_declared_once():
    assert declarations() - ALLOWED == set()
    assert ALLOWED <= declarations()  # an entry that no longer applies is removed from the list


def test_the_check_finds_a_second_declaration(tmp_path):
    (tmp_path / "x.py").write_text(
        "import dataclasses\n\nclass Other:\n    anchor_rank: int = 8\n\n"
        "Made = dataclasses.make_dataclass('Made', [('anchor_kind', str, 'block')])\n"
    )
    assert declarations(tmp_path) == {("x.py", "Other", "anchor_rank"), ("x.py", "make_dataclass", "anchor_kind")}
