"""Tiny Llama checkpoints and a tokenizer trained here, saved to tmp dirs as `save_pretrained` writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "the cat sat on the mat and the dog ran to the park",
    "two plus three is five and four plus four is eight",
    "reverse the word cat to get tac and sort the letters",
    "what is the capital of the land of blue hills",
    "please reason step by step and put the answer in a box",
]


def train_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=200,
        special_tokens=["<pad>", "<eos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def tiny_config(vocab_size: int, **overrides) -> LlamaConfig:
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    kw.update(overrides)
    return LlamaConfig(**kw)


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_tokenizer()


def save_model(model: LlamaForCausalLM, tok, path: Path, **kw) -> Path:
    model.save_pretrained(path, **kw)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """base, two tuned versions (small and larger perturbation), and the base again, sharded."""
    root = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    cfg = tiny_config(len(tokenizer))
    base = LlamaForCausalLM(cfg).eval()
    out = {"base": save_model(base, tokenizer, root / "base")}
    save_model(base, tokenizer, root / "base_sharded", max_shard_size="20KB")
    g = torch.Generator().manual_seed(1)
    for name, scale in (("small", 0.01), ("large", 0.2)):
        m = LlamaForCausalLM(cfg).eval()
        m.load_state_dict(base.state_dict())
        with torch.no_grad():
            for p in m.parameters():
                p.add_(scale * p.std() * torch.randn(p.shape, generator=g))
        out[name] = save_model(m, tokenizer, root / name)
    out["base_sharded"] = root / "base_sharded"
    return out


@pytest.fixture(scope="session")
def prompt_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prompts")
    plain = root / "plain.jsonl"
    plain.write_text("\n".join(json.dumps({"prompt": s}) for s in CORPUS) + "\n")
    chat = root / "chat.jsonl"
    rows = [{"prompt": [{"role": "system", "content": "reason"}, {"role": "user", "content": s}]} for s in CORPUS]
    chat.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pc = root / "pc.jsonl"
    pc.write_text("\n".join(json.dumps({"prompt": s[:20], "completion": s[20:]}) for s in CORPUS) + "\n")
    return {"plain": plain, "chat": chat, "pc": pc}


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny matrices: OpenMP threads only add contention on a shared machine (0.3 s vs 0.5 ms per SVD)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
