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


def test_score_prompts_keeps_completions_answers_and_grades():
    calls = []

    def sample(prompts, n, temperature):
        calls.append((n, temperature))
        if temperature == 0.0:
            return [[f"g{i}"] for i in range(len(prompts))]
        return [[f"s{i}{j}" for j in range(n)] for i in range(len(prompts))]

    right = {"s00", "s01", "g1"}
    scored = pipeline.score_prompts(
        sample, ["p0", "p1"], lambda i, c: (c[1:], c in right), n_samples=2, k=1, temperature=0.5
    )
    assert calls == [(2, 0.5), (1, 0.0)]
    assert scored.samples == [["s00", "s01"], ["s10", "s11"]] and scored.greedy == ["g0", "g1"]
    assert scored.answers == [["00", "01"], ["10", "11"]] and scored.greedy_answers == ["0", "1"]
    assert scored.correct == [[True, True], [False, False]] and scored.greedy_correct == [False, True]
    assert scored.metrics == {"greedy": 0.5, "avg@k": 0.5, "pass@k": 0.5}
    only_greedy = pipeline.score_prompts(sample, ["p0"], lambda i, c: (None, True))
    assert only_greedy.samples is None and only_greedy.metrics == {"greedy": 1.0}
