"""The testbed's held-out math items as benchmark files, in the format `anchorft eval --bench` reads (the paper's
JSONL: chat messages under `prompt`, the gold answer under `reward_model.ground_truth`).

The paper's evaluation files do not fit the testbed model: their prompts run past its 128-token context, in words
it has never seen. These files hold items of the testbed's own evaluation split (`skills.sample_items(skill, n,
"eval", ...)`, never trained on; `toy compare` scores its models on the same split), so `anchorft eval` can be run
end to end on CPU against the testbed model. The tokenizer's chat template renders one user message as "Q:...\\nA:",
the prompt of the testbed's own evaluation, so an item gets the same prompt through either path.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from anchorft.eval.answers import last_boxed
from anchorft.io import write_jsonl
from anchorft.runs import run_claimed
from anchorft.toy import skills as sk

__all__ = ["MATH_SKILLS", "bench_rows", "write_benches", "bench_into"]

# the skills whose answer is a boxed number: graded by `anchorft eval` as the paper's math files are
MATH_SKILLS = tuple(s for s in sk.SKILLS if s.startswith("math_"))


def bench_rows(skill: str, n_items: int, seed: int = 0) -> list[dict]:
    """`n_items` distinct evaluation-split items of the math skill `skill` as benchmark rows; the same (skill,
    seed) always gives the same items, whichever other skills are written beside it."""
    if skill not in MATH_SKILLS:
        raise ValueError(f"--skills: {skill!r} is not a math skill of the testbed; choose from {list(MATH_SKILLS)}")
    if n_items < 1:
        raise ValueError(f"--items: must be >= 1, got {n_items}")
    rng = np.random.default_rng([seed, zlib.crc32(skill.encode())])
    rows = []
    for item in sk.sample_items(skill, n_items, "eval", rng, unique=True):
        question = item.prompt.removeprefix("Q:").removesuffix("\nA:")
        gold = last_boxed(item.answer)
        assert sk.format_prompt(question) == item.prompt and gold is not None, item
        rows.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "reward_model": {"ground_truth": gold},
                "data_source": f"anchorft-testbed/{skill}",
                "key": item.key,
            }
        )
    return rows


def write_benches(out: str | Path, skills: tuple[str, ...] | list[str], n_items: int, seed: int = 0) -> list[Path]:
    """OUT/SKILL.jsonl for each skill (`bench_rows`); the paths written."""
    rows = {s: bench_rows(s, n_items, seed) for s in skills}  # every skill checked before a file is written
    paths = []
    for skill, skill_rows in rows.items():
        path = Path(out) / f"{skill}.jsonl"
        write_jsonl(path, skill_rows)
        paths.append(path)
    return paths


def bench_into(
    out: str | Path, skills: list[str] | None = None, n_items: int = 50, seed: int = 0, overwrite: bool = False
) -> list[Path] | None:
    """`anchorft toy bench`: `write_benches` into the folder `out`, claimed like every output folder (the same
    arguments: reused, None); `skills` None: every math skill."""
    chosen = tuple(skills or MATH_SKILLS)
    for skill in chosen:
        bench_rows(skill, 1)  # an unknown skill before the folder is claimed
    if n_items < 1:
        raise ValueError(f"--items: must be >= 1, got {n_items}")
    spec = {"skills": list(chosen), "items": n_items, "seed": seed}
    return run_claimed(out, "toy bench", spec, lambda claim: write_benches(out, chosen, n_items, seed),
                       overwrite=overwrite)  # fmt: skip
