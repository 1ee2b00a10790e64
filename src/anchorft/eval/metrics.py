"""Evaluation metrics: Avg@k, the unbiased Pass@k estimator, accuracy.

Pass@k follows Chen et al. (2021, "Evaluating Large Language Models Trained on Code", eq. 1):
with n >= k samples of which c are correct, pass@k = 1 - C(n - c, k) / C(n, k), computed as a
numerically stable product. Avg@k is the mean correctness over samples and problems (the RPSFT
paper's Avg@k with k samples each).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["pass_at_k", "mean_pass_at_k", "avg_at_k", "accuracy"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples is correct) from c correct out of n >= k."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i)  ==  1 - C(n-c, k) / C(n, k)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    """Mean over problems of pass@k, each problem given as its list of per-sample correctness."""
    if len(correct) == 0:
        raise ValueError("no problems to score")
    return float(np.mean([pass_at_k(len(c), int(sum(c)), k) for c in correct]))


def avg_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """Mean correctness over all samples of all problems."""
    if len(correct) == 0:
        raise ValueError("no problems to score")
    return float(np.mean([np.mean(c) for c in correct]))


def accuracy(correct: Sequence[bool]) -> float:
    """Fraction correct (e.g. greedy decoding, one sample per problem)."""
    if len(correct) == 0:
        raise ValueError("no problems to score")
    return float(np.mean(np.asarray(correct, dtype=float)))
