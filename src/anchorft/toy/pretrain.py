"""Pretraining the testbed's tiny Llama on the mixture of all skills (a plain PyTorch loop).

nanoGPT-style: each step draws fresh documents from the skill mixture (question and answer, or a
knowledge-base statement) and packs them into `batch_size` rows of `pack_len` tokens; a
block-diagonal causal mask and per-document position ids make each document see only itself, so a
packed row computes exactly what the documents would compute one per row, without the padding
(documents here are 10-24 tokens: padding each row to the longest wasted about 34 % of a step; rows of 64
tokens packed first-fit are 94 % full).
The loss is the next-token cross-entropy on the answers (or every token, `loss_on="all"`).
AdamW with a one-cycle schedule (linear warmup, cosine decay). Randomness comes from an explicit numpy
Generator (data) and torch.Generator (initialisation). The result is saved with `save_pretrained`
(safetensors) beside its tokenizer and a metrics.json of greedy accuracy per skill; `pretrained_model`
caches it under a directory keyed by the hash of the config, so that `make demo` pretrains once.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import os
import shutil
import string
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from platformdirs import user_cache_dir
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import anchorft
from anchorft import stop
from anchorft.eval.loading import quiet_model_bars
from anchorft.io import write_json
from anchorft.provenance import with_provenance
from anchorft.runs import run_claimed
from anchorft.threads import pinned_threads
from anchorft.toy import skills as sk
from anchorft.toy.evaluate import evaluate_skills
from anchorft.toy.tokenizer import train_tokenizer

__all__ = ["PretrainConfig", "pretrain", "pretrained_model", "pretrain_into", "cached_model", "cache_root"]
__all__ += ["code_version", "pretrain_claimed"]

# Bumped whenever the documents, the tokenizer or the packing change for the same config, so that no cached model
# built from the old ones is reused (2: template words one token each, random strings never a template word;
# 3: first-fit packing with the documents that did not fit carried to the next step).
CORPUS_VERSION = 3
_MISSES = 8  # a step's rows are closed once this many documents in a row found no room
DEFAULT_MIX = {  # weights set by the skills' learning speed (docs/toy.md): the slow ones are drawn more often
    "reverse": 1.5,
    "sort": 1.3,
    "next": 1.2,
    "count": 2.0,
    "boolean": 2.2,
    "recall": 1.4,
    "kb_fact": 0.5,  # knowledge-base statements "name is colour."
    # 2-digit sums and differences, one-digit word problems: the ID task's easier cousin, drawn most. It is the
    # slowest skill: at 3.5 it ends near 50 %, "solved in part" (drawing it more, 5.0, did not raise it and cost
    # four other skills; adding 3-digit sums themselves at weight 0.6 of 10 left them at 1 %).
    "math_easy": 3.5,
}


@dataclass
class PretrainConfig:
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512
    steps: int = 1700
    batch_size: int = 20  # rows per step
    pack_len: int = 64  # tokens per row; documents are packed whole (0: one document per row, right padded)
    lr: float = 2e-3
    warmup_frac: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    eval_items: int = 100  # greedy evaluation items per skill after pretraining
    loss_on: str = "answer"  # "answer": loss on answers + EOS (and whole KB statements); "all": every token
    eval_every: int = 0  # > 0: also log greedy accuracy (eval_items // 2 per skill) every this many steps
    # torch CPU threads while pretraining, whatever the machine has: the kernels split their sums by thread, so one
    # and two threads give different weights (math_easy 0.65 and 0.47 after the default 1,700 steps); part of the key
    threads: int = 2

    def validate(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "steps", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.pack_len and self.pack_len < 32:
            raise ValueError(f"pack_len: must be 0 or >= 32 (the longest document), got {self.pack_len}")
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size: must be divisible by num_heads")
        if self.loss_on not in ("answer", "all"):
            raise ValueError(f"loss_on: must be 'answer' or 'all', got {self.loss_on!r}")
        if self.lr <= 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if unknown := set(self.mix) - set(sk.SKILLS) - {"kb_fact"}:
            raise ValueError(f"mix: unknown skills {sorted(unknown)}")
        if not self.mix or min(self.mix.values()) < 0 or sum(self.mix.values()) <= 0:
            raise ValueError("mix: weights must be >= 0 with a positive sum")

    def key(self) -> str:
        """Short hash of the config and the code version (`code_version()`): the cache key."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "eval_every"}  # logging only
        fields["corpus_version"] = CORPUS_VERSION
        fields["anchorft_version"] = anchorft.__version__
        blob = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def code_version() -> str:
    """The code the cache key depends on besides the config: the package version and CORPUS_VERSION (documents,
    tokenizer, packing), e.g. "0.1.0+corpus3"."""
    return f"{anchorft.__version__}+corpus{CORPUS_VERSION}"


def cache_root() -> Path:
    """$ANCHORFT_CACHE/toy, else the user's cache folder (~/.cache/anchorft/toy on Linux; platformdirs), so a
    command run from any directory finds the testbed pretrained once. Entries are keyed by `PretrainConfig.key()`
    (the config, the package version and CORPUS_VERSION): a changed corpus or release never reuses an old model."""
    base = os.environ.get("ANCHORFT_CACHE")
    if base:
        return Path(base) / "toy"

    return Path(user_cache_dir("anchorft")) / "toy"


def _documents(mix: dict[str, float], n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """`n` pretraining documents (context, target) drawn from the mixture (training split only).

    A skill item is (prompt, answer); a knowledge-base statement is ("", statement)."""
    names = sorted(mix)
    p = np.array([mix[k] for k in names], dtype=float)
    picks = rng.choice(len(names), size=n, p=p / p.sum())
    facts = sk.kb_statements()
    docs = []
    for i in picks:
        name = names[i]
        if name == "kb_fact":
            docs.append(("", facts[int(rng.integers(0, len(facts)))]))
        else:
            item = sk.sample_items(name, 1, "train", rng)[0]
            docs.append((item.prompt, item.answer))
    return docs


def _encode_docs(docs: list[tuple[str, str]], tok, loss_on: str) -> list[tuple[list[int], list[int]]]:
    """Token ids of BOS + context + target + EOS and their labels (-100 on BOS and, for "answer", the context)."""
    ctx_ids = tok([a for a, _ in docs], add_special_tokens=False)["input_ids"]
    full_ids = tok([a + b for a, b in docs], add_special_tokens=False)["input_ids"]
    out = []
    for c, f in zip(ctx_ids, full_ids):
        ids = [tok.bos_token_id, *f, tok.eos_token_id]
        n_masked = 1 + (len(c) if loss_on == "answer" else 0)
        out.append((ids, [-100] * n_masked + ids[n_masked:]))
    return out


def _batch(cfg: PretrainConfig, tok, rng: np.random.Generator, carry: list | None = None):
    """One step's batch: (input_ids, labels, position_ids, 4-D mask) with documents packed into rows.

    Rows are filled first-fit: each document, in the order drawn from the mixture, goes into the first of the
    `batch_size` rows of `pack_len` tokens with room for it, until `_MISSES` documents in a row found no room.
    The documents that found none, and the drawn ones not yet tried, wait in `carry` (a list the caller keeps
    across steps) and are tried first at the next step: every document drawn is trained on (a carried one usually
    one step later), so the mixture is not tilted toward short documents, and rows of 64 end ~94 % full (closing
    a row at the first document that does not fit left them 80 % full). Each token attends
    causally to its own document only (block-diagonal mask, True = attend) and positions restart at 0 per document, so
    packing changes no computation. With pack_len 0, one document per row, right padded, and no mask (causal
    attention never lets a real token see the right padding).
    """
    pad = tok.pad_token_id
    if not cfg.pack_len:
        docs = _encode_docs(_documents(cfg.mix, cfg.batch_size, rng), tok, cfg.loss_on)
        T = max(len(i) for i, _ in docs)
        ids = torch.tensor([i + [pad] * (T - len(i)) for i, _ in docs])  # (B, T)
        labels = torch.tensor([lab + [-100] * (T - len(lab)) for _, lab in docs])
        return ids, labels, None, None
    B, T = cfg.batch_size, cfg.pack_len
    carry = [] if carry is None else carry
    queue = collections.deque(carry)  # the documents left over from the last step go first
    carry.clear()
    rows: list[list[tuple[list[int], list[int]]]] = [[] for _ in range(B)]  # whole documents per row
    room = [T] * B
    misses = 0
    while misses < _MISSES:
        if not queue:
            queue.extend(_encode_docs(_documents(cfg.mix, 64, rng), tok, cfg.loss_on))
        doc = queue.popleft()
        n = len(doc[0])
        if n > T:
            raise ValueError(f"pack_len: a document has {n} tokens, more than pack_len={T}")
        r = next((i for i in range(B) if room[i] >= n), None)
        if r is None:  # no row has room: it waits for the next step
            carry.append(doc)
            misses += 1
            continue
        rows[r].append(doc)
        room[r] -= n
        misses = 0
    carry.extend(queue)
    return _packed_tensors(rows, T, pad)


def _packed_tensors(rows: list[list[tuple[list[int], list[int]]]], T: int, pad: int):
    """Rows of whole (ids, labels) documents -> (input_ids, labels, position_ids, 4-D block-causal mask), each row
    right-padded to T: positions restart at 0 per document, and a token attends to its own document's past only."""
    # one list per row, then one tensor each: (B, T)
    ids, labels, pos, seg = [], [], [], []
    for row in rows:
        pad_n = T - sum(len(d) for d, _ in row)
        ids.append([t for d, _ in row for t in d] + [pad] * pad_n)
        labels.append([t for _, lab in row for t in lab] + [-100] * pad_n)
        pos.append([i for d, _ in row for i in range(len(d))] + [0] * pad_n)
        seg.append([j for j, (d, _) in enumerate(row) for _ in d] + [-1] * pad_n)  # document index; -1 on padding
    ids, labels, pos, seg = (torch.tensor(x) for x in (ids, labels, pos, seg))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (seg[:, :, None] == seg[:, None, :]) & causal  # (B, T, T): same document, not the future
    mask |= torch.eye(T, dtype=torch.bool)  # padding attends to itself only (no empty softmax rows)
    return ids, labels, pos, mask[:, None]


def build_tokenizer(rng: np.random.Generator, whole_words: bool = True) -> PreTrainedTokenizerFast:
    """Character-level tokenizer trained on a sample of the corpus plus the full character set, with the
    templates' words and format markers as one token each (`skills.WORDS`, `skills.FORMAT_TOKENS`);
    `whole_words=False`: letters only (an earlier tokenizer of the testbed, the benchmarks' baseline)."""
    charset = string.ascii_lowercase + string.digits + " \n.,:?=+-*&|~\\{}()QATF"
    # a fixed list (not sk.SKILLS), so that adding a skill does not change the random stream of pretraining
    kinds = ("math_easy", "math_hard", "reverse", "sort", "next", "count", "boolean", "recall", "kb_fact")
    texts = [a + b for a, b in _documents(dict.fromkeys(kinds, 1.0), 400, rng)] + [charset]
    if not whole_words:
        return train_tokenizer(texts)
    return train_tokenizer(texts, words=sk.WORDS, symbols=sk.FORMAT_TOKENS)


def build_model(cfg: PretrainConfig, vocab_size: int, tok: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # re-initialise from the explicit generator (std 0.02, like _init_weights)
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * config.initializer_range)
            elif "norm" in name:
                p.fill_(1.0)
    return model


def _lr_at(step: int, cfg: PretrainConfig) -> float:
    warm = max(1, int(cfg.warmup_frac * cfg.steps))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    t = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))


def pretrain(cfg: PretrainConfig, out_dir: str | Path, progress: bool = True) -> dict:
    """Pretrain from scratch, save model + tokenizer + config.json + metrics.json to `out_dir`, on `cfg.threads` torch
    threads (the same weights on any machine)."""
    cfg.validate()
    with pinned_threads(cfg.threads):
        return _pretrain(cfg, Path(out_dir), progress)


def _pretrain(cfg: PretrainConfig, out_dir: Path, progress: bool) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    tok = build_tokenizer(rng)
    model = build_model(cfg, len(tok), tok, cfg.seed)
    n_params = sum(p.numel() for p in model.parameters())
    # fused: one kernel for the whole update (5 % of a step here, on CPU too)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay, fused=True
    )
    model.train()
    t0 = time.perf_counter()
    losses: list[float] = []
    history: list[dict] = []
    carry: list = []  # documents drawn but not yet packed (see _batch)
    bar = tqdm(range(cfg.steps), desc="toy pretrain", disable=not progress)
    for step in bar:
        stop.check()  # a safe point per step (anchorft.stop): a signal swallowed in the last step stops here
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg)
        ids, labels, pos, mask = _batch(cfg, tok, rng, carry)  # (B, T) each; mask (B, 1, T, T) or None
        loss = model(input_ids=ids, labels=labels, position_ids=pos, attention_mask=mask).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            acc = evaluate_skills(model, tok, list(sk.SKILLS), cfg.eval_items // 2, np.random.default_rng(1))
            history.append({"step": step + 1, "loss": float(np.mean(losses[-50:])), "greedy_accuracy": acc})
            tqdm.write(f"step {step + 1}: " + " ".join(f"{k}={v:.2f}" for k, v in acc.items()))
            model.train()
    train_seconds = time.perf_counter() - t0
    model.eval()
    eval_rng = np.random.default_rng(10_000 + cfg.seed)
    acc = evaluate_skills(model, tok, list(sk.SKILLS), cfg.eval_items, eval_rng)
    with quiet_model_bars():
        model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    metrics = {
        "params": n_params,
        "train_seconds": train_seconds,
        "seconds_per_step": train_seconds / cfg.steps,
        "final_loss": float(np.mean(losses[-50:])),
        "greedy_accuracy": acc,
        "ood_mean": float(np.mean([acc[s] for s in sk.OOD_SKILLS])),
        "history": history,
        "config": dataclasses.asdict(cfg),
        "key": cfg.key(),
        "code_version": code_version(),
    }
    metrics = with_provenance(metrics)
    write_loss_plot(losses, out_dir / "loss.png", title=f"toy pretrain: {n_params:,} parameters, seed {cfg.seed}")
    write_json(out_dir / "metrics.json", metrics, indent=2)
    write_json(out_dir / "pretrain_config.json", dataclasses.asdict(cfg), indent=2)
    return metrics


def write_loss_plot(losses: list[float], path: str | Path, title: str = "toy pretrain", window: int = 50) -> None:
    """loss.png: the pretraining loss per step (faint) and its running mean over `window` steps."""
    from anchorft.io import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    steps = np.arange(1, len(losses) + 1)
    ax.plot(steps, losses, color="0.75", lw=0.6, label="per step")
    if len(losses) >= window:
        mean = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], mean, color="C0", label=f"mean of the last {window} steps")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel("training loss (mean token NLL, nats)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def cached_model(cfg: PretrainConfig) -> Path | None:
    """The cache directory of `cfg`'s pretrained model when it is complete (weights and metrics), else None."""
    path = cache_root() / cfg.key()
    return path if (path / "metrics.json").exists() and (path / "model.safetensors").exists() else None


def _remove_stale_temps(root: Path) -> None:
    """Remove the cache's NAME.tmpPID folders that a run killed with SIGKILL left: no such process here, and
    untouched for a day (the cache may be shared by machines, whose process ids this one cannot see)."""
    if not root.is_dir():
        return
    for p in root.glob("*.tmp*"):
        pid = p.name.rpartition(".tmp")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if time.time() - p.stat().st_mtime < 86400:
                continue
        except OSError:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def pretrained_model(cfg: PretrainConfig, progress: bool = True) -> Path:
    """Directory of the pretrained model for `cfg`, pretraining it first when not cached."""
    cfg.validate()
    if (cached := cached_model(cfg)) is not None:
        return cached
    path = cache_root() / cfg.key()
    _remove_stale_temps(path.parent)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        pretrain(cfg, tmp, progress=progress)
    except BaseException:  # an error, Ctrl-C or SIGTERM (anchorft.cli): no half-written model stays in the cache
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if path.exists():  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, path)
    return path


def pretrain_into(cfg: PretrainConfig, out: str | Path, no_cache: bool = False) -> dict:
    """`toy pretrain`: the model of `cfg` in `out` (pretrained there with `no_cache`; else the cached one, pretrained
    into the cache first when missing, copied); returns its metrics. Says on stdout which it did."""
    out = Path(out)
    if no_cache:
        print(f"toy pretrain: pretraining {cfg.steps} steps into {out}", flush=True)
        return pretrain(cfg, out)
    if (cached := cached_model(cfg)) is not None:
        print(f"toy pretrain: reusing the cached model {cached} (same config and code; --no-cache trains again)")
    else:
        print(f"toy pretrain: pretraining {cfg.steps} steps (cached in {cache_root()})", flush=True)
    src = pretrained_model(cfg)
    if src.resolve() != out.resolve():
        shutil.copytree(src, out, dirs_exist_ok=True)
    metrics = json.loads((out / "metrics.json").read_text())
    if not (out / "loss.png").is_file():  # a model cached before the plot was written
        print("toy pretrain: this cached model has no loss.png (--no-cache pretrains again and draws it)")
    return metrics


def pretrain_claimed(
    cfg: PretrainConfig, out: str | Path, no_cache: bool = False, overwrite: bool = False
) -> dict | None:
    """`anchorft toy pretrain`: `pretrain_into` in the folder `out`, claimed for `cfg` (the same config: reused,
    None)."""
    cfg.validate()
    return run_claimed(out, "toy pretrain", dataclasses.asdict(cfg), lambda claim: pretrain_into(cfg, out, no_cache),
                       overwrite=overwrite)  # fmt: skip
