"""The transformers backend: the one decoding loop, its two draw rules, and `HFBackend` (the `Backend` protocol).

`decode` is a small loop over the transformers KV cache rather than `model.generate`, so that every draw comes
from a `torch.Generator` the caller passes (same seed, same samples; no global seeding). Rows are left-padded;
a row stops at EOS or after `max_new_tokens`. With `shrink`, a row that ends leaves its batch and the KV cache
(`Cache.batch_select_indices`), so the batch shrinks as it runs.

Two draw rules plug into it:
- the evaluation's (`generate_sorted`, `HFBackend`): rows (prompt, sample j) sorted by prompt length, longest
  first, packed into batches of at most `batch_size` rows whose padded size (rows x (longest prompt +
  max_new_tokens)) stays under `max_batch_tokens`; every sample draws from its own generator seeded
  `backend.row_seed(seed, key, j)`, by inverse-CDF sampling from the nucleus (token = the first index whose
  cumulative probability exceeds u, u ~ U(0, 1) from that generator). So a sample does not depend on which
  other samples share its batch, on the batch size, or on whether a run was resumed; only the model's
  floating-point logits (which a different padding can move in the last bits) tie it to the batch.
- the testbed's (`generate`, used by `eval.pipeline`): fixed batches in prompt order and one shared generator
  drawn by `torch.multinomial` (`sample_next`), kept as it is so the testbed's numbers do not move.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from anchorft import stop
from anchorft.eval.backend import row_seed
from anchorft.eval.loading import load_causal_lm

__all__ = ["decode", "sample_next", "sample_rows", "length_sorted_batches", "generate", "generate_sorted", "HFBackend"]


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """The testbed's rule: next token ids (B,) from logits (B, V), argmax at temperature 0, else nucleus
    sampling by `torch.multinomial` from one generator shared by the rows."""
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


def sample_rows(
    logits: torch.Tensor, temperature: float, top_p: float, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """The evaluation's rule: next token ids (B,) from logits (B, V), argmax at temperature 0, else nucleus
    sampling with one uniform draw per row from that row's (CPU) generator."""
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
def decode(
    model: torch.nn.Module,
    tokenizer,
    encoded: Sequence[Sequence[int]],
    batches: Sequence[Sequence[int]],
    pick: Callable[[torch.Tensor, list[int]], torch.Tensor],
    *,
    max_new_tokens: int,
    shrink: bool,
    progress: bool = False,
) -> list[list[int]]:
    """The decoding loop: each row's new token ids (up to, not including, EOS). `encoded[r]` is row r's prompt,
    `batches` the rows decoded together, `pick(last logits (B, V), the batch's live rows)` the next tokens."""
    device = next(model.parameters()).device
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    # transformers >= 5.2x names the KV cache `cache` (older releases: `past_key_values`)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    toks: list[list[int]] = [[] for _ in encoded]
    was_training = model.training
    model.eval()
    for batch in tqdm(batches, desc="generate", disable=not progress):
        ids = [list(encoded[r]) for r in batch]
        width = max(len(x) for x in ids)
        # left padding keeps every sequence's last prompt token in the last column
        input_ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in ids], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T): positions ignore the padding
        active = list(batch)  # rows still in the batch
        done = torch.zeros(len(batch), dtype=torch.bool, device=device)  # rows ended but kept in the batch
        past, step_ids = None, input_ids
        for step in range(max_new_tokens):
            stop.check_alone()  # a safe point per token: a signal swallowed anywhere stops the generation here
            if step == 0:  # the prompts, each distinct one once (n samples of a prompt share its prefill)
                logits, past = _prefill(model, cache_kw, input_ids, mask, pos)
            else:
                res = model(input_ids=step_ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            **{cache_kw: past})  # fmt: skip
                logits = res.logits[:, -1, :]
                past = _cache_of(res)
            nxt = pick(logits, active)
            step_ids = torch.where(done, torch.full_like(nxt, pad_id), nxt)[:, None]  # (B, 1): the cache has the rest
            keep = []
            for i, (r, t) in enumerate(zip(active, nxt.tolist())):
                if done[i] or (eos_id is not None and t == eos_id):
                    done[i] = True
                    continue
                toks[r].append(t)
                keep.append(i)
            if not keep:
                break
            pos = pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            if shrink and len(keep) < len(active) and hasattr(past, "batch_select_indices"):
                idx = torch.tensor(keep, device=device)
                past.batch_select_indices(idx)
                step_ids, pos, mask, done = step_ids[idx], pos[idx], mask[idx], done[idx]
                active = [active[i] for i in keep]
    model.train(was_training)
    return toks


def _cache_of(res):
    return res.cache if getattr(res, "cache", None) is not None else res.past_key_values


def _prefill(
    model: torch.nn.Module, cache_kw: str, input_ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor
) -> tuple[torch.Tensor, object]:
    """The prompts' forward pass: (last-position logits (B, V), the KV cache of the B rows). Rows with the same
    (left-padded) prompt, as the n samples of one prompt are, are run once and their cache repeated
    (`Cache.batch_select_indices` with repeated indices): the logits are those of the same computation on a
    smaller batch (equal on the models tested here; tests/eval/test_prefill.py)."""
    rows = [tuple(r) for r in input_ids.tolist()]
    first = {r: i for i, r in reversed(list(enumerate(rows)))}  # each distinct prompt's first row
    if len(first) == len(rows):
        res = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: None})
        return res.logits[:, -1, :], _cache_of(res)
    uniq = sorted(first.values())  # (U,) rows run
    slot = {r: k for k, r in enumerate(rows[i] for i in uniq)}
    src = torch.tensor([slot[r] for r in rows], device=input_ids.device)  # (B,): each row's prefilled slot
    res = model(input_ids=input_ids[uniq], attention_mask=mask[uniq], position_ids=pos[uniq], use_cache=True,
                **{cache_kw: None})  # fmt: skip
    past = _cache_of(res)
    if not hasattr(past, "batch_select_indices"):  # a cache that cannot be repeated: the whole batch instead
        res = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: None})
        return res.logits[:, -1, :], _cache_of(res)
    past.batch_select_indices(src)  # (U, ...) -> (B, ...)
    return res.logits[:, -1, :][src], past


def _encode(tokenizer, prompts, add_special_tokens: bool) -> list[list[int]]:
    return [list(p) if not isinstance(p, str) else tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"]
            for p in prompts]  # fmt: skip


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
    """The testbed's sampler: complete each prompt `n` times; per prompt its `n` decoded completions. Rows
    (prompt i's samples are rows i*n .. i*n+n-1) in fixed batches of `batch_size`, in order, drawn by
    `sample_next` from `generator`. Prompts are formatted by the caller and tokenized with the tokenizer's
    default special tokens (`add_special_tokens=False` for prompts a chat template already starts with BOS)."""
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("n, max_new_tokens and batch_size must be >= 1")
    encoded = _encode(tokenizer, [p for p in prompts for _ in range(n)], add_special_tokens)
    batches = [range(s, min(s + batch_size, len(encoded))) for s in range(0, len(encoded), batch_size)]
    toks = decode(model, tokenizer, encoded, batches, lambda logits, rows: sample_next(logits, temperature, top_p,
                  generator), max_new_tokens=max_new_tokens, shrink=False, progress=progress)  # fmt: skip
    texts = tokenizer.batch_decode(toks, skip_special_tokens=True)
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


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
    """The evaluation's sampler: complete each prompt (text, or token ids) `n` times; per prompt its `n`
    completions. `keys` (default 0..P-1) name the prompts in the seeds: pass stable ids (item indices) so that
    a resumed run draws the same."""
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("n, max_new_tokens and batch_size must be >= 1")
    keys = list(range(len(prompts))) if keys is None else list(keys)
    if len(keys) != len(prompts):
        raise ValueError("keys must have one entry per prompt")
    encoded = _encode(tokenizer, prompts, add_special_tokens)
    rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
    batches = length_sorted_batches([len(encoded[i]) for i, _ in rows], max_new_tokens, batch_size, max_batch_tokens)
    gens = [torch.Generator().manual_seed(row_seed(seed, keys[i], j)) for i, j in rows]
    toks = decode(model, tokenizer, [encoded[i] for i, _ in rows], batches, lambda logits, live: sample_rows(
        logits, temperature, top_p, [gens[r] for r in live]), max_new_tokens=max_new_tokens, shrink=True,
        progress=progress)  # fmt: skip
    texts = tokenizer.batch_decode(toks, skip_special_tokens=True)  # rows are prompt-major
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


class HFBackend:
    """The `Backend` over transformers: `generate_sorted` on the model loaded from `model_dir` (bf16 on a GPU,
    fp32 on CPU); batch limits from the settings (`batch_size`, `max_batch_tokens`)."""

    def __init__(self, model_dir: Path, tokenizer, settings) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = load_causal_lm(model_dir, dtype).to(device)
        self.tokenizer, self.s = tokenizer, settings

    def generate(self, token_ids, keys, *, n, temperature, top_p, max_new_tokens, seed) -> list[list[str]]:
        return generate_sorted(
            self.model, self.tokenizer, token_ids, keys=keys, n=n, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, seed=seed, batch_size=self.s.batch_size,
            max_batch_tokens=self.s.max_batch_tokens,
        )  # fmt: skip

    def close(self) -> None:
        self.model = None
