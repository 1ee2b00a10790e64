"""Prompt files of the analysis: chat and plain prompts, completions, a bad line named."""

from __future__ import annotations

import pytest

from anchorft.analysis.prompts import load_prompts, render


def test_prompt_files(prompt_files, tokenizer, tmp_path):
    chat = load_prompts(prompt_files["chat"], limit=2)
    assert len(chat) == 2 and isinstance(chat[0].prompt, list)
    assert "user: the cat" in render(tokenizer, chat[0].prompt)
    pc = load_prompts(prompt_files["pc"])
    assert pc[0].completion is not None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: field 'prompt' is missing"):
        load_prompts(bad)
