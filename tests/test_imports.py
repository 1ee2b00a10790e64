"""The import graph of `anchorft` runs one way (docs/architecture.md, "Layers").

The source is read with `ast` (nothing is imported), so every import counts, including the ones inside
functions that only run on some paths.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# layer of each part of the package; a module may import its own layer and the layers below it
KERNELS = (
    "anchorft",
    "anchorft.io",
    "anchorft.provenance",
    "anchorft.subspace",
    "anchorft.dataclass_yaml",
    "anchorft.dataclass_flags",
    "anchorft.eval.metrics",
    "anchorft.errors",
    "anchorft.stop",
    "anchorft.runs",
    "anchorft.preflight",
    "anchorft.resources",
    "anchorft.threads",
    "anchorft.slurm",
)
LAYERS: list[tuple[str, ...]] = [
    KERNELS,
    ("anchorft.eval",),
    ("anchorft.data",),
    ("anchorft.rpsft",),
    ("anchorft.toy",),
    ("anchorft.analysis",),
    ("anchorft.studies",),
    ("anchorft.commands", "anchorft.cli", "anchorft.demo", "anchorft.__main__"),
]
# the simulator stands beside the stack: it imports the kernels only, and only the studies and the entry points
# import it
W2S = "anchorft.w2s"
ENTRY = len(LAYERS) - 1
STUDIES = LAYERS.index(("anchorft.studies",))


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in (src / "anchorft").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """{module: the anchorft modules it imports (at module level or inside functions)}."""
    modules = _modules(src)
    graph = {}
    for name, path in modules.items():
        targets = set()
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    # `from pkg import mod` imports the submodule; `from mod import name` the module
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer_of(module: str) -> int | str:
    if module == W2S or module.startswith(W2S + "."):
        return "w2s"
    best, rank = "", None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            exact = module == p
            if (exact or module.startswith(p + ".")) and len(p) >= len(best) and (p != "anchorft" or exact):
                best, rank = p, i
    if rank is None:
        raise AssertionError(f"{module}: in no layer of tests/test_imports.py (add it there and to the docs)")
    return rank


def allowed(src_mod: str, dst_mod: str) -> bool:
    a, b = layer_of(src_mod), layer_of(dst_mod)
    if a == "w2s":
        return b == "w2s" or b == 0
    if b == "w2s":
        return a in (ENTRY, STUDIES)
    return b <= a


def violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {t} (layer {layer_of(m)} -> {layer_of(t)})"
        for m, ts in graph.items()
        for t in ts
        if not allowed(m, t)
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring a package's `__init__`
    importing its own submodules (Python runs those in order)."""

    def edges(m):
        return {t for t in graph[m] if not t.startswith(m + ".")}

    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_from_a_lower_layer_to_a_higher_one():
    assert violations(import_graph()) == []


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_every_module_has_a_layer():
    for m in _modules():
        layer_of(m)


@pytest.mark.parametrize(
    ("files", "expect"),
    [
        ({"anchorft/w2s/dyn.py": "from anchorft.rpsft import anchor\n"}, "violation"),
        ({"anchorft/rpsft/x.py": "def f():\n    from anchorft.commands.train import main\n"}, "violation"),
        ({"anchorft/eval/metrics.py": "import anchorft.eval.generate\n"}, "violation"),
        ({"anchorft/toy/a.py": "from anchorft.toy import b\n", "anchorft/toy/b.py": "from . import a\n"}, "cycle"),
        ({"anchorft/toy/a.py": "from anchorft.rpsft.methods import METHODS\nimport anchorft.subspace\n"}, "ok"),
    ],
)
def test_the_checks_catch_what_they_are_for(tmp_path, files, expect):
    """The walker on small made-up trees: a wrong-way import (also inside a function), a cycle through a
    relative import, and a clean tree."""
    base = {
        "anchorft/__init__.py": "",
        "anchorft/subspace.py": "",
        "anchorft/w2s/__init__.py": "",
        "anchorft/rpsft/__init__.py": "",
        "anchorft/rpsft/anchor.py": "",
        "anchorft/rpsft/methods.py": "",
        "anchorft/commands/__init__.py": "",
        "anchorft/commands/train.py": "",
        "anchorft/eval/__init__.py": "",
        "anchorft/eval/generate.py": "",
        "anchorft/eval/metrics.py": "",
        "anchorft/toy/__init__.py": "",
    }
    for rel, text in {**base, **files}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path)
    got = "violation" if violations(graph) else "cycle" if cycles(graph) else "ok"
    assert got == expect


def test_the_library_imports_nothing_from_the_studies():
    """Studies are written over the library (docs/architecture.md): no library module imports anchorft.studies."""
    above = ("anchorft.studies", "anchorft.commands", "anchorft.cli", "anchorft.demo", "anchorft.__main__")
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in import_graph().items()
        if not m.startswith(above)
        for t in ts
        if t == "anchorft.studies" or t.startswith("anchorft.studies.")
    )
    assert not bad, bad
