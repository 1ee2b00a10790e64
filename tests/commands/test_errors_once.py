"""A user's mistake is reported once, by `anchorft.cli.main`: the command modules raise it and never print it
themselves (docs/architecture.md, "Layers"). Read with `ast`: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

COMMANDS = Path(__file__).resolve().parents[2] / "src" / "anchorft" / "commands"


def _reporters(path: Path) -> list[str]:
    """Where `path` imports or calls `anchorft.errors.report` (by any name)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {"report"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "anchorft.errors":
            for alias in node.names:
                if alias.name == "report":
                    names.add(alias.asname or alias.name)
                    found.append(f"{path.name}:{node.lineno} imports report")
        elif isinstance(node, ast.Call):
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if called in names:
                found.append(f"{path.name}:{node.lineno} calls {called}")
    return found


def test_no_command_module_reports_a_user_error_itself():
    modules = sorted(COMMANDS.glob("*.py"))
    assert len(modules) > 5
    assert [r for m in modules for r in _reporters(m)] == []


def test_the_check_finds_a_report(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from anchorft.errors import report as say\n\ndef main(argv):\n    return say('x', ValueError())\n")
    assert _reporters(bad) == ["bad.py:1 imports report", "bad.py:4 calls say"]
