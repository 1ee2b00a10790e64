"""Batched generation for evaluation: greedy or nucleus sampling, with an explicit generator.

A small decoding loop over the transformers KV cache rather than `model.generate`, so that sampling
draws from a `torch.Generator` passed by the caller (same seed, same samples; no global seeding) and
so that the same function serves the testbed and the paper's benchmarks. The vLLM backend is
`anchorft.eval.vllm_backend`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

__all__ = ["sample_next", "generate"]


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Next token ids (B,) from logits (B, V): argmax at temperature 0, else nucleus sampling."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept)
        drop = sorted_p.cumsum(dim=-1) - sorted_p >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[str],
    *,
    n: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    progress: bool = False,
    add_special_tokens: bool = True,
) -> list[list[str]]:
    """Complete each prompt `n` times; returns, per prompt, its `n` decoded completions.

    Prompts are already formatted (chat template applied by the caller where wanted) and are
    tokenized with the tokenizer's default special tokens (`add_special_tokens=False` for prompts that
    a chat template already starts with BOS). Decoding
    stops at the tokenizer's EOS token or after `max_new_tokens`.
    """
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("n, max_new_tokens and batch_size must be >= 1")
    device = next(model.parameters()).device
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    flat = [p for p in prompts for _ in range(n)]  # prompt i's samples are rows i*n .. i*n+n-1
    encoded = [tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"] for p in flat]
    outputs: list[str] = []
    was_training = model.training
    model.eval()
    starts = range(0, len(flat), batch_size)
    for start in tqdm(starts, desc="generate", disable=not progress):
        batch = encoded[start : start + batch_size]
        width = max(len(ids) for ids in batch)
        # left padding keeps every sequence's last prompt token in the last column
        input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in batch], device=device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T): positions ignore the padding
        done = torch.zeros(len(batch), dtype=torch.bool, device=device)
        new_tokens = []
        past = None
        # transformers >= 5.2x names the KV cache `cache` (older releases: `past_key_values`)
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        step_ids, step_pos = input_ids, position_ids
        for _ in range(max_new_tokens):
            out = model(
                input_ids=step_ids, attention_mask=mask, position_ids=step_pos, use_cache=True, **{cache_kw: past}
            )
            past = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            nxt = sample_next(out.logits[:, -1, :], temperature, top_p, generator)  # (B,)
            nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
            new_tokens.append(nxt)
            if eos_id is not None:
                done |= nxt == eos_id
            if bool(done.all()):
                break
            step_ids = nxt[:, None]  # (B, 1): the cache holds everything before
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        gen = torch.stack(new_tokens, dim=1).tolist()  # (B, T_new)
        for row in gen:
            if eos_id is not None and eos_id in row:
                row = row[: row.index(eos_id)]
            outputs.append(tokenizer.decode(row, skip_special_tokens=True))
    model.train(was_training)
    return [outputs[i * n : (i + 1) * n] for i in range(len(prompts))]
