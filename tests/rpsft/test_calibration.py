"""The fisher:F calibration's example encoding, against the analysis' batch encoder (an independent implementation)."""

from __future__ import annotations

import pytest
import torch

from anchorft.rpsft.calibration import encode_example


@pytest.mark.parametrize("max_length", [64, 5])
def test_encode_example_matches_the_analysis_batch_encoder(tokenizer, max_length):
    from anchorft.analysis.prompts import PromptItem, encode_batch

    prompt, completion = "Q:what is 12 + 30?\nA:", "\\boxed{42}"
    ours = encode_example(tokenizer, prompt, completion, max_length)
    ref = encode_batch(tokenizer, [PromptItem(prompt, completion)], max_length, with_completion=True)
    assert set(ours) == set(ref)
    for key in ref:
        assert torch.equal(ours[key], ref[key]), key
    n_prompt = len(tokenizer(prompt)["input_ids"])
    assert (ours["labels"][0, : min(n_prompt, max_length)] == -100).all()  # the loss is on the completion only
