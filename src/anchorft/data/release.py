"""The RPSFT release's fine-tuning set: `wh-zhu/train_openr1_4k`, converted as the release converts it.

The release's conversion script (`scripts/data/prepare_openr1_sft_json.py`), reimplemented from its behaviour;
docs/recipes.md (section 1) gives the set's verl/PSFT layout (`prompt`, `target`, `data_source`, `ability`,
`reward_model`, `extra_info`, read off the script) and the rules:

- question: the first non-empty of the columns `prompt`, `question`, `problem`, `input`; a message list gives
  its last user turn (role or "from" of "user" / "human"; the last message if there is none);
- trace: the first non-empty of `target`, `answer`, `solution`, `demonstration`, `output`; a list gives its
  first message;
- a message's text is its `content` (or `value`); a content list is the text of its parts joined by newlines;
- both are stripped; a row with an empty question or trace is skipped (counted); every other row is kept,
  in the source's order, with no sampling and no answer check.

The release adds the system prompt "Please reason step by step, and put your final answer within \\boxed{}."
at training time (`use_cot True`) and trains on the assistant turn only; here the system prompt is written into each
example, in TRL's conversational prompt/completion form, rendered with each model's own chat template unless
`--chat_format release` (the release's own tokens: `anchorft.rpsft.release_format`, docs/recipes.md).

A source in OpenR1-Math-220k's own layout (`problem`, `answer`, `generations`/`messages`, no `target`) is
refused: the release's order would train on its short `answer` column instead of a trace. Use the
verifying sampler (`anchorft data openr1-math --sampler verified`) for that source. So is a source whose picked
trace column is much shorter than a later one it passes over (`answer` before `solution`: `check_trace_layout`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from anchorft.data.openr1 import load_source, to_conversation, write_training_set

__all__ = [
    "RELEASE_HUB_NAME",
    "QUESTION_COLUMNS",
    "TRACE_COLUMNS",
    "release_question",
    "release_trace",
    "check_release_columns",
    "check_trace_layout",
    "convert_release_rows",
    "prepare_release_set",
]

RELEASE_HUB_NAME = "wh-zhu/train_openr1_4k"
QUESTION_COLUMNS = ("prompt", "question", "problem", "input")
TRACE_COLUMNS = ("target", "answer", "solution", "demonstration", "output")
_OPENR1_RAW = ("generations", "messages")
_LONGER, _MARGIN, _SHORT = 4, 50, 20  # `check_trace_layout`: a passed-over column this much longer; a short median

logger = logging.getLogger(__name__)


def _text(message: Any) -> str:
    """A message's text: `content` (or `value`) of a dict, text parts of a content list joined by newlines."""
    if isinstance(message, dict):
        content = message.get("content", message.get("value", ""))
        if isinstance(content, list):
            return "\n".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content)
        return "" if content is None else str(content)
    return "" if message is None else str(message)


def _first_present(row: dict[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        value = row.get(key)
        if value is not None and not (isinstance(value, str) and value == ""):
            return value
    return None


def release_question(row: dict[str, Any]) -> str:
    """The problem text of a row, as the release's conversion picks it (stripped)."""
    value = _first_present(row, QUESTION_COLUMNS)
    if isinstance(value, (list, tuple)):
        users = [m for m in value if not isinstance(m, dict) or m.get("role", m.get("from")) in ("user", "human")]
        pick = users[-1] if users else (value[-1] if value else "")
        return _text(pick).strip()
    return _text(value).strip()


def release_trace(row: dict[str, Any]) -> str:
    """The trace (assistant text) of a row, as the release's conversion picks it (stripped)."""
    value = _first_present(row, TRACE_COLUMNS)
    if isinstance(value, (list, tuple)):
        return _text(value[0] if value else "").strip()
    return _text(value).strip()


def check_release_columns(column_names: Iterable[str], source: str = "dataset") -> None:
    """One-line ValueError unless the source has a question column and a trace column of the release's schema."""
    cols = set(column_names)
    if not cols & set(QUESTION_COLUMNS) or not cols & set(TRACE_COLUMNS):
        raise ValueError(
            f"{source}: not in the schema of {RELEASE_HUB_NAME} (needs one of {list(QUESTION_COLUMNS)} and one of "
            f"{list(TRACE_COLUMNS)}; columns present: {sorted(cols)})"
        )
    if "target" not in cols and cols & set(_OPENR1_RAW):
        raise ValueError(
            f"{source}: this is OpenR1-Math-220k's own layout ({sorted(cols & set(_OPENR1_RAW))}, no 'target'); the "
            "release's conversion would train on its short 'answer' column: use --sampler verified"
        )


def check_trace_layout(rows: Iterable[dict[str, Any]], source: str = "dataset") -> None:
    """The completions the release's order would write, checked against the columns it passes over: where a later
    trace column (`solution` after `answer`) holds a text at least `_LONGER` times and `_MARGIN` characters longer
    than the picked one in a tenth of the rows or more, a one-line ValueError naming both columns (the completions
    would be the short answers, not the solutions); completions whose median is under `_SHORT` characters are
    trained on as given, with a warning."""
    passed: dict[tuple[str, str], list[tuple[int, int]]] = {}
    lengths: list[int] = []
    for row in rows:
        key = next((k for k in TRACE_COLUMNS if _first_present(row, (k,)) is not None), None)
        if key is None or not release_question(row):
            continue
        picked = len(release_trace(row))
        if not picked:
            continue
        lengths.append(picked)
        for other in TRACE_COLUMNS[TRACE_COLUMNS.index(key) + 1 :]:
            alt = len(release_trace({other: row.get(other)}))
            if alt >= _LONGER * picked and alt - picked >= _MARGIN:
                passed.setdefault((key, other), []).append((picked, alt))
    if not lengths:
        return
    worst = max(passed.items(), key=lambda kv: len(kv[1]), default=None)
    if worst is not None and len(worst[1]) * 10 >= len(lengths):
        (key, other), pairs = worst
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        raise ValueError(
            f"{source}: the release's conversion takes each completion from {key!r} (the first of "
            f"{list(TRACE_COLUMNS)} present) and passes over {other!r}, whose text is at least {_LONGER} times longer "
            f"in {len(pairs)} of {len(lengths)} rows (median {med([a for _, a in pairs])} against "
            f"{med([p for p, _ in pairs])} characters): rename {other!r} to 'target' to train on it"
        )
    median = sorted(lengths)[len(lengths) // 2]
    if median < _SHORT:
        logger.warning(
            f"{source}: the completions are short (median {median} characters, from {list(TRACE_COLUMNS)}): they are "
            "written as given; a reasoning set's completions are worked solutions ending in \\boxed{}"
        )


def convert_release_rows(
    rows: Iterable[dict[str, Any]], fmt: str = "prompt-completion"
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Convert rows in order; returns (examples, {"rows", "written", "skipped"})."""
    out, n = [], 0
    for row in rows:
        n += 1
        question, trace = release_question(row), release_trace(row)
        if not question or not trace:
            continue
        example = to_conversation(question, trace, fmt)
        reward = row.get("reward_model")
        if isinstance(reward, dict) and reward.get("ground_truth") not in (None, ""):
            example["answer"] = str(reward["ground_truth"])
        out.append(example)
    return out, {"rows": n, "written": len(out), "skipped": n - len(out)}


def prepare_release_set(
    out_dir: str | os.PathLike,
    source: str = RELEASE_HUB_NAME,
    limit: int | None = None,
    fmt: str = "prompt-completion",
    split: str = "train",
) -> dict[str, Any]:
    """Write `out_dir/train.jsonl` (the release's set in TRL's conversational form), `config.json`,
    `metrics.json` (rows read, written, skipped, sha256 of train.jsonl) and `lengths.png`."""
    ds = load_source(source, subset="default", split=split, limit=limit)
    check_release_columns(ds.column_names, source)
    check_trace_layout(ds, source)
    rows, counts = convert_release_rows(ds, fmt)
    if not rows:
        raise ValueError(f"{source}: none of its {counts['rows']} rows has both a question and a trace")
    config = {"sampler": "release", "source": source, "split": split, "limit": limit, "format": fmt}
    return write_training_set(out_dir, rows, config, counts, f"{source}: {len(rows)} traces")
