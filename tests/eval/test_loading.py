"""The one loading policy: a `tokenizers`-trained tokenizer comes back as itself; a causal LM in float32 unless told,
trust_remote_code off unless asked."""

from __future__ import annotations

import torch
import transformers
from transformers import PreTrainedTokenizerFast

from anchorft.eval.loading import load_causal_lm, load_eval_tokenizer, load_tokenizer


def _save(path, pad: bool) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["one two three four", "five six"] * 10, trainers.BpeTrainer(vocab_size=60,
                            special_tokens=["<unk>", "<pad>", "</s>"], show_progress=False))  # fmt: skip
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>",
                                   **({"pad_token": "<pad>"} if pad else {}))  # fmt: skip
    fast.save_pretrained(path)
    return fast


def test_a_tokenizers_tokenizer_loads_as_itself(tmp_path):
    saved = _save(tmp_path, pad=True)
    tok = load_tokenizer(tmp_path)
    assert type(tok) is PreTrainedTokenizerFast
    text = "one two  three"
    assert tok(text)["input_ids"] == saved(text)["input_ids"]


def test_the_eval_tokenizer_always_pads(tmp_path):
    _save(tmp_path, pad=False)
    assert load_tokenizer(tmp_path).pad_token is None
    tok = load_eval_tokenizer(tmp_path)
    assert tok.pad_token == "</s>"


def test_causal_lm_in_float32_unless_told_and_remote_code_off(tiny_model_dir, monkeypatch):
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(path, **kw):
        seen.append(kw)
        return real(path, **kw)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    assert next(load_causal_lm(tiny_model_dir).parameters()).dtype == torch.float32
    assert next(load_causal_lm(tiny_model_dir, torch.bfloat16).parameters()).dtype == torch.bfloat16
    assert [kw["trust_remote_code"] for kw in seen] == [False, False]


def test_hub_kernels_off_unless_asked(tiny_model_dir):
    """transformers 5 kernelizes a loaded model by default (on CUDA: kernels fetched from the hub at the first
    forward, downloaded code); every load here turns that off, and a recipe's model_init_kwargs can turn it on."""
    from types import SimpleNamespace

    from anchorft.rpsft.model_loading import load_model

    assert load_causal_lm(tiny_model_dir).use_kernels is False
    args = SimpleNamespace(model_init_kwargs=None, trust_remote_code=False)
    assert load_model(str(tiny_model_dir), args).use_kernels is False
    args.model_init_kwargs = {"use_kernels": True}
    assert load_model(str(tiny_model_dir), args).use_kernels is True
