"""DAPO-Math-17k (the RL data of the RPSFT paper's release, hub set `wh-zhu/dapo`) -> RL prompts for `anchorft rl`.

Rows come in the VERL layout of DAPO-Math-17k (`prompt`: chat messages whose user message wraps the
problem in DAPO's "Answer:" instruction, `reward_model.ground_truth`, `data_source`, `extra_info`) or
flat (`prompt` / `problem` / `question` text with `answer` / `solution` / `ground_truth`). Each kept
row becomes one line in the paper's benchmark format: the system prompt asks for a boxed answer (the
SFT data's and the reward's convention) and the user message is the bare problem (`--prompt-style
boxed`, the default), or the row's own messages (`--prompt-style original`). Problems seen before (the
hub's DAPO-Math-17k repeats each problem many times) and rows without a problem or an answer are
dropped and counted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from anchorft.data.openr1 import SYSTEM_PROMPT, load_source
from anchorft.io import write_json, write_text
from anchorft.provenance import write_metrics

__all__ = ["HUB_NAME", "SYSTEM_PROMPT", "problem_text", "dapo_row", "prepare_dapo_math"]

HUB_NAME = "wh-zhu/dapo"
# DAPO-Math-17k's wrapper around each problem (the first and last sentences of its user message)
_HEAD = re.compile(r"^\s*Solve the following math problem step by step\..*?the answer to the problem\.\s*", re.S)
_TAIL = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def problem_text(prompt: Any) -> str | None:
    """The bare problem of a row's prompt (messages or text), DAPO's "Answer:" wrapper removed."""
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1] if users else None
    if not isinstance(prompt, str) or not prompt.strip():
        return None
    return _TAIL.sub("", _HEAD.sub("", prompt)).strip() or None


def _answer(row: dict) -> str | None:
    rm = row.get("reward_model")
    gold = rm.get("ground_truth") if isinstance(rm, dict) else None
    for key in ("answer", "solution", "ground_truth", "target"):
        if gold is None or gold == "":
            gold = row.get(key)
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        gold = str(gold)
    return gold.strip() if isinstance(gold, str) and gold.strip() else None


def dapo_row(row: dict, prompt_style: str = "boxed") -> dict | None:
    """One output line for a source row, or None when it has no problem or no answer."""
    raw = row.get("prompt")
    if raw is None:
        raw = row.get("problem", row.get("question"))
    problem, gold = problem_text(raw), _answer(row)
    if problem is None or gold is None:
        return None
    if prompt_style == "original" and isinstance(raw, list):
        messages = [{"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in raw]
    elif prompt_style == "original":
        messages = [{"role": "user", "content": raw}]
    else:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]
    return {
        "prompt": messages,
        "reward_model": {"ground_truth": gold, "style": "rule"},
        "data_source": str(row.get("data_source") or "math_dapo"),
        "problem": problem,
    }


def prepare_dapo_math(
    out_dir: str | Path,
    *,
    source: str = HUB_NAME,
    split: str = "train",
    limit: int | None = None,
    prompt_style: str = "boxed",
    dedupe: bool = True,
) -> dict:
    """Write out_dir/{train.jsonl, config.json, metrics.json}; returns the metrics."""
    if prompt_style not in ("boxed", "original"):
        raise ValueError(f"prompt_style must be 'boxed' or 'original', got {prompt_style!r}")
    ds = load_source(source, subset=None, split=split, limit=limit)
    seen: set[str] = set()
    lines: list[str] = []
    stats = {"rows_read": 0, "kept": 0, "dropped_no_problem_or_answer": 0, "dropped_duplicate": 0}
    for row in ds:
        stats["rows_read"] += 1
        item = dapo_row(dict(row), prompt_style)
        if item is None:
            stats["dropped_no_problem_or_answer"] += 1
            continue
        if dedupe and item["problem"] in seen:
            stats["dropped_duplicate"] += 1
            continue
        seen.add(item["problem"])
        lines.append(json.dumps(item, ensure_ascii=False) + "\n")
        stats["kept"] += 1
    if not lines:
        raise ValueError(f"{source}: no row with a problem and an answer")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "train.jsonl", "".join(lines))
    config = dict(source=source, split=split, limit=limit, prompt_style=prompt_style, dedupe=dedupe)
    write_json(out / "config.json", config, indent=2)
    write_metrics(out / "metrics.json", stats, indent=2)
    return stats
