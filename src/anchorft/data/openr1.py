"""OpenR1-Math -> the RPSFT paper's fine-tuning set (Jin et al., arXiv:2605.10973, Sec. 5.1).

The paper fine-tunes on a ~4k-example subset of OpenR1-Math (`open-r1/OpenR1-Math-220k`, config `default`,
about 94k problems) with the system prompt "Please reason step by step, and put your final answer within
\\boxed{}.". Each source row holds a `problem`, its reference `answer`, the reference `solution` (NuminaMath),
and DeepSeek-R1 traces: `messages` (the user turn and one assistant trace) and `generations` (all traces,
with `correctness_math_verify`, `is_reasoning_complete`, `finish_reasons`, ...).

We keep a row only if one of its traces verifies *by our own check*: math-verify of the trace's last
`\\boxed{...}` against `answer` (the dataset's own correctness flags are not trusted). Candidate traces, in
order: the assistant turn of `messages`, then each of `generations`; the first that verifies is used.
Rows are visited in a seeded random order until `size` rows are kept, so the subset is deterministic for a
(source, seed, size) and only about `size / acceptance` rows are ever verified.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from anchorft import stop
from anchorft.eval.answers import MathChecker, last_boxed, math_equal
from anchorft.io import pyplot, save_figure, write_json, write_text
from anchorft.provenance import write_metrics

__all__ = [
    "SYSTEM_PROMPT",
    "HUB_NAME",
    "FORMATS",
    "answer_verifies",
    "candidate_traces",
    "to_conversation",
    "check_columns",
    "load_source",
    "select_verified",
    "prepare_openr1_math",
    "write_training_set",
]

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
HUB_NAME = "open-r1/OpenR1-Math-220k"
FORMATS = ("prompt-completion", "messages")
REQUIRED_COLUMNS = ("problem", "answer")
TRACE_COLUMNS = ("messages", "generations")


def answer_verifies(trace: str, answer: str, check: Callable[[str, str], bool] | None = None) -> bool | None:
    """math-verify of the trace's last `\\boxed{}` against the gold `answer` (`anchorft.eval.answers`).

    `check(gold, boxed) -> bool` defaults to `math_equal` (no timeout); `prepare_openr1_math` passes a
    `MathChecker` with a per-check timeout. Returns None when the trace has no `\\boxed{}`.
    """
    pred = last_boxed(trace)
    if not pred:
        return None
    return bool((check or math_equal)(str(answer), pred))


def candidate_traces(row: dict[str, Any]) -> list[str]:
    """The row's traces in the order they are tried: the assistant turn of `messages`, then `generations`."""
    out: list[str] = []
    for msg in row.get("messages") or []:
        if isinstance(msg, dict) and msg.get("role") == "assistant" and msg.get("content"):
            out.append(msg["content"])
    for gen in row.get("generations") or []:
        if isinstance(gen, str) and gen and gen not in out:
            out.append(gen)
    return out


def to_conversation(problem: str, trace: str, fmt: str = "prompt-completion") -> dict[str, list[dict[str, str]]]:
    """One example in TRL's conversational form with the paper's system prompt."""
    system = {"role": "system", "content": SYSTEM_PROMPT}
    user = {"role": "user", "content": problem}
    assistant = {"role": "assistant", "content": trace}
    if fmt == "prompt-completion":
        return {"prompt": [system, user], "completion": [assistant]}
    if fmt == "messages":
        return {"messages": [system, user, assistant]}
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def check_columns(column_names: Iterable[str], source: str = "dataset") -> None:
    """Clear error if the source lacks OpenR1-Math's needed columns."""
    cols = set(column_names)
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if not any(c in cols for c in TRACE_COLUMNS):
        missing.append(" or ".join(TRACE_COLUMNS))
    if missing:
        raise ValueError(
            f"{source}: missing column(s) {missing}; OpenR1-Math rows need 'problem', 'answer' and the traces in "
            f"'messages' and/or 'generations' (columns present: {sorted(cols)})"
        )


def load_source(source: str = HUB_NAME, subset: str = "default", split: str = "train", limit: int | None = None):
    """Load OpenR1-Math from the hub (`name`, config `subset`) or a local .jsonl/.json/.parquet file or folder."""
    import datasets  # lazy: loads datasets (and pyarrow)

    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    path = Path(source)
    if path.exists():
        if path.is_dir() and any((path / f).exists() for f in ("dataset_info.json", "dataset_dict.json")):
            ds = datasets.load_from_disk(str(path))
        elif path.is_dir():
            ds = datasets.load_dataset(str(path))
        else:
            suffix = path.suffix.lower()
            builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(suffix)
            if builder is None:
                raise ValueError(f"source: unsupported file type {suffix!r} ({source}); use .jsonl, .json or .parquet")
            ds = datasets.load_dataset(builder, data_files=str(path))
    elif path.suffix.lower() in (".jsonl", ".json", ".parquet") or source.startswith((".", "/")):
        raise ValueError(f"source: no such file or folder: {source}")
    else:  # a hub name; `train[:N]` avoids materialising more than needed after download
        ds = datasets.load_dataset(source, subset, split=split if limit is None else f"{split}[:{limit}]")
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"source: no split {split!r} in {source} (splits: {list(ds)})")
        ds = ds[split]
    if limit is not None and len(ds) > limit:
        ds = ds.select(range(limit))
    return ds


def _check_size_format(size: int, fmt: str) -> None:
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


@dataclass
class PrepStats:
    rows_available: int = 0
    rows_examined: int = 0
    kept: int = 0
    dropped_no_trace: int = 0
    dropped_no_boxed: int = 0
    dropped_wrong_answer: int = 0
    trace_from_messages: int = 0
    trace_from_generations: int = 0
    requested: int = 0


def select_verified(
    ds: Sequence[dict[str, Any]] | Any,
    size: int,
    seed: int,
    fmt: str = "prompt-completion",
    progress: bool = False,
    check: Callable[[str, str], bool] | None = None,
) -> tuple[list[dict[str, Any]], PrepStats]:
    """Visit rows in the order `np.random.default_rng(seed).permutation(len(ds))`; keep the first verified trace
    of each row until `size` rows are kept. Returns the examples (in visiting order) and the counts."""
    _check_size_format(size, fmt)
    stats = PrepStats(rows_available=len(ds), requested=size)
    order = np.random.default_rng(seed).permutation(len(ds))
    out: list[dict[str, Any]] = []
    bar = tqdm(total=size, desc="verified traces", unit="ex", disable=not progress)
    for idx in order:
        if len(out) >= size:
            break
        stop.check()  # a safe point per row (anchorft.stop): a row's traces are verified in math-verify's worker
        row = ds[int(idx)]
        stats.rows_examined += 1
        traces = candidate_traces(row)
        if not traces or not row.get("problem"):
            stats.dropped_no_trace += 1
            continue
        verdicts = []
        for trace in traces:
            verdicts.append(answer_verifies(trace, str(row["answer"]), check))
            if verdicts[-1]:
                break
        else:
            if all(v is None for v in verdicts):  # no trace has a \boxed{}
                stats.dropped_no_boxed += 1
            else:  # wrong, or a gold answer that math-verify cannot parse
                stats.dropped_wrong_answer += 1
            continue
        n_msg = sum(1 for m in row.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        if len(verdicts) <= n_msg:  # the trace used (the last one tried) is from `messages`
            stats.trace_from_messages += 1
        else:
            stats.trace_from_generations += 1
        example = to_conversation(row["problem"], trace, fmt)
        out.append({**example, "answer": str(row["answer"]), "uuid": str(row.get("uuid") or f"row-{int(idx)}")})
        bar.update(1)
    bar.close()
    stats.kept = len(out)
    return out, stats


def write_training_set(
    out_dir: str | os.PathLike, rows: list[dict[str, Any]], config: dict, metrics: dict, title: str
) -> dict[str, Any]:
    """Write a prepared fine-tuning set: `train.jsonl` (one example a line, keys sorted), `config.json` (with
    the system prompt), `metrics.json` (with the sha256 of train.jsonl) and `lengths.png`; returns the metrics."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    write_text(out / "train.jsonl", text)
    write_json(out / "config.json", {**config, "system_prompt": SYSTEM_PROMPT}, indent=2)
    metrics = {**metrics, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    write_metrics(out / "metrics.json", metrics, indent=2)
    lengths = [len((r["completion"] if "completion" in r else r["messages"][-1:])[0]["content"]) for r in rows]
    fig, ax = pyplot().subplots(figsize=(6, 3.5))
    ax.hist(lengths, bins=min(50, max(5, len(lengths) // 4)))
    ax.set_xlabel("trace length (characters)")
    ax.set_ylabel("examples")
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, out / "lengths.png", dpi=100)
    return metrics


def prepare_openr1_math(
    out_dir: str | os.PathLike,
    source: str = HUB_NAME,
    size: int = 4000,
    seed: int = 0,
    limit: int | None = None,
    fmt: str = "prompt-completion",
    subset: str = "default",
    split: str = "train",
    progress: bool = True,
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Write `out_dir/train.jsonl` (the paper's conversational format), `config.json`, `metrics.json` and
    `lengths.png`. `load_dataset(out_dir)` or `anchorft train --dataset_name out_dir` reads it back."""
    _check_size_format(size, fmt)  # before the source loads
    ds = load_source(source, subset=subset, split=split, limit=limit)
    check_columns(ds.column_names, source)
    with MathChecker(timeout_s=timeout_s) as checker:
        rows, stats = select_verified(ds, size=size, seed=seed, fmt=fmt, progress=progress, check=checker.check)
    if not rows:
        raise ValueError(f"no trace of the {stats.rows_examined} rows examined in {source} verifies against 'answer'")
    config = {"source": source, "subset": subset, "split": split, "size": size, "seed": seed, "limit": limit}
    config["format"] = fmt
    metrics = {**asdict(stats), "short_by": max(0, size - stats.kept), "verify_timeouts": checker.n_timeouts}
    return write_training_set(out_dir, rows, config, metrics, f"OpenR1-Math subset: {len(rows)} verified traces")
