"""Summary of a mutmut run (`make mutants`): killed / survived / other per module, and the survivors' names.

    .venv/bin/python benchmarks/mutants_summary.py ['anchorft.subspace.*' ...]

Reads mutmut's result files (mutants/src/**/*.py.meta) in the current directory; with globs, counts only
the mutants whose names match one of them (the functions `make mutants` mutates). Exits 0 with a note
when there is no mutants/ folder (no run yet).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 37: "type check"}
TIMEOUT = {36, -24, 24, 152, 255}


def status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in TIMEOUT:
        return "timeout"
    return STATUS.get(code, "suspicious")


def main(globs: list[str]) -> None:
    root = Path("mutants/src")
    if not root.is_dir():
        print("no mutants/ folder here: run `make mutants` first")
        return
    per_module: dict[str, Counter] = {}
    survivors: list[str] = []
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in sorted(codes.items()):
            if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
                continue
            module = name.split(".x_")[0].split(".xǁ")[0]
            st = status(code)
            per_module.setdefault(module, Counter())[st] += 1
            if st != "killed":
                survivors.append(f"{st}: {name}")

    def row(name: str, c: Counter) -> str:
        n, k, s = sum(c.values()), c["killed"], c["survived"]
        return f"{name:28} {n:7d} {k:7d} {s:8d} {n - k - s:6d}"

    total: Counter = Counter()
    print(f"{'module':28} {'mutants':>7} {'killed':>7} {'survived':>8} {'other':>6}")
    for module, c in per_module.items():
        total += c
        print(row(module, c))
    print(row("total", total))
    print("\n".join(survivors))


if __name__ == "__main__":
    main(sys.argv[1:])
