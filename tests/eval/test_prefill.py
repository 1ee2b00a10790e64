"""The shared prefill of `decode`: a prompt's n samples run its prompt once and repeat its KV cache; the samples
equal those of the whole batch's prefill (the reference below, the loop as it was), and the first forward pass
sees one row per distinct prompt."""

import inspect

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from anchorft.eval import hf_backend
from anchorft.eval.hf_backend import generate, generate_sorted


@pytest.fixture(scope="module")
def model_and_tok(char_tokenizer):
    tok = char_tokenizer
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)  # fmt: skip
    torch.manual_seed(0)  # test-only: the model's random init
    return LlamaForCausalLM(cfg).eval(), tok


def _whole_batch_prefill(model, cache_kw, input_ids, mask, pos):
    """The reference: every row's prompt run, duplicates included."""
    res = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: None})
    return res.logits[:, -1, :], hf_backend._cache_of(res)


PROMPTS = ["ab+c", "hello world", "7", "12+34=", "ab+c"]  # a repeated prompt across the batch too


@pytest.mark.parametrize("n, batch_size", [(4, 64), (3, 5), (1, 2)])
def test_testbed_samples_equal_the_whole_batch_prefill(model_and_tok, monkeypatch, n, batch_size):
    model, tok = model_and_tok
    kw = dict(n=n, temperature=1.0, top_p=0.95, max_new_tokens=12, batch_size=batch_size)
    shared = generate(model, tok, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    monkeypatch.setattr(hf_backend, "_prefill", _whole_batch_prefill)
    whole = generate(model, tok, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    assert shared == whole
    assert len({c for cs in shared for c in cs}) > len(set(PROMPTS))  # sampled, not greedy: rows differ


def test_evaluation_samples_equal_the_whole_batch_prefill(model_and_tok, monkeypatch):
    model, tok = model_and_tok
    kw = dict(n=4, temperature=1.0, top_p=1.0, max_new_tokens=10, seed=3, batch_size=16)
    shared = generate_sorted(model, tok, PROMPTS, **kw)
    monkeypatch.setattr(hf_backend, "_prefill", _whole_batch_prefill)
    assert generate_sorted(model, tok, PROMPTS, **kw) == shared


def test_the_first_forward_runs_each_distinct_prompt_once(model_and_tok):
    model, tok = model_and_tok
    sizes = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kwargs: sizes.append(kwargs["input_ids"].shape),
                                             with_kwargs=True)  # fmt: skip
    try:
        generate(model, tok, PROMPTS, n=4, temperature=1.0, max_new_tokens=3, batch_size=64,
                 generator=torch.Generator().manual_seed(0))  # fmt: skip
    finally:
        handle.remove()
    width = max(len(tok(p)["input_ids"]) for p in PROMPTS)
    assert sizes[0] == (4, width)  # 5 prompts, 4 distinct, 20 rows: 4 prefilled
    assert all(s == (20, 1) for s in sizes[1:])  # then every row, one token at a time


def test_distinct_prompts_prefill_as_one_batch(model_and_tok):
    model, tok = model_and_tok
    ids = torch.tensor([[0, 1, 3], [1, 4, 5]])
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    logits, past = hf_backend._prefill(model, kw, ids, mask, pos)
    ref, _ = _whole_batch_prefill(model, kw, ids, mask, pos)
    assert torch.equal(logits, ref) and past.get_seq_length() == 3
