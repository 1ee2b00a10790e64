"""Fixtures: a tiny random Llama with a byte-level BPE tokenizer trained here with `tokenizers`."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

# OpenMP's default wait (spin, then sleep) lets an idle torch thread of one process burn the core that another
# needs; the suite runs on two pytest-xdist workers and their subprocesses on two cores, so every process it starts
# waits passively (the default suite: 234 s wall and 414 s user without it, 188 s and 334 s with it, same machine).
# Set before torch loads (OpenMP reads it once, at load); a value set by the user wins. The `anchorft` command's own
# policy (anchorft.threads) does the same for runs beside each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "torch" in sys.modules:
    warnings.warn("torch was loaded before tests/conftest.py: OMP_WAIT_POLICY=PASSIVE comes too late", stacklevel=1)

# The cyclic garbage collector scans every object it tracks, and after torch, transformers and TRL load that is
# millions of module-level objects that live as long as the process. accelerate runs a full collection at each
# trainer's start and end (free_memory), so each costs about 0.3-0.5 s here (docs/testing.md has what freezing saved).
# Moving what is alive once a test's imports are done into the permanent generation (gc.freeze) leaves those objects
# out of later collections; objects freed by reference counting are freed as before, and each test's own garbage
# is still collected. Done again whenever a test has imported many modules since the last freeze.
_FREEZE_AFTER_NEW_MODULES = 200
_modules_at_freeze = [0]


@pytest.fixture(autouse=True)
def _freeze_imported_modules() -> None:
    """Collect what is garbage now, then keep every live object out of later collections (gc.freeze)."""
    if len(sys.modules) - _modules_at_freeze[0] >= _FREEZE_AFTER_NEW_MODULES:
        gc.collect()
        gc.freeze()
        _modules_at_freeze[0] = len(sys.modules)


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

CORPUS = [
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "What is 12 + 30? The answer is \\boxed{42}. Choices: A. one B. two C. three D. four",
    "Find the value of $x$ such that $x^2 = 4$. So $x = \\frac{1}{2}$ and \\boxed{2}.",
    "Please answer with the single correct option letter (e.g., A). The answer is \\boxed{C}.",
] * 20


def benchmarks_root() -> Path:
    from anchorft.eval.benchmarks import benchmarks_dir

    return benchmarks_dir()


def save_tiny_model(out: Path, corpus: list[str], vocab_size: int = 400, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)  # test fixture only: the library never seeds globally
    model = LlamaForCausalLM(cfg)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    corpus = list(CORPUS)
    root = benchmarks_root()
    if root.is_dir():  # a vocabulary that covers the benchmark prompts keeps them short
        for f in sorted(root.glob("*/*.jsonl")):
            with open(f, encoding="utf-8") as fh:
                corpus += [line for _, line in zip(range(30), fh)]
    return save_tiny_model(tmp_path_factory.mktemp("tiny_llama"), corpus)


@pytest.fixture(scope="session")
def smoke_cache(tmp_path_factory) -> Path:
    """An `ANCHORFT_CACHE` folder holding the smoke preset's pretrained base, pretrained once for the whole run and
    shared by the pytest-xdist workers (a file lock: the first worker pretrains, the others wait and read). For the
    end-to-end tests that need a base, not a pretraining: pretraining itself, its cache and its temp folders are
    tested in tests/toy/test_pretrain.py and tests/test_runs_safety.py, each in a fresh cache."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker's base temp lies in
    cache = root / "smoke-cache"
    with FileLock(str(root / "smoke-cache.lock")):
        if not (cache / "ready").is_file():
            from anchorft.studies.testbed.compare_config import load_config
            from anchorft.toy.pretrain import pretrained_model

            mp = pytest.MonkeyPatch()
            mp.setenv("ANCHORFT_CACHE", str(cache))
            try:
                pretrained_model(load_config("smoke").pretrain, progress=False)
            finally:
                mp.undo()
            (cache / "ready").touch()
    return cache


@pytest.fixture(scope="session")
def checker():
    """One math-verify worker for the session (each start imports sympy: seconds on a busy machine)."""
    from anchorft.eval.answers import MathChecker

    with MathChecker(timeout_s=30) as c:
        yield c


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The CPU machines are shared: one intra-op thread is much faster than two contended ones here."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def bench_root() -> Path:
    root = benchmarks_root()
    if not root.is_dir():
        pytest.skip(f"benchmark files not found at {root} (set ANCHORFT_BENCHMARKS or run `anchorft data benchmarks`)")
    return root


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class Children:
    """The processes a test starts, each in a process group of its own; none outlives the test: at its end, passed
    or failed, every group still running is killed (SIGKILL) and its leader reaped. A test that waits with a timeout
    and fails would otherwise leave its child running (training at full CPU) for the rest of the suite."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    @staticmethod
    def read_stderr(p: subprocess.Popen) -> list[str]:
        """`p`'s stderr (text, piped) read as it comes, into the returned list, by a daemon thread."""
        err: list[str] = []
        threading.Thread(target=lambda: err.extend(iter(lambda: p.stderr.read(64), "")), daemon=True).start()
        return err

    @staticmethod
    def wait_until(p: subprocess.Popen, cond: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
        """Until `cond()`; fails (with `what()`) if `p` exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while not cond():
            assert p.poll() is None, f"exited with {p.returncode} before the condition held: {what()[-2000:]}"
            assert time.monotonic() < deadline, f"condition not met in {timeout} s: {what()[-2000:]}"
            time.sleep(0.1)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def children():
    """`Children`: start processes that cannot outlive the test."""
    kids = Children()
    yield kids
    kids.close()


@pytest.fixture
def stop_handlers():
    """The stop's state and the SIGTERM/SIGINT handlers as they were before the test, restored after it (for tests
    that install, record or take back `anchorft.stop`'s handlers)."""
    import signal

    from anchorft import stop

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stop.clear()
    yield
    for s, h in before.items():
        signal.signal(s, h)
    stop._installed.clear()
    stop.clear()
