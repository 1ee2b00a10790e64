"""The transformers generation backend of `eval suite`: length-sorted batches, one random stream per sample.

Every sample (prompt key, sample number j) draws its tokens from its own `torch.Generator`, seeded from
(seed, key, j) through numpy's `SeedSequence`, by inverse-CDF sampling from the nucleus: token =
the first index whose cumulative probability exceeds u, u ~ U(0, 1) from that generator. So a sample
does not depend on which other samples share its batch, on the batch size, or on whether a run was
resumed; only the model's floating-point logits (which a different padding can move in the last
bits) tie it to the batch. Rows are sorted by prompt length (longest first) and packed into batches
of at most `batch_size` rows whose padded size (rows x (longest prompt + max_new_tokens)) stays under
`max_batch_tokens`, so short prompts share large batches and long ones small batches; a row that ends
(EOS) leaves its batch and the KV cache (`Cache.batch_select_indices`), so the batch shrinks as it runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = ["row_seed", "sample_rows", "length_sorted_batches", "generate_sorted"]


def row_seed(seed: int, key: int, j: int) -> int:
    """The seed of sample j of the prompt with stable key `key` (e.g. its item index) in a run seeded `seed`."""
    return int(np.random.SeedSequence([seed, key, j]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def sample_rows(
    logits: torch.Tensor, temperature: float, top_p: float, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """Next token ids (B,) from logits (B, V): argmax at temperature 0, else nucleus sampling with one
    uniform draw per row from that row's (CPU) generator."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    if top_p < 1.0:  # keep the smallest prefix whose mass reaches top_p (the first token always)
        sorted_p = sorted_p.masked_fill(sorted_p.cumsum(dim=-1) - sorted_p >= top_p, 0.0)
    cdf = sorted_p.cumsum(dim=-1)
    cdf = cdf / cdf[:, -1:]
    u = torch.stack([torch.rand((), generator=g) for g in generators]).to(cdf.device, cdf.dtype)[:, None]
    idx = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)
    return order.gather(-1, idx).squeeze(-1)


def length_sorted_batches(
    lengths: Sequence[int], max_new_tokens: int, batch_size: int, max_batch_tokens: int | None = None
) -> list[list[int]]:
    """Row indices grouped into batches: longest prompt first, at most `batch_size` rows and (when given)
    rows x (longest prompt + max_new_tokens) <= max_batch_tokens (a row alone always fits)."""
    order = sorted(range(len(lengths)), key=lambda r: (-lengths[r], r))
    batches: list[list[int]] = []
    for r in order:
        cur = batches[-1] if batches else None
        if cur is not None and len(cur) < batch_size:
            width = lengths[cur[0]] + max_new_tokens  # cur[0] is the longest of its batch
            if max_batch_tokens is None or (len(cur) + 1) * width <= max_batch_tokens:
                cur.append(r)
                continue
        batches.append([r])
    return batches


@torch.no_grad()
def generate_sorted(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    *,
    keys: Sequence[int] | None = None,
    n: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    batch_size: int = 64,
    max_batch_tokens: int | None = None,
    add_special_tokens: bool = False,
    progress: bool = False,
) -> list[list[str]]:
    """Complete each prompt (text, or token ids) `n` times; returns, per prompt, its `n` completions.
    `keys` (default 0..P-1) name the prompts in the seeds: pass stable ids (item indices) so that a
    resumed run draws the same."""
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("n, max_new_tokens and batch_size must be >= 1")
    keys = list(range(len(prompts))) if keys is None else list(keys)
    if len(keys) != len(prompts):
        raise ValueError("keys must have one entry per prompt")
    device = next(model.parameters()).device
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    encoded = [list(p) if not isinstance(p, str) else tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"]
               for p in prompts]  # fmt: skip
    rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
    batches = length_sorted_batches([len(encoded[i]) for i, _ in rows], max_new_tokens, batch_size, max_batch_tokens)
    out: list[list[str]] = [[""] * n for _ in prompts]
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    was_training = model.training
    model.eval()
    for batch in tqdm(batches, desc="generate", disable=not progress):
        ids = [encoded[rows[r][0]] for r in batch]
        gens = [torch.Generator().manual_seed(row_seed(seed, keys[rows[r][0]], rows[r][1])) for r in batch]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in ids], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        toks: list[list[int]] = [[] for _ in batch]
        active = list(range(len(batch)))  # rows still generating; finished rows leave the batch and its cache
        done = torch.zeros(len(batch), dtype=torch.bool, device=device)  # used where the cache cannot shrink
        past, step_ids = None, input_ids
        for _ in range(max_new_tokens):
            res = model(input_ids=step_ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: past})
            past = res.cache if getattr(res, "cache", None) is not None else res.past_key_values
            nxt = sample_rows(res.logits[:, -1, :], temperature, top_p, [gens[a] for a in active])
            keep = []
            for i, (a, t) in enumerate(zip(active, nxt.tolist())):
                if done[i] or (eos_id is not None and t == eos_id):
                    done[i] = True
                    continue
                toks[a].append(t)
                keep.append(i)
            if not keep:
                break
            if len(keep) < len(active) and hasattr(past, "batch_select_indices"):
                idx = torch.tensor(keep, device=device)
                past.batch_select_indices(idx)
                nxt, pos, mask, done = nxt[idx], pos[idx], mask[idx], done[idx]
                active = [active[i] for i in keep]
            step_ids, pos = torch.where(done, torch.full_like(nxt, pad_id), nxt)[:, None], pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        for r, t in zip(batch, toks):
            i, j = rows[r]
            out[i][j] = tokenizer.decode(t, skip_special_tokens=True)
    model.train(was_training)
    return out
