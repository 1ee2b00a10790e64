"""Loading a model folder (its causal LM and its tokenizer): one policy for training, evaluation, RL and the analysis.

trust_remote_code stays off unless a caller's config turns it on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

from anchorft import stop

__all__ = ["load_causal_lm", "from_pretrained_strict", "check_loading_info", "load_tokenizer", "load_eval_tokenizer"]
__all__ += ["quiet_model_bars", "MODEL_BARS"]

MODEL_BARS = ("Loading weights", "Writing model shards")  # transformers' bars of a model's load and save


@contextmanager
def quiet_model_bars() -> Iterator[None]:
    """Inside this block transformers draws no bar for a model's weights loaded or written (`MODEL_BARS`): they
    would interleave with the command's own progress (a study's cells, the trainer's steps), and a small model's
    load is over in a blink. Downloads keep the hub's bars; the previous tqdm hook is put back on exit."""
    from transformers.utils import logging as hf_logging  # lazy: loads transformers

    previous = hf_logging.set_tqdm_hook(None)

    def hook(factory, args, kwargs):
        if kwargs.get("desc") in MODEL_BARS:
            kwargs = {**kwargs, "disable": True}
        return previous(factory, args, kwargs) if previous is not None else factory(*args, **kwargs)

    hf_logging.set_tqdm_hook(hook)
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


def check_loading_info(info: dict, path: str | os.PathLike) -> None:
    """One-line ValueError when `from_pretrained`'s loading info (`output_loading_info=True`) reports a weight of
    the model that the folder did not supply (missing), a tensor of the folder the model has no place for
    (unexpected) or one of another shape (mismatched).

    transformers loads such a folder anyway, with the missing weights initialised at random and a log line at most:
    a folder written from an engine's PEFT state dict (every key `base_model.model.*`) would be trained on, or
    scored, as a random model. A tied lm_head (tie_word_embeddings) has no key of its own and is not reported."""
    parts = []
    for what in ("missing", "unexpected", "mismatched"):
        keys = sorted(str(k[0] if isinstance(k, (tuple, list)) else k) for k in (info.get(f"{what}_keys") or ()))
        if keys:
            parts.append(f"{len(keys)} {what} (first: {', '.join(keys[:3])})")
    if parts:
        raise ValueError(
            f"{os.fspath(path)}: its weights do not fit the model: {'; '.join(parts)}; refusing a partly random "
            "model (a folder saved from an adapter's or an engine's state dict, or of another architecture?)"
        )


def from_pretrained_strict(path: str | os.PathLike, **kwargs):
    """`AutoModelForCausalLM.from_pretrained(path, **kwargs)`, refusing missing, unexpected or mismatched weights
    (`check_loading_info`): every load of a model to train on or evaluate goes through here."""
    from transformers import AutoModelForCausalLM  # lazy: loads transformers

    # transformers 5 kernelizes every loaded model by default (use_kernels=None means on when the `kernels`
    # package is there, and transformers requires it): on CUDA the first forward fetches kernels from the hub,
    # downloaded code like trust_remote_code's, which fails offline ("could not verify publisher trust status").
    # Off unless asked (`model_init_kwargs: {use_kernels: true}`).
    kwargs.setdefault("use_kernels", False)
    with quiet_model_bars():
        model, info = AutoModelForCausalLM.from_pretrained(os.fspath(path), output_loading_info=True, **kwargs)
    check_loading_info(info, path)
    return model


def load_causal_lm(path: str | os.PathLike, dtype=None, trust_remote_code: bool = False):
    """A causal LM from a local folder or hub name, in float32 unless `dtype` says otherwise (the project's one
    model loading policy outside the trainer, whose `rpsft.train.load_model` adds the recipe's init kwargs); a
    folder whose weights do not fit the model is refused (`from_pretrained_strict`)."""
    import torch  # lazy: loads torch

    dtype = torch.float32 if dtype is None else dtype
    model = from_pretrained_strict(path, dtype=dtype, trust_remote_code=trust_remote_code)
    stop.check_alone()  # a signal that the loader swallowed stops the run here (anchorft.stop)
    return model


def load_tokenizer(path: str | os.PathLike, trust_remote_code: bool = False):
    """Load a tokenizer (the project's one loading policy: every model folder is read through here).

    A tokenizer saved as PreTrainedTokenizerFast (e.g. trained with `tokenizers`) is loaded as such:
    AutoTokenizer would map it to the model type's class (Qwen2Tokenizer for a Qwen2 config), which
    silently replaces its pre-tokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast  # lazy: loads transformers

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
