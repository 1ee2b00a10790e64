"""Prompts against the model's context: an error when a prompt does not fit, a warning when its answer may not."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

__all__ = ["context_length", "check_prompt_lengths"]

logger = logging.getLogger(__name__)
_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(model_dir: str | Path) -> int | None:
    """The model's context in tokens from its config.json (max_position_embeddings or an equivalent), or None."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    for src in (cfg, cfg.get("text_config") or {}):
        for key in _KEYS:
            if isinstance(src.get(key), int) and src[key] > 0:
                return src[key]
    return None


def check_prompt_lengths(
    tokenizer,
    prompts_by_bench: Sequence[Sequence[str]],
    names: Sequence[str],
    context: int | None,
    max_new_tokens: int,
) -> list[int]:
    """Longest prompt (tokens) per benchmark. A prompt of `context` tokens or more is a ValueError naming the
    benchmark and item (it would run silently past the positions the model was trained on); a prompt plus
    `max_new_tokens` past the context is a warning."""
    longest = []
    for name, prompts in zip(names, prompts_by_bench):
        lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]] or [0]
        i = max(range(len(lengths)), key=lengths.__getitem__)
        longest.append(lengths[i])
        if context is None:
            continue
        if lengths[i] >= context:
            n_long = sum(x >= context for x in lengths)
            raise ValueError(
                f"--bench {name}: item {i} has a prompt of {lengths[i]} tokens, the model's context is {context} "
                f"({n_long} prompt(s) do not fit); use a model with a longer context or shorter prompts"
            )
        if lengths[i] + max_new_tokens > context:
            logger.warning(
                "--bench %s: prompts up to %d tokens + --max-new-tokens %d exceed the model's context of %d; "
                "answers longer than %d tokens are cut",
                name,
                lengths[i],
                max_new_tokens,
                context,
                context - lengths[i],
            )
    return longest
