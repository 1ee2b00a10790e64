"""Hidden-state drift: the metrics against numpy, the per-prompt means against a loop (padding ignored)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from anchorft.analysis.drift import drift_metrics, prompt_hidden_means
from anchorft.analysis.prompts import load_prompts


def test_drift_metrics_against_numpy():
    g = np.random.default_rng(0)
    base, tuned = g.normal(size=(5, 3, 4)), g.normal(size=(5, 3, 4))
    d = drift_metrics(torch.tensor(base), torch.tensor(tuned))
    for layer in range(3):
        mu0, mu = base[:, layer].mean(0), tuned[:, layer].mean(0)
        assert d["l2"][layer] == pytest.approx(np.linalg.norm(mu - mu0))
        assert d["rel_l2"][layer] == pytest.approx(np.linalg.norm(mu - mu0) / np.linalg.norm(mu0))
        assert d["cos_dist"][layer] == pytest.approx(1 - mu @ mu0 / np.linalg.norm(mu) / np.linalg.norm(mu0))
        pc = [1 - a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(tuned[:, layer], base[:, layer])]
        assert d["prompt_cos_dist"][layer] == pytest.approx(np.mean(pc))
    zero = drift_metrics(torch.tensor(base), torch.tensor(base))
    assert max(zero["l2"]) == 0.0 and max(zero["prompt_cos_dist"]) < 1e-12


def test_hidden_means_ignore_padding(checkpoints, tokenizer, prompt_files):
    model = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)
    items = load_prompts(prompt_files["plain"])
    batched = prompt_hidden_means(model, tokenizer, items, batch_size=5)
    single = prompt_hidden_means(model, tokenizer, items, batch_size=1)
    assert batched.shape == (5, 3, 32)  # prompts, layers + embeddings, hidden
    assert torch.allclose(batched, single, atol=1e-5)
    # per-prompt loop by hand
    ids = tokenizer(items[2].prompt)["input_ids"]
    hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    assert torch.allclose(batched[2, -1], hs[-1][0].double().mean(0), atol=1e-5)
