"""A command module imports at its top, except what loads a heavy library (torch, transformers, TRL, ...): that
import stays inside the function that needs it, so that a mistake in the command line is reported in a second,
before the library loads (docs/architecture.md, "Layers"). Read with `ast`: nothing is imported."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
# libraries that take seconds to import (or start threads, or read the GPU): the reason an import may stay lazy
HEAVY = {"torch", "transformers", "trl", "vllm", "deepspeed", "peft", "datasets", "ray", "lm_eval", "accelerate"}
HEAVY |= {"matplotlib", "scipy", "sympy", "math_verify"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "anchorft").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of `module` (`from pkg import mod` names the
    submodule); an `if TYPE_CHECKING:` block runs at no import and is left out."""
    path = MODULES[module]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lazy = True
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno, lazy) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*anchor, base] if base else anchor)
            out.extend((f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, node.lineno, lazy)
                       for a in node.names)  # fmt: skip
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        visit(stmt, False)
    return out


@cache
def loads_heavy(module: str, _seen: frozenset = frozenset()) -> str | None:
    """The heavy library importing `module` loads (its packages' `__init__` and its module-level imports,
    followed through the project's modules), or None."""
    top = module.split(".")[0]
    if top in HEAVY:
        return top
    if top != "anchorft":
        return None
    parts = module.split(".")
    for owner in (".".join(parts[: i + 1]) for i in range(len(parts))):
        if owner not in MODULES:
            continue
        for target, _, lazy in _imports(owner):
            if not lazy and target not in _seen and target != owner:
                found = loads_heavy(target, _seen | {owner})
                if found:
                    return found
    return None


def light_lazy_imports(package: str = "anchorft.commands") -> list[str]:
    return [
        f"{m}:{line} imports {target} inside a function, which loads nothing heavy: import it at the top"
        for m in sorted(MODULES)
        if m.startswith(package)
        for target, line, lazy in _imports(m)
        if lazy and not loads_heavy(target)
    ]


def test_a_command_imports_lazily_only_what_loads_a_heavy_library():
    assert light_lazy_imports() == []


def test_the_check_tells_light_from_heavy():
    assert loads_heavy("anchorft.rpsft.train") in HEAVY and loads_heavy("torch.nn") == "torch"
    assert loads_heavy("anchorft.errors") is None and loads_heavy("json") is None
    assert any(lazy for _, _, lazy in _imports("anchorft.commands.train"))  # the train command has lazy imports
