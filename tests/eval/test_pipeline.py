"""generate -> grade -> metrics: the metrics of fixed completions against a count done by hand."""

from __future__ import annotations

from math import comb

import pytest

from anchorft.eval import pipeline


def test_metrics_of_fixed_completions(monkeypatch):
    samples = [["4", "5", "4"], ["x", "x", "7"]]  # prompt 0: 2 of 3 right, prompt 1: 1 of 3
    greedy = [["4"], ["x"]]

    def fake_generate(model, tok, prompts, n, temperature, **kw):
        return greedy if temperature == 0.0 else samples

    monkeypatch.setattr(pipeline, "generate", fake_generate)
    gold = ["4", "7"]
    out = pipeline.evaluate_prompts(None, None, ["p0", "p1"], lambda i, c: c == gold[i], n_samples=3, k=2)
    assert out["greedy"] == 0.5
    assert out["avg@k"] == pytest.approx(3 / 6)
    # unbiased pass@k per prompt: 1 - C(n - c, k) / C(n, k)
    want = [1 - comb(3 - c, 2) / comb(3, 2) for c in (2, 1)]
    assert out["pass@k"] == pytest.approx(sum(want) / 2)
    with pytest.raises(ValueError, match="k"):
        pipeline.evaluate_prompts(None, None, ["p"], lambda i, c: True, n_samples=1, k=2)


def test_samples_then_greedy_and_only_the_samples_draw(monkeypatch):
    calls = []

    def fake_generate(model, tok, prompts, n, temperature, **kw):
        calls.append((n, temperature, kw.get("top_p"), kw.get("generator")))
        if temperature == 0.0:
            return [[f"g{i}"] for i in range(len(prompts))]
        return [[f"s{i}{j}" for j in range(n)] for i in range(len(prompts))]

    monkeypatch.setattr(pipeline, "generate", fake_generate)
    right = {"s00", "s01", "g1"}
    gen = object()
    out = pipeline.evaluate_prompts(
        None, None, ["p0", "p1"], lambda i, c: c in right, n_samples=2, k=1, temperature=0.5, generator=gen
    )
    assert calls == [(2, 0.5, 0.95, gen), (1, 0.0, None, None)]
    assert out == {"greedy": 0.5, "avg@k": 0.5, "pass@k": 0.5}
    calls.clear()
    assert pipeline.evaluate_prompts(None, None, ["p0"], lambda i, c: True) == {"greedy": 1.0}
    assert calls == [(1, 0.0, None, None)]
