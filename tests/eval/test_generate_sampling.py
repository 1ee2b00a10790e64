"""The sampler against an independent computation (counts over many draws)."""

import torch

from anchorft.eval.hf_backend import sample_next


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 3.0, -1.0], [2.0, 0.0, 1.0]])
    assert sample_next(logits, 0.0, 1.0, None).tolist() == [1, 0]


def test_top_p_keeps_the_nucleus_only():
    # probs 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps {0, 1}; the renormalised draw follows 0.5/0.8, 0.3/0.8
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20000, 4)
    g = torch.Generator().manual_seed(0)
    draws = sample_next(logits, 1.0, 0.7, g)
    counts = torch.bincount(draws, minlength=4).float() / draws.numel()
    assert counts[2] == 0 and counts[3] == 0
    assert abs(counts[0].item() - 0.625) < 0.02


def test_same_generator_seed_same_samples():
    logits = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))
    a = sample_next(logits, 0.7, 0.95, torch.Generator().manual_seed(5))
    b = sample_next(logits, 0.7, 0.95, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
