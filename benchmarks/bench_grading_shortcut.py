"""How often the string shortcut of `math_equal` decides, on the paper's math files.

    .venv/bin/python benchmarks/bench_grading_shortcut.py [--root DIR] [--out shortcut.json]

`math_equal(gold, answer)` returns True for identical (stripped) strings without parsing; otherwise it
is `parsed_equal`, math-verify alone. For each math file this counts
- golds that math-verify parses as equal to themselves (`parsed_equal(gold, gold)`): on the others
  the shortcut changes the verdict when a response writes the gold exactly;
- where the file has reference solutions (`solution`): how many last boxes equal the gold string
  (the shortcut decides those) and how many math-verify alone grades correct.
Files whose gold is not a single string (OlympiadBench's lists) are reported as skipped.
Prints one JSON object; exits 0 with a note when the files are absent.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

FILES = ["id/math500.jsonl", "id/aime-24.jsonl", "id/aime-25.jsonl", "id/amc.jsonl", "id/minerva.jsonl"]
SKIPPED = ["id/olympiadBench.jsonl"]


def measure(root: Path) -> dict:
    from anchorft.eval.answers import last_boxed, parsed_equal
    from anchorft.eval.benchmarks import load_bench

    out: dict = {"root_files": FILES, "skipped": {f: "gold is a list of answers" for f in SKIPPED}, "files": {}}
    for rel in FILES:
        items = load_bench(root / rel).items
        row = {"items": len(items), "gold_parses_equal_to_itself": sum(parsed_equal(it.gold, it.gold) for it in items)}
        sols = [(it.gold, last_boxed(it.solution) or "") for it in items if it.solution]
        if sols:
            row["with_solution"] = len(sols)
            row["solution_box_equals_gold_string"] = sum(g == a for g, a in sols)
            row["solution_box_parsed_equal"] = sum(parsed_equal(g, a) for g, a in sols)
            row["solution_box_string_or_parsed"] = sum(g == a or parsed_equal(g, a) for g, a in sols)
        out["files"][rel] = row
    return out


def main() -> None:
    from anchorft.eval.benchmarks import benchmarks_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=None, help="benchmark folder (default: anchorft's benchmarks_dir())")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    root = args.root or benchmarks_dir()
    if not (root / FILES[0]).is_file():
        print(json.dumps({"skipped": f"benchmark files not found under {root}"}))
        return
    t0 = time.perf_counter()
    res = measure(root)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
