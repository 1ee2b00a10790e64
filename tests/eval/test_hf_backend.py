"""The transformers generation backend of `eval suite`: samples independent of the batch size, rows that end
leave the batch."""

from __future__ import annotations

import pytest
import torch

from anchorft.eval.backend import row_seed
from anchorft.eval.hf_backend import generate_sorted, length_sorted_batches, sample_rows


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model, tok


PROMPTS = ["What is 12 + 30?", "Find x.", "Please reason step by step about the answer \\boxed{42}.", "A"]


@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.95), (1.0, 1.0)])
def test_hf_samples_do_not_depend_on_batch_size(tiny, temperature, top_p):
    model, tok = tiny
    kw = dict(n=3, temperature=temperature, top_p=top_p, max_new_tokens=8, seed=5)
    ref = generate_sorted(model, tok, PROMPTS, batch_size=1, **kw)
    for bs in (2, 5, 12):
        assert generate_sorted(model, tok, PROMPTS, batch_size=bs, **kw) == ref
    assert generate_sorted(model, tok, PROMPTS, batch_size=4, max_batch_tokens=40, **kw) == ref
    # a prompt's samples depend on its key, not on its position or the other prompts
    sub = generate_sorted(model, tok, PROMPTS[2:3], keys=[2], batch_size=3, **kw)
    assert sub == ref[2:3]
    assert generate_sorted(model, tok, PROMPTS, batch_size=3, **{**kw, "seed": 6}) != ref
    assert len({s for row in ref for s in row}) > 1  # the samples differ from each other


def test_length_sorted_batches_respect_both_limits():
    lengths = [5, 50, 7, 30, 30, 6]
    b = length_sorted_batches(lengths, max_new_tokens=10, batch_size=3, max_batch_tokens=130)
    assert sorted(r for x in b for r in x) == list(range(6))
    assert b[0] == [1, 3]  # (50 + 10) x 2 = 120 <= 130; a third row would make 180
    for batch in b:
        assert len(batch) <= 3
        widths = [lengths[r] for r in batch]
        assert widths == sorted(widths, reverse=True)
        assert len(batch) == 1 or len(batch) * (max(widths) + 10) <= 130


def test_sample_rows_draws_from_the_nucleus():
    # an independent check of inverse-CDF nucleus sampling: frequencies against the renormalised nucleus
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gens = [torch.Generator().manual_seed(row_seed(0, 0, j)) for j in range(1)]
    counts = torch.zeros(4)
    for _ in range(4000):
        counts[sample_rows(logits, 1.0, 0.7, gens)[0]] += 1
    freq = counts / counts.sum()
    assert freq[2:].sum() == 0  # 0.5 + 0.3 reach 0.7: the nucleus is {0, 1}
    assert abs(freq[0].item() - 0.5 / 0.8) < 0.03


def test_rows_that_end_leave_the_batch(tiny):
    # EOS := the greedy first token of one prompt, so that row ends at once while the others go on: the
    # shrinking batch (rows and KV cache dropped) must give what the fixed-batch (testbed) path gives
    import copy

    from anchorft.eval.hf_backend import generate

    model, tok = tiny
    enc = tok(PROMPTS[0], add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        first = int(model(**enc).logits[0, -1].argmax())
    tok2 = copy.deepcopy(tok)
    tok2.eos_token = tok2.convert_ids_to_tokens(first)
    assert tok2.eos_token_id == first
    ref = generate(model, tok2, PROMPTS, n=1, temperature=0, max_new_tokens=8, batch_size=8, add_special_tokens=False)
    assert ref[0] == [""] and any(r[0] for r in ref[1:])
    for bs in (1, 4):
        got = generate_sorted(model, tok2, PROMPTS, n=1, temperature=0.0, max_new_tokens=8, batch_size=bs)
        assert got == ref
    kw = dict(n=3, temperature=0.05, top_p=0.95, max_new_tokens=8, seed=2)
    assert generate_sorted(model, tok2, PROMPTS, batch_size=12, **kw) == generate_sorted(
        model, tok2, PROMPTS, batch_size=1, **kw
    )
