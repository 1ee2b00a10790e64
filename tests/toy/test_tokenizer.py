"""The testbed tokenizer: letters one token each, template words whole, BOS added, reloads through AutoTokenizer."""

from __future__ import annotations

import re

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


def _expected_tokens(text: str) -> list[str]:
    """Independent segmentation with re: format markers, then whole template words, else single characters."""
    markers = "|".join(re.escape(m) for m in sk.FORMAT_TOKENS)
    out = []
    for m in re.finditer(rf"{markers}|[a-z]+|.", text, re.S):
        piece = m.group(0)
        out += [piece] if piece in sk.FORMAT_TOKENS or piece in sk.WORDS else list(piece)
    return out


def test_letters_one_token_each_template_words_whole_and_bos(tok):
    n_words = 0
    for t in _texts():
        ids = tok(t)["input_ids"]
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == t
        assert tok.convert_ids_to_tokens(ids[1:]) == _expected_tokens(t)
        n_words += sum(len(p) > 1 for p in _expected_tokens(t))
    assert n_words > 100  # the words are in use
    # a template word inside a longer string is spelt out; alone it is one token
    assert tok.convert_ids_to_tokens(tok("Q:reverse reds\nA:", add_special_tokens=False)["input_ids"]) == [
        "Q:", "reverse", " ", "r", "e", "d", "s", "\nA:"
    ]  # fmt: skip


def test_random_strings_are_never_template_words():
    rng = np.random.default_rng(5)
    for skill in ("reverse", "sort", "next", "count"):
        for it in sk.sample_items(skill, 3000, "train", rng):
            assert it.key.split("|")[-1] not in sk.WORDS and it.answer not in sk.WORDS
    assert not set(sk.knowledge_base()) & set(sk.WORDS)


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
    with pytest.raises(ValueError, match="words"):
        train_tokenizer(["abc"], words=["a b"])
    bpe = train_tokenizer(["abab abab abab"] * 10, merges=2)
    assert len(bpe) == 3 + 3 + 2  # specials + {a, b, ' '} + merges
    assert bpe.decode(bpe("abab")["input_ids"], skip_special_tokens=True) == "abab"


def test_letters_only_baseline():
    letters = build_tokenizer(np.random.default_rng(0), whole_words=False)  # the benchmarks' baseline
    for t in _texts():
        ids = letters(t)["input_ids"]
        assert letters.convert_ids_to_tokens(ids[1:]) == list(t)  # one token per character
