"""Evaluation: prompts + a checker -> greedy accuracy, Avg@k and unbiased Pass@k.

`anchorft.eval.pipeline.evaluate_prompts` is the generic generate -> grade -> metrics step (any prompts,
any checker); `evaluate_toy` applies it to the testbed: ID math with sampling
(temperature 0.7, top_p 0.95, n >= k samples) and greedy decoding, OOD skills greedy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from anchorft.eval.pipeline import evaluate_prompts
from anchorft.toy import skills as sk

__all__ = [
    "EvalSettings",
    "evaluate_prompts",
    "evaluate_skills",
    "build_eval_sets",
    "evaluate_toy",
    "evaluate_greedy",
    "greedy_accuracy",
]


@dataclass
class EvalSettings:
    n_samples: int = 8  # samples per ID problem (n >= k)
    k: int = 4
    temperature: float = 0.7
    top_p: float = 0.95
    max_new_tokens: int = 16
    batch_size: int = 256
    id_items: int = 200
    ood_items: int = 100  # per skill (fewer when the split holds fewer, e.g. boolean)
    # validation: items per skill (ID and OOD) disjoint from the reported ones, scored greedily, for choosing
    # knobs (`anchorft toy report --pick`); 0 = no validation split
    val_items: int = 0

    def validate(self) -> None:
        if not 1 <= self.k <= self.n_samples:
            raise ValueError(f"k: need 1 <= k <= n_samples, got k={self.k}, n_samples={self.n_samples}")
        if self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature: must be > 0 and top_p in (0, 1]")
        if self.id_items < 1 or self.ood_items < 1:
            raise ValueError("id_items and ood_items: must be >= 1")
        if self.val_items < 0:
            raise ValueError(f"val_items: must be >= 0, got {self.val_items}")


def _skill_checker(items: list[sk.Item]) -> Callable[[int, str], bool]:
    return lambda i, completion: sk.SKILLS[items[i].skill].check(items[i], completion)


def build_eval_sets(skills: Sequence[str], n_items: int, rng: np.random.Generator) -> dict[str, list[sk.Item]]:
    """Distinct evaluation-split items per skill (never seen in pretraining or fine-tuning)."""
    return {s: sk.sample_items(s, n_items, "eval", rng, unique=True) for s in skills}


def evaluate_skills(
    model: torch.nn.Module,
    tokenizer,
    skills: Sequence[str],
    n_items: int,
    rng: np.random.Generator,
    batch_size: int = 256,
) -> dict[str, float]:
    """Greedy accuracy per skill on `n_items` evaluation-split items each."""
    sets = build_eval_sets(skills, n_items, rng)
    return {s: greedy_accuracy(model, tokenizer, items, batch_size) for s, items in sets.items()}


def greedy_accuracy(model, tokenizer, items: list[sk.Item], batch_size: int, max_new_tokens: int = 16) -> float:
    """Greedy accuracy on testbed items, each graded by its skill's exact checker."""
    return _greedy(model, tokenizer, items, batch_size, max_new_tokens)["greedy"]


def _greedy(model, tokenizer, items: list[sk.Item], batch_size: int, max_new_tokens: int) -> dict:
    """`evaluate_prompts`' greedy pass on testbed items, with the per-item scores."""
    prompts, check = [it.prompt for it in items], _skill_checker(items)
    kw = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, per_item=True)
    return evaluate_prompts(model, tokenizer, prompts, check, **kw)


def evaluate_toy(
    model: torch.nn.Module,
    tokenizer,
    eval_sets: dict[str, list[sk.Item]],
    settings: EvalSettings,
    generator: torch.Generator,
    id_skill: str = "math_hard",
    per_item: bool = False,
) -> dict:
    """The testbed's metrics: ID (`id_skill`) Avg@k, Pass@k, greedy; OOD greedy per skill and mean. With
    `per_item`, also "per_item": {skill: `evaluate_prompts`' per-item scores}, in each set's item order."""
    settings.validate()
    items = eval_sets[id_skill]
    kw = {f: getattr(settings, f) for f in ("n_samples", "k", "temperature", "top_p", "max_new_tokens", "batch_size")}
    res = evaluate_prompts(
        model, tokenizer, [it.prompt for it in items], _skill_checker(items), **kw, generator=generator, per_item=True
    )
    ood = {
        s: _greedy(model, tokenizer, eval_sets[s], settings.batch_size, settings.max_new_tokens)
        for s in sk.OOD_SKILLS
        if s in eval_sets
    }
    out = {
        "id_avg@k": res["avg@k"],
        "id_pass@k": res["pass@k"],
        "id_greedy": res["greedy"],
        "ood_mean": float(np.mean([r["greedy"] for r in ood.values()])),
        "ood": {s: r["greedy"] for s, r in ood.items()},
    }
    if per_item:
        out["per_item"] = {id_skill: res["per_item"], **{s: r["per_item"] for s, r in ood.items()}}
    return out


def evaluate_greedy(
    model: torch.nn.Module,
    tokenizer,
    eval_sets: dict[str, list[sk.Item]],
    settings: EvalSettings,
    id_skill: str = "math_hard",
    per_item: bool = False,
) -> dict:
    """Greedy accuracy only (the validation split's metrics): `id_greedy`, `ood_mean` over the OOD skills present
    and `ood` per skill; with `per_item`, "per_item" as `evaluate_toy` gives it."""
    res = {s: _greedy(model, tokenizer, items, settings.batch_size, settings.max_new_tokens) for s, items in
           eval_sets.items()}  # fmt: skip
    ood = {s: r["greedy"] for s, r in res.items() if s != id_skill}
    out = {"id_greedy": res[id_skill]["greedy"], "ood_mean": float(np.mean(list(ood.values()))), "ood": ood}
    if per_item:
        out["per_item"] = {s: r["per_item"] for s, r in res.items()}
    return out
