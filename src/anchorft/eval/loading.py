"""Loading a model folder (its causal LM and its tokenizer): one policy for training, evaluation, RL and the analysis.

trust_remote_code stays off unless a caller's config turns it on.
"""

from __future__ import annotations

import json
import os

from anchorft import stop

__all__ = ["load_causal_lm", "load_tokenizer", "load_eval_tokenizer"]


def load_causal_lm(path: str | os.PathLike, dtype=None, trust_remote_code: bool = False):
    """A causal LM from a local folder or hub name, in float32 unless `dtype` says otherwise (the project's one
    model loading policy outside the trainer, whose `rpsft.train.load_model` adds the recipe's init kwargs)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    model = AutoModelForCausalLM.from_pretrained(os.fspath(path), dtype=dtype, trust_remote_code=trust_remote_code)
    stop.check_alone()  # a signal that the loader swallowed stops the run here (anchorft.stop)
    return model


def load_tokenizer(path: str | os.PathLike, trust_remote_code: bool = False):
    """Load a tokenizer (the project's one loading policy: every model folder is read through here).

    A tokenizer saved as PreTrainedTokenizerFast (e.g. trained with `tokenizers`) is loaded as such:
    AutoTokenizer would map it to the model type's class (Qwen2Tokenizer for a Qwen2 config), which
    silently replaces its pre-tokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(cfg):
        with open(cfg) as f:
            cls = json.load(f).get("tokenizer_class")
        if cls in ("PreTrainedTokenizerFast", "TokenizersBackend"):
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def load_eval_tokenizer(path: str | os.PathLike):
    """`load_tokenizer` for generation: batched prompts need a pad token (the eos token when there is none)."""
    tok = load_tokenizer(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.convert_ids_to_tokens(0)
    return tok
