"""Prompt sets for hidden-state drift and Fisher data, read from generic JSONL files.

Each line is a JSON object with `prompt` (a string, or a list of chat messages {"role", "content"} as in
the RPSFT release's benchmark files) and optionally a completion: `completion`, `response`, `answer` or
`solution` (a string). Chat prompts are rendered with the tokenizer's chat template when it has one and
as "role: content" lines otherwise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

__all__ = ["PromptItem", "load_prompts", "render", "encode_batch"]

_COMPLETION_KEYS = ("completion", "response", "answer", "solution")


@dataclass(frozen=True)
class PromptItem:
    prompt: str | list[dict]
    completion: str | None = None


def load_prompts(path: str | os.PathLike, limit: int | None = None) -> list[PromptItem]:
    """The first `limit` items of a JSONL file; ValueError naming the line and field on bad input."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"prompt file not found: {p}")
    items: list[PromptItem] = []
    with p.open() as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{i}: not JSON ({e.msg})") from None
            if not isinstance(row, dict) or "prompt" not in row:
                raise ValueError(f"{p}:{i}: field 'prompt' is missing")
            prompt = row["prompt"]
            if isinstance(prompt, list):
                if not all(isinstance(m, dict) and "content" in m for m in prompt):
                    raise ValueError(f"{p}:{i}: field 'prompt' is a list but not of chat messages with 'content'")
            elif not isinstance(prompt, str):
                raise ValueError(f"{p}:{i}: field 'prompt' must be a string or a list of messages")
            completion = next((row[k] for k in _COMPLETION_KEYS if isinstance(row.get(k), str)), None)
            items.append(PromptItem(prompt, completion))
            if limit is not None and len(items) >= limit:
                break
    if not items:
        raise ValueError(f"{p}: no prompts")
    return items


def render(tokenizer, prompt: str | list[dict]) -> str:
    """The prompt as text: chat template (with generation prompt) if the tokenizer has one."""
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return "\n".join(f"{m.get('role', 'user')}: {m['content']}" for m in prompt) + "\nassistant: "


def encode_batch(
    tokenizer, items: list[PromptItem], max_length: int, with_completion: bool
) -> dict[str, torch.Tensor]:
    """Right-padded input_ids / attention_mask (and labels: completion tokens, or all tokens if none)."""
    ids, labels = [], []
    for it in items:
        p_ids = tokenizer(render(tokenizer, it.prompt), add_special_tokens=True)["input_ids"]
        c_ids = []
        if with_completion and it.completion is not None:
            c_ids = tokenizer(it.completion, add_special_tokens=False)["input_ids"]
        seq = (p_ids + c_ids)[:max_length]
        ids.append(torch.tensor(seq, dtype=torch.long))
        labels.append(torch.tensor(([-100] * len(p_ids) + c_ids)[:max_length] if c_ids else seq, dtype=torch.long))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return {
        "input_ids": pad_sequence(ids, batch_first=True, padding_value=pad),
        "attention_mask": pad_sequence([torch.ones_like(s) for s in ids], batch_first=True),
        "labels": pad_sequence(labels, batch_first=True, padding_value=-100),
    }
