"""The RPSFT paper's evaluation sets (JSONL, its own format): reading, grading, scoring.

One line per item: `prompt` (chat messages), `reward_model.ground_truth` (LaTeX string, number or
option letter); extra keys are ignored. An item whose user message lists "Choices:" labelled A., B., ...
(or 1., 2., ...) and whose gold is one of the labels is multiple choice (graded by label); every
other item is math (the last \\boxed{} checked with math-verify, gold first).

Metrics follow the paper: Avg@k = mean correctness over all samples of all problems, Pass@k = the
unbiased estimator of Chen et al. (2021, eq. 1) from n >= k samples, and greedy accuracy. Generation is
`anchorft.eval.runner`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_data_dir

from anchorft.eval.answers import MathChecker, checker_for, default_checker, grade, parse_choices
from anchorft.eval.ifeval import ifeval_follows
from anchorft.eval.metrics import mean_pass_at_k
from anchorft.eval.pipeline import prompt_metrics
from anchorft.io import iter_jsonl

__all__ = [
    "BenchItem",
    "Bench",
    "benchmarks_dir",
    "load_bench",
    "read_responses",
    "score_bench",
    "summarize",
    "score_file",
]


@dataclass
class BenchItem:
    index: int  # 0-based position among the file's non-blank lines (bad lines keep their place)
    line: int  # 1-based line number in the file
    messages: list[dict]
    gold: str
    choices: dict[str, str] = field(default_factory=dict)  # label -> text; {} for a math item
    solution: str | None = None
    instructions: list[dict] | None = None  # IFEval items: reward_model.instructions
    alt_golds: list[str] = field(default_factory=list)  # further answers of a list ground_truth (olympiadBench)

    @property
    def kind(self) -> str:
        return "ifeval" if self.instructions is not None else "choice" if self.choices else "math"


@dataclass
class Bench:
    path: Path
    name: str
    items: list[BenchItem]
    n_bad: int = 0
    bad: list[str] = field(default_factory=list)  # "line N: reason" for each skipped line


def benchmarks_dir() -> Path:
    """Where the paper's evaluation files are: $ANCHORFT_BENCHMARKS, else the user's data folder
    (~/.local/share/anchorft/benchmarks on Linux; platformdirs), where `anchorft data benchmarks` writes them."""
    env = os.environ.get("ANCHORFT_BENCHMARKS")
    if env:
        return Path(env)

    return Path(user_data_dir("anchorft")) / "benchmarks"


def _item(index: int, lineno: int, obj: dict) -> BenchItem:
    msgs = obj.get("prompt")
    if isinstance(msgs, str):
        msgs = [{"role": "user", "content": msgs}]
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("field 'prompt' must be a non-empty list of chat messages")
    for m in msgs:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ValueError("field 'prompt' must hold {'role': str, 'content': str} messages")
    rm = obj.get("reward_model")
    if isinstance(rm, dict) and isinstance(rm.get("instructions"), list) and rm["instructions"]:
        ok = all(isinstance(i, dict) and isinstance(i.get("instruction_id"), str) for i in rm["instructions"])
        if not ok:
            raise ValueError("field 'reward_model.instructions' must hold {'instruction_id': str, 'kwargs': {}}")
        return BenchItem(index=index, line=lineno, messages=msgs, gold="", instructions=rm["instructions"])
    golds: list[str] = []
    if isinstance(rm, dict) and isinstance(rm.get("ground_truth"), list):  # olympiadBench: a list of answers
        golds = [str(g).strip() for g in rm["ground_truth"] if isinstance(g, (str, int, float))]
        if not golds or len(golds) != len(rm["ground_truth"]):
            raise ValueError("field 'reward_model.ground_truth' is an empty list or holds non-scalars")
        rm = {**rm, "ground_truth": golds[0]}
    if not isinstance(rm, dict) or rm.get("ground_truth") is None or isinstance(rm["ground_truth"], (dict, list)):
        raise ValueError("field 'reward_model.ground_truth' is missing or not a string/number")
    gold = str(rm["ground_truth"]).strip()
    user = "\n".join(m["content"] for m in msgs if m["role"] == "user")
    choices = parse_choices(user)
    if gold not in choices:
        choices = {}
    solution = obj.get("solution") if isinstance(obj.get("solution"), str) else None
    return BenchItem(
        index=index, line=lineno, messages=msgs, gold=gold, choices=choices, solution=solution, alt_golds=golds[1:]
    )


def load_bench(path: str | Path, skip_bad: bool = False, limit: int | None = None, name: str | None = None) -> Bench:
    """Read one of the paper's JSONL files (first `limit` items). Bad lines raise, or are skipped and counted."""
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    bad: list[str] = []
    items: list[BenchItem] = []
    for _, _, item in iter_jsonl(path, skip_bad=skip_bad, bad=bad, parse=_item):
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{path}: no valid items")
    return Bench(path=path, name=name or path.stem, items=items, n_bad=len(bad), bad=bad)


def read_responses(path: str | Path, skip_bad: bool = False) -> tuple[dict[int, dict], list[str]]:
    """Responses produced elsewhere: one line per item, {"index": i, "responses": [str, ...]} and
    optionally "greedy": str. Returns ({index: record}, bad lines)."""
    bad: list[str] = []
    out: dict[int, dict] = {}

    def check(_: int, __: int, obj: dict) -> dict:
        idx = obj.get("index")
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            raise ValueError("field 'index' must be a non-negative integer")
        resp = obj.get("responses")
        if not isinstance(resp, list) or not resp or not all(isinstance(r, str) for r in resp):
            raise ValueError("field 'responses' must be a non-empty list of strings")
        if "greedy" in obj and not isinstance(obj["greedy"], str):
            raise ValueError("field 'greedy' must be a string")
        if idx in out:
            raise ValueError(f"duplicate index {idx}")
        return obj

    for _, _, obj in iter_jsonl(path, skip_bad=skip_bad, bad=bad, parse=check):
        out[obj["index"]] = obj
    return out, bad


def _grade_item(it: BenchItem, response: str, checker: MathChecker) -> tuple[str | None, bool]:
    """(answer, correct): IFEval items by lm-eval's loose checkers (answer: the response itself, or None
    when empty), the others by `grade`; a list of golds counts any of them."""
    if it.kind == "ifeval":
        user = "\n".join(m["content"] for m in it.messages if m["role"] == "user")
        return (response if response.strip() else None), ifeval_follows(response, it.instructions, user)[0]
    answer, ok = grade(it.gold, response, it.choices, checker)
    for g in it.alt_golds:
        if ok or answer is None:
            break
        ok = grade(g, response, it.choices, checker)[1]
    return answer, ok


def score_bench(
    bench: Bench,
    responses: dict[int, Sequence[str]],
    greedy: dict[int, str] | None = None,
    checker: MathChecker | None = None,
) -> list[dict]:
    """Grade each item's responses; one record per item present in `responses` (by item index): its responses
    with their answers and correctness (and the greedy one's)."""
    by_index = {it.index: it for it in bench.items}
    unknown = sorted(set(responses) - set(by_index))
    if unknown:
        raise ValueError(f"responses name indices not in {bench.path}: {unknown[:10]}")
    checker = checker or default_checker()
    records = []
    for idx in sorted(responses):
        it = by_index[idx]
        graded = [_grade_item(it, r, checker) for r in responses[idx]]
        rec = {
            "index": it.index,
            "kind": it.kind,
            "gold": it.gold,
            "responses": list(responses[idx]),
            "answers": [a for a, _ in graded],
            "correct": [c for _, c in graded],
            "n_correct": sum(c for _, c in graded),
        }
        if greedy is not None and idx in greedy:
            answer, ok = _grade_item(it, greedy[idx], checker)
            rec.update(greedy=greedy[idx], greedy_answer=answer, greedy_correct=ok)
        records.append(rec)
    return records


def summarize(records: Sequence[dict], k: int | None = None) -> dict:
    """Avg@k, Pass@k (unbiased; k defaults to the fewest samples of any item), greedy accuracy."""
    if not records:
        raise ValueError("no records to summarize")
    correct = [r["correct"] for r in records]
    n_min = min(len(c) for c in correct)
    k = n_min if k is None else k
    if not 1 <= k <= n_min:
        raise ValueError(f"k must be in [1, {n_min}] (the fewest samples of any item), got {k}")
    greedy = [r["greedy_correct"] for r in records if "greedy_correct" in r]
    m = prompt_metrics(correct, k, greedy or None)
    out = {
        "n_items": len(records),
        "n_samples": n_min,
        "k": k,
        "avg@k": m["avg@k"],
        "pass@k": m["pass@k"],
        "pass@1": mean_pass_at_k(correct, 1),
        "no_answer_rate": sum(a is None for r in records for a in r["answers"]) / sum(len(c) for c in correct),
    }
    if greedy:
        out["greedy_acc"] = m["greedy"]
        out["n_greedy"] = len(greedy)
    return out


def score_file(
    bench_path: str | Path,
    responses_path: str | Path,
    k: int | None = None,
    skip_bad: bool = False,
    timeout_s: float | None = None,
) -> tuple[dict, list[dict]]:
    """`anchorft eval score`: responses produced elsewhere (`read_responses`) graded against the benchmark file:
    (metrics, per-item records). The metrics count the items without responses (`n_missing`), the malformed lines
    skipped (`skip_bad`) and math-verify's timeouts (`timeout_s` a check)."""
    bench = load_bench(bench_path, skip_bad=skip_bad)
    resp, bad = read_responses(responses_path, skip_bad=skip_bad)
    if not resp:
        raise ValueError(f"{responses_path}: no valid response lines")
    greedy = {i: r["greedy"] for i, r in resp.items() if "greedy" in r} or None
    with checker_for(timeout_s) as checker:
        records = score_bench(bench, {i: r["responses"] for i, r in resp.items()}, greedy, checker)
        metrics = summarize(records, k)
        metrics["n_timeouts"] = checker.n_timeouts
    metrics.update(
        n_missing=len(bench.items) - len(records), n_bad_bench_lines=bench.n_bad, n_bad_response_lines=len(bad)
    )
    return metrics, records
