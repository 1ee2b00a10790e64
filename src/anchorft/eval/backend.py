"""The generation backends' one protocol and one seeding rule.

A `Backend` completes chat-formatted prompts given as token ids (the chat template already holds BOS), each
named by a stable key (its item index): `generate(token_ids, keys, n=, temperature=, top_p=, max_new_tokens=,
seed=)` returns per prompt its `n` completions; temperature 0 is greedy decoding. Two implement it:
`hf_backend.HFBackend` (transformers) and `vllm_backend.VLLMBackend` (vLLM, data-parallel engines). Both
seed from `row_seed(seed, item index, sample)`: the transformers backend gives each sample j its own generator
seeded `row_seed(seed, key, j)`; vLLM seeds each item's request with `row_seed(seed, key, 0)` and draws its
n samples from it. So a sample depends on the seed and the item, not on the batch, the shard, the command
(`anchorft eval` or `anchorft eval suite`) or a resumption. `runner.resolve_backend` and `runner.open_backend`
pick and open one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

__all__ = ["Backend", "row_seed"]


class Backend(Protocol):
    def generate(
        self,
        token_ids: Sequence[Sequence[int]],
        keys: Sequence[int],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]: ...

    def close(self) -> None: ...


def row_seed(seed: int, key: int, j: int) -> int:
    """The seed of sample j of the prompt with stable key `key` (e.g. its item index) in a run seeded `seed`."""
    return int(np.random.SeedSequence([seed, key, j]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
