"""The one generate -> grade -> metrics step: prompts and a checker in, greedy accuracy, Avg@k and Pass@k out.

Generation is `anchorft.eval.generate.generate` (batched, explicit torch.Generator), metrics are
`anchorft.eval.metrics`. The testbed (`anchorft.toy.evaluate`, its RL stage) scores through it with its
skills' exact checkers; a benchmark's answer checker works the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from anchorft.eval.generate import generate
from anchorft.eval.metrics import accuracy, avg_at_k, mean_pass_at_k

__all__ = ["evaluate_prompts"]


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
    out: dict[str, float] = {}
    kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size)
    if greedy:
        comps = generate(model, tokenizer, prompts, n=1, temperature=0.0, **kw)
        out["greedy"] = accuracy([check(i, c[0]) for i, c in enumerate(comps)])
    if n_samples:
        comps = generate(
            model, tokenizer, prompts, n=n_samples, temperature=temperature, top_p=top_p, generator=generator, **kw
        )
        correct = [[check(i, c) for c in cs] for i, cs in enumerate(comps)]
        out["avg@k"] = avg_at_k(correct)
        out["pass@k"] = mean_pass_at_k(correct, k)
    return out
