"""Fixtures of the evaluation tests."""

import string

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


@pytest.fixture(scope="session")
def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer (lower-case letters, digits, " +="; <pad> 0, <s> 1, </s> 2) for tiny models."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for ch in string.ascii_lowercase + string.digits + " +=":
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
