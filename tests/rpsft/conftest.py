"""Fixtures: a tokenizer trained here with `tokenizers`, tiny random Llama / Qwen2 models, small datasets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import datasets
import pytest
import torch

WORDS = "zero one two three four five six seven eight nine plus minus times equals answer is the of".split()


def make_texts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        a, b = (int(x) for x in torch.randint(0, 10, (2,), generator=g))
        op = ["plus", "minus", "times"][int(torch.randint(0, 3, (1,), generator=g))]
        val = {"plus": a + b, "minus": a - b, "times": a * b}[op]
        rows.append((f"what is {WORDS[a]} {op} {WORDS[b]}", f" the answer is {val}"))
    return rows


def build_tokenizer(path: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<pad>", "<s>", "</s>"], show_progress=False
    )
    corpus = [p + c for p, c in make_texts(400)] + [" ".join(WORDS)] * 5
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(path)
    return fast


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tok"))
    build_tokenizer(path)
    return path


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from anchorft.eval.loading import load_tokenizer

    return load_tokenizer(tokenizer_dir)


def tiny_config(kind: str, vocab: int, hidden: int = 32, layers: int = 2, inter: int = 48, tie: bool = False):
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    if kind == "gpt2":  # its attention and MLP layers are transformers' Conv1D (weights stored (in, out))
        return GPT2Config(
            vocab_size=vocab, n_positions=128, n_embd=hidden, n_layer=layers, n_head=4, n_inner=inter,
            tie_word_embeddings=tie, pad_token_id=1, bos_token_id=2, eos_token_id=3,
        )  # fmt: skip
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[kind]
    return cls(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=3,
    )


def import_deepspeed():
    """`deepspeed`, without its CPU shared-memory all-reduce kernel. DeepSpeed's CPU backend JIT-compiles that C++
    kernel (deepspeed_shm_comm) when its first process group starts: about 30 s in every new environment (CI's fresh
    clone builds it each run). It serves `inference_all_reduce` (tensor-parallel inference) only; ZeRO training,
    what these workers run, reduces through torch.distributed (gloo here, NCCL on GPUs) either way."""
    import importlib

    import deepspeed

    # by its module's name: `deepspeed.comm.torch` as an attribute is the torch package deepspeed.comm imports
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    return deepspeed


def tiny_model(kind: str = "llama", vocab: int = 300, seed: int = 0, **kw):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)  # test-only: transformers' init draws from the global generator
    model = AutoModelForCausalLM.from_config(tiny_config(kind, vocab, **kw))
    return model.float()


@pytest.fixture
def llama(tokenizer):
    return tiny_model("llama", len(tokenizer))


@pytest.fixture
def qwen(tokenizer):
    return tiny_model("qwen2", len(tokenizer), tie=True)


def pc_dataset(n: int = 16, seed: int = 0) -> datasets.Dataset:
    rows = make_texts(n, seed)
    return datasets.Dataset.from_dict({"prompt": [p for p, _ in rows], "completion": [c for _, c in rows]})


@pytest.fixture
def dataset():
    return pc_dataset(16)


@pytest.fixture
def model_dir(rp, tokenizer_dir, tmp_path):
    """A tiny Llama saved with the project's tokenizer, loaded by path as `anchorft train` loads a model."""
    from anchorft.eval.loading import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    path = tmp_path / "llama"
    tiny_model("llama", len(tok)).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture
def jsonl(tmp_path):
    """12 prompt / completion rows as a .jsonl training file."""
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in make_texts(12)))
    return str(path)


def base_args(out: str, **kw):
    from anchorft.rpsft.config import RPSFTConfig

    defaults = dict(
        output_dir=out,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        max_steps=3,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        data_seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        max_length=32,
        anchor_rank=4,
        optim="adamw_torch",
    )
    defaults.update(kw)
    return RPSFTConfig(**defaults)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def perturb(model, scale: float = 0.05, seed: int = 1) -> None:
    """Move every weight by scale x N(0, 1), from a seeded generator (a fine-tune's drift, in place)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def torchrun(script: str, *args: str, nproc: int = 2, timeout: int = 900, **env: str) -> subprocess.CompletedProcess:
    """`script ARGS` under `python -m torch.distributed.run --standalone` with `nproc` CPU processes (one thread
    each). --standalone lets the launcher bind a free port itself: a port picked here first could be taken by
    another process before the launcher binds it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu", **env}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), script]
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=timeout)


class _TestTools:
    """Shared functions for the tests (a fixture, since tests/*/conftest.py cannot be imported by name)."""

    make_texts = staticmethod(make_texts)
    build_tokenizer = staticmethod(build_tokenizer)
    tiny_config = staticmethod(tiny_config)
    tiny_model = staticmethod(tiny_model)
    pc_dataset = staticmethod(pc_dataset)
    base_args = staticmethod(base_args)
    perturb = staticmethod(perturb)
    torchrun = staticmethod(torchrun)


@pytest.fixture(scope="session")
def rp():
    torch.set_num_threads(1)
    return _TestTools
