"""The testbed tokenizer: character level, BOS added, reloads faithfully through AutoTokenizer."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from anchorft.toy import skills as sk
from anchorft.toy.pretrain import build_tokenizer
from anchorft.toy.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(np.random.default_rng(0))


def _texts():
    rng = np.random.default_rng(3)
    return [it.prompt + it.answer for s in sk.SKILLS for it in sk.sample_items(s, 20, "eval", rng)]


def test_character_level_and_bos(tok):
    for t in _texts():
        ids = tok(t)["input_ids"]
        assert ids[0] == tok.bos_token_id
        assert len(ids) == len(t) + 1  # one token per character
        assert tok.decode(ids, skip_special_tokens=True) == t
        assert tok.convert_ids_to_tokens(ids[1:]) == list(t)


def test_special_tokens_in_text(tok):
    ids = tok("Q:sort cab\nA:abc</s>")["input_ids"]
    assert ids[-1] == tok.eos_token_id
    assert tok.pad_token_id not in (tok.bos_token_id, tok.eos_token_id)


def test_chat_template_matches_prompt_format(tok):
    msgs = [{"role": "user", "content": "reverse abc"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == tok.bos_token + sk.format_prompt("reverse abc")
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "cba"}], tokenize=False)
    assert full == tok.bos_token + sk.format_prompt("reverse abc") + "cba" + tok.eos_token


def test_round_trip_through_autotokenizer(tok, tmp_path):
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=2)
    )  # fmt: skip
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.get_vocab() == tok.get_vocab()
    assert (again.bos_token, again.eos_token, again.pad_token) == (tok.bos_token, tok.eos_token, tok.pad_token)
    for t in _texts():
        assert again(t)["input_ids"] == tok(t)["input_ids"]
        assert again.decode(tok(t)["input_ids"], skip_special_tokens=True) == t
    msgs = [{"role": "user", "content": "count a in abca"}]
    assert again.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == tok.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True
    )


def test_merges_and_bad_input():
    with pytest.raises(ValueError, match="texts"):
        train_tokenizer([])
    with pytest.raises(ValueError, match="merges"):
        train_tokenizer(["abc"], merges=-1)
    bpe = train_tokenizer(["abab abab abab"] * 10, merges=2)
    assert len(bpe) == 3 + 3 + 2  # specials + {a, b, ' '} + merges
    assert bpe.decode(bpe("abab")["input_ids"], skip_special_tokens=True) == "abab"
