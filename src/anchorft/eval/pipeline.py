"""The one generate -> grade -> metrics step: prompts and a checker in, greedy accuracy, Avg@k and Pass@k out.

`evaluate_prompts` samples with `anchorft.eval.hf_backend.generate` (the one decoding loop, fixed batches, one
explicit torch.Generator), grades each completion with the caller's checker and returns the metrics; the testbed
(`anchorft.toy.evaluate`, its RL stage) scores through it with its skills' exact checkers. The paper's files
go through `anchorft.eval.runner` instead (its scoring, `eval.benchmarks`, shares `prompt_metrics`). Metrics
are `anchorft.eval.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from anchorft.eval.hf_backend import generate
from anchorft.eval.metrics import accuracy, avg_at_k, mean_pass_at_k

__all__ = ["prompt_metrics", "evaluate_prompts"]


def prompt_metrics(correct: Sequence[Sequence[bool]] | None, k: int, greedy_correct: Sequence[bool] | None) -> dict:
    """ "greedy" (accuracy of the greedy pass) when it ran; with samples, "avg@k" (mean correctness over all
    samples) and "pass@k" (the unbiased estimator of Chen et al. 2021, eq. 1, mean over prompts)."""
    out: dict[str, float] = {}
    if greedy_correct is not None:
        out["greedy"] = accuracy(greedy_correct)
    if correct is not None:
        out["avg@k"] = avg_at_k(correct)
        out["pass@k"] = mean_pass_at_k(correct, k)
    return out


def evaluate_prompts(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[str],
    check: Callable[[int, str], bool],
    *,
    greedy: bool = True,
    n_samples: int = 0,
    k: int = 1,
    temperature: float = 0.7,
    top_p: float = 0.95,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    per_item: bool = False,
) -> dict:
    """Score `model` on `prompts`; `check(i, completion)` says whether completion answers prompt i.

    Returns "greedy" (accuracy of greedy decoding) when `greedy`, and with `n_samples` >= k > 0
    "avg@k" (mean correctness over all samples) and "pass@k" (unbiased estimator, Chen et al. 2021). With
    `per_item`, also "per_item": {"greedy": [0 or 1 per prompt], "correct": [correct samples per prompt]} (each
    present when its pass ran), the scores a paired comparison resamples.
    """
    if n_samples and not 1 <= k <= n_samples:
        raise ValueError(f"k: need 1 <= k <= n_samples, got k={k}, n_samples={n_samples}")
    kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size)
    correct = greedy_correct = None
    if n_samples:  # the samples first, then the greedy pass (which draws nothing from `generator`)
        samples = generate(
            model, tokenizer, prompts, n=n_samples, temperature=temperature, top_p=top_p, generator=generator, **kw
        )
        correct = [[check(i, c) for c in cs] for i, cs in enumerate(samples)]
    if greedy:
        completions = generate(model, tokenizer, prompts, n=1, temperature=0.0, **kw)
        greedy_correct = [check(i, cs[0]) for i, cs in enumerate(completions)]
    out = prompt_metrics(correct, k, greedy_correct)
    if per_item:
        out["per_item"] = {}
        if greedy_correct is not None:
            out["per_item"]["greedy"] = [int(c) for c in greedy_correct]
        if correct is not None:
            out["per_item"]["correct"] = [int(sum(cs)) for cs in correct]
    return out
