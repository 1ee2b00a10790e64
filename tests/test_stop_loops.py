"""Every long loop of the library has a safe point (`anchorft.stop`), found from the source.

A signal's raise can be swallowed where it lands (library code with a bare `except:`); the loop then runs to its
end unless it checks the record itself. This test reads every module of src/anchorft and finds the loops that run
for longer than a second by what they are, not by a list: a loop over a progress bar (`tqdm(...)` or a name bound
to one), a loop that updates such a bar, a loop that calls `.backward()`, a `range` over steps or a `while` on a
step count. Each must call `stop.check`, `stop.check_alone` or `stop.agreed` inside its body, or say on its own
line why it need not (`# stop: ...`, for a loop whose body is made of calls that check). An ODE solved by scipy
runs its loop inside `solve_ivp`: its right-hand side must check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "anchorft"
CHECKS = {"check", "check_alone", "agreed"}
EXEMPT = "# stop:"
COUNTS = ("step", "sample")  # a range or a while on one of these counts is a long loop


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _is_tqdm(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and (
        (isinstance(call.func, ast.Name) and call.func.id == "tqdm")
        or (isinstance(call.func, ast.Attribute) and call.func.attr == "tqdm")
    )


def _checks(node: ast.AST) -> bool:
    return any(
        isinstance(c.func, ast.Attribute)
        and c.func.attr in CHECKS
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id == "stop"
        for c in _calls(node)
    )


def _own_nodes(fn: ast.AST):
    """The nodes of `fn`'s body, not those of functions defined inside it (they are judged on their own)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _why_long(loop: ast.For | ast.While, bars: set[str], source: str) -> str | None:
    if isinstance(loop, ast.For):
        it = loop.iter
        if _is_tqdm(it) or (isinstance(it, ast.Name) and it.id in bars):
            return "a loop over a progress bar"
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            if any(w in ast.get_source_segment(source, it).lower() for w in COUNTS):
                return "a range over steps or samples"
    elif any(w in ast.get_source_segment(source, loop.test).lower() for w in COUNTS):
        return "a while on a step or sample count"
    for c in _calls(loop):
        f = c.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "update"
            and isinstance(f.value, ast.Name)
            and f.value.id in bars
        ):
            return "a loop that moves a progress bar"
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            return "a loop of backward passes"
    return None


def find_loops(source: str, path: str) -> list[dict]:
    """Every long loop of one module's `source`: {"where", "why", "checked", "exempt"}."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in functions:
        own = list(_own_nodes(fn))
        bars = {
            t.id
            for n in own
            if isinstance(n, ast.Assign) and _is_tqdm(n.value)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for loop in own:
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            why = _why_long(loop, bars, source)
            if why is None:
                continue
            found.append(
                {
                    "where": f"{path}:{loop.lineno} ({fn.name})",
                    "why": why,
                    "checked": _checks(loop),
                    "exempt": EXEMPT in lines[loop.lineno - 1],
                }
            )
    if "solve_ivp(" in source:  # the ODE's loop is scipy's: a right-hand side (a __call__ here) must check
        rhs = [f for f in functions if f.name == "__call__"]
        found.append(
            {
                "where": f"{path} (solve_ivp's right-hand side)",
                "why": "an ODE integrated by scipy",
                "checked": any(_checks(f) for f in rhs),
                "exempt": False,
            }
        )
    return found


def all_loops() -> list[dict]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        out += find_loops(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    return out


def test_every_long_loop_has_a_safe_point():
    loops = all_loops()
    print("\n".join(f"{'ok    ' if l['checked'] else 'exempt' if l['exempt'] else 'NONE  '} {l['where']}: {l['why']}"
                    for l in loops))  # fmt: skip
    missing = [l["where"] for l in loops if not l["checked"] and not l["exempt"]]
    assert not missing, f"loops with no stop.check(): {missing}"
    # the finder finds what it must (a finder that finds nothing would pass): the loops named in the issue
    wheres = " ".join(l["where"] for l in loops)
    for name in ("toy/pretrain.py", "(run)", "(train_weak)", "w2s/meanfield.py (solve_ivp", "(label_mean)",
                 "analysis/fisher.py", "analysis/drift.py", "analysis/run.py", "rpsft/calibration.py",
                 "rpsft/anchor.py", "eval/hf_backend.py", "studies/grid.py"):  # fmt: skip
        assert name in wheres, name
    assert len(loops) >= 14


def test_exemptions_say_why():
    for path in sorted(SRC.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if EXEMPT in line:
                assert len(line.split(EXEMPT, 1)[1].strip()) > 10, f"{path}: {line.strip()}"


@pytest.mark.parametrize(
    "module, line",
    [
        ("toy/pretrain.py", "        stop.check()  # a safe point per step"),
        ("w2s/dynamics.py", "            stop.check()  # a safe point per step (anchorft.stop; 0.1"),
        ("w2s/meanfield.py", "        stop.check()  # the ODE's loop runs inside solve_ivp"),
        ("analysis/fisher.py", "        stop.check_alone()  # a safe point per example"),
    ],
)
def test_removing_a_safe_point_fails_the_finder(module, line):
    """The finder's own check: the module with one loop's check taken out has a loop with none."""
    source = (SRC / module).read_text(encoding="utf-8")
    kept = [ln for ln in source.splitlines() if not ln.startswith(line)]
    assert len(kept) == len(source.splitlines()) - 1, "the line to remove is not in the module"
    before = [l for l in find_loops(source, module) if not l["checked"] and not l["exempt"]]
    after = [l for l in find_loops("\n".join(kept), module) if not l["checked"] and not l["exempt"]]
    assert not before and after
