"""The one generate -> grade -> metrics step: prompts, a sampler and a grader in, completions, grades and
greedy accuracy, Avg@k and Pass@k out.

`score_prompts` is the step itself, for any generation backend (a `Sampler`: prompts, n, temperature ->
completions) and any grader. `evaluate_prompts` runs it with `anchorft.eval.hf_backend.generate` (the one
decoding loop, fixed batches, one explicit torch.Generator) and returns the metrics; the testbed
(`anchorft.toy.evaluate`, its RL stage) scores through it with its skills' exact checkers. The paper's files
go through `anchorft.eval.runner` instead. Metrics are `anchorft.eval.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from anchorft.eval.hf_backend import generate
from anchorft.eval.metrics import accuracy, avg_at_k, mean_pass_at_k

__all__ = ["Sampler", "Scored", "hf_sampler", "prompt_metrics", "score_prompts", "evaluate_prompts"]

# (prompts, n, temperature) -> per prompt its n completions; temperature 0 is greedy decoding
Sampler = Callable[[Sequence[str], int, float], list[list[str]]]
# (prompt index, completion) -> (extracted answer or None, correct)
Grader = Callable[[int, str], tuple[str | None, bool]]


@dataclass
class Scored:
    """Per prompt: the sampled completions with their answers and correctness, and the greedy completion
    with its answer and correctness (None where that pass did not run); `metrics` as `prompt_metrics`."""

    samples: list[list[str]] | None
    answers: list[list[str | None]] | None
    correct: list[list[bool]] | None
    greedy: list[str] | None
    greedy_answers: list[str | None] | None
    greedy_correct: list[bool] | None
    metrics: dict[str, float]


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


def score_prompts(
    sample: Sampler,
    prompts: Sequence[str],
    grade: Grader,
    *,
    greedy: bool = True,
    n_samples: int = 0,
    k: int = 1,
    temperature: float = 0.7,
) -> Scored:
    """Generate `n_samples` completions per prompt at `temperature` (when n_samples > 0), then one greedy
    completion (when `greedy`), grade each with `grade(i, completion)` and compute the metrics."""
    if n_samples and not 1 <= k <= n_samples:
        raise ValueError(f"k: need 1 <= k <= n_samples, got k={k}, n_samples={n_samples}")
    samples = answers = correct = None
    g_comps = g_answers = g_correct = None
    if n_samples:
        samples = sample(prompts, n_samples, temperature)
        graded = [[grade(i, c) for c in cs] for i, cs in enumerate(samples)]
        answers = [[a for a, _ in row] for row in graded]
        correct = [[ok for _, ok in row] for row in graded]
    if greedy:
        g_comps = [c[0] for c in sample(prompts, 1, 0.0)]
        graded_g = [grade(i, c) for i, c in enumerate(g_comps)]
        g_answers = [a for a, _ in graded_g]
        g_correct = [ok for _, ok in graded_g]
    metrics = prompt_metrics(correct, k, g_correct)
    return Scored(samples, answers, correct, g_comps, g_answers, g_correct, metrics)


def hf_sampler(
    model: torch.nn.Module,
    tokenizer,
    *,
    top_p: float = 0.95,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    progress: bool = False,
    add_special_tokens: bool = True,
) -> Sampler:
    """A `Sampler` over `anchorft.eval.hf_backend.generate` (transformers model; greedy draws nothing from
    `generator`, so the order of the passes does not change the samples)."""

    def sample(prompts: Sequence[str], n: int, temperature: float) -> list[list[str]]:
        kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
        kw["add_special_tokens"] = add_special_tokens
        if temperature <= 0.0:
            return generate(model, tokenizer, prompts, n=n, temperature=0.0, **kw)
        return generate(
            model, tokenizer, prompts, n=n, temperature=temperature, top_p=top_p, generator=generator, **kw
        )

    return sample


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
) -> dict[str, float]:
    """Score `model` on `prompts`; `check(i, completion)` says whether completion answers prompt i.

    Returns "greedy" (accuracy of greedy decoding) when `greedy`, and with `n_samples` >= k > 0
    "avg@k" (mean correctness over all samples) and "pass@k" (unbiased estimator, Chen et al. 2021).
    """
    if n_samples and not 1 <= k <= n_samples:
        raise ValueError(f"k: need 1 <= k <= n_samples, got k={k}, n_samples={n_samples}")
    sample = hf_sampler(
        model, tokenizer, top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size, generator=generator
    )
    scored = score_prompts(
        sample, prompts, lambda i, c: (None, check(i, c)), greedy=greedy, n_samples=n_samples, k=k,
        temperature=temperature,
    )  # fmt: skip
    return scored.metrics
