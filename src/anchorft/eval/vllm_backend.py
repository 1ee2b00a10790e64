"""The vLLM backend (the `backend.Backend` protocol): data-parallel engines over the node's GPUs.

Unverified until it has run on a GPU: the CPU tests replace the engine by a stand-in that records
what it is given, and cover everything up to the engine call: request building (token ids of the
chat-formatted prompt, no second BOS), sampling parameters (n, temperature, top_p, max_tokens and a
per-request seed from (seed, item index), so shards and resumed runs draw the same), sharding over
data-parallel ranks, the worker loop, and mapping results back to prompts.

With `data_parallel_size` D > 1, D worker processes each own `tensor_parallel_size` GPUs (through
CUDA_VISIBLE_DEVICES) and one `vllm.LLM` with prefix caching on; prompts are dealt round-robin.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from anchorft.eval.backend import row_seed

__all__ = ["VLLMOptions", "check_vllm", "build_requests", "map_results", "shard", "VLLMBackend"]


@dataclass
class VLLMOptions:
    tensor_parallel_size: int = 1
    data_parallel_size: int | None = None  # None: every GPU of the node // tensor_parallel_size
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str = "auto"


def check_vllm() -> int:
    """Number of CUDA devices; a one-line ValueError when vLLM or CUDA is missing."""
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("--backend vllm: vllm is not installed (pip install 'anchorft[vllm]'); use --backend hf")
    import torch  # lazy: loads torch

    if not torch.cuda.is_available():
        raise ValueError("--backend vllm: no CUDA device here (vLLM needs a GPU); use --backend hf")
    return torch.cuda.device_count()


def build_requests(
    token_ids: Sequence[Sequence[int]],
    keys: Sequence[int],
    *,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
) -> list[tuple[dict, dict]]:
    """One (prompt, sampling-parameter kwargs) pair per prompt: the prompt as token ids (the chat
    template already holds BOS), the release's sampling settings, a seed per prompt."""
    if len(token_ids) != len(keys):
        raise ValueError("one key per prompt")
    kw = dict(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0, max_tokens=max_new_tokens)
    return [
        ({"prompt_token_ids": list(ids)}, {**kw, "seed": row_seed(seed, key, 0)}) for ids, key in zip(token_ids, keys)
    ]


def map_results(outputs: Sequence, n: int) -> list[list[str]]:
    """vLLM RequestOutputs (in request order) -> per prompt its n completion texts, by completion index."""
    res = []
    for o in outputs:
        comps = sorted(o.outputs, key=lambda c: c.index)
        if len(comps) != n:
            raise RuntimeError(f"vLLM returned {len(comps)} completions for a request of n={n}")
        res.append([c.text for c in comps])
    return res


def shard(count: int, ranks: int) -> list[list[int]]:
    """Round-robin positions 0..count-1 over `ranks` (rank r gets r, r + ranks, ...)."""
    return [list(range(r, count, ranks)) for r in range(ranks)]


def _run_engine(engine, sampling_cls, requests: list[tuple[dict, dict]], n: int) -> list[list[str]]:
    if not requests:
        return []
    prompts = [p for p, _ in requests]
    params = [sampling_cls(**kw) for _, kw in requests]
    return map_results(engine.generate(prompts, params, use_tqdm=False), n)


def _serve(conn, make_engine: Callable[[], object], sampling_cls) -> None:
    """Worker loop: build the engine, then answer (requests, n) messages until None."""
    engine = make_engine()
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        try:
            conn.send(("ok", _run_engine(engine, sampling_cls, *msg)))
        except Exception as e:  # pragma: no cover - reported to the parent
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _vllm_engine(model_dir: str, options: dict, seed: int):  # pragma: no cover - needs vLLM and a GPU
    from vllm import LLM  # lazy: the vllm extra

    keys = ["tensor_parallel_size", "enable_prefix_caching", "gpu_memory_utilization", "dtype"]
    if options["max_model_len"]:
        keys.append("max_model_len")
    return LLM(model=model_dir, seed=seed, trust_remote_code=False, **{k: options[k] for k in keys})


def _process_main(conn, gpus: str, model_dir: str, options: dict, seed: int) -> None:  # pragma: no cover
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    from vllm import SamplingParams  # lazy: the vllm extra

    _serve(conn, lambda: _vllm_engine(model_dir, options, seed), SamplingParams)


class VLLMBackend:
    """`generate(prompts token ids, keys, ...)` over D data-parallel engines.

    `engine_factory(rank)` and `sampling_cls` replace vLLM (tests: a stand-in engine, run in threads);
    without them each rank is a spawned process holding a `vllm.LLM`."""

    def __init__(
        self,
        model_dir: str,
        options: VLLMOptions | None = None,
        *,
        seed: int = 0,
        n_gpus: int | None = None,
        engine_factory: Callable[[int], object] | None = None,
        sampling_cls: type | None = None,
    ) -> None:
        self.options = options or VLLMOptions()
        tp = self.options.tensor_parallel_size
        if engine_factory is None:
            n_gpus = check_vllm() if n_gpus is None else n_gpus
            if tp < 1 or tp > n_gpus:
                raise ValueError(f"--tensor-parallel {tp}: the node has {n_gpus} GPU(s)")
        dp = self.options.data_parallel_size or max(1, (n_gpus or tp) // tp)
        if engine_factory is None and dp * tp > n_gpus:
            raise ValueError(f"data parallel {dp} x tensor parallel {tp} needs {dp * tp} GPUs, the node has {n_gpus}")
        self.dp = dp
        self.conns, self.workers = [], []
        for rank in range(dp):
            if engine_factory is not None:
                parent, child = mp.Pipe()
                w = threading.Thread(
                    target=_serve, args=(child, lambda r=rank: engine_factory(r), sampling_cls), daemon=True
                )
            else:  # pragma: no cover - needs vLLM and GPUs
                ctx = mp.get_context("spawn")
                parent, child = ctx.Pipe()
                gpus = ",".join(str(g) for g in range(rank * tp, (rank + 1) * tp))
                w = ctx.Process(target=_process_main, args=(child, gpus, model_dir, asdict(self.options), seed))
            w.start()
            self.conns.append(parent)
            self.workers.append(w)
        for c in self.conns:
            status, _ = c.recv()
            if status != "ready":  # pragma: no cover
                raise RuntimeError("a vLLM worker failed to start")

    def generate(
        self,
        token_ids: Sequence[Sequence[int]],
        keys: Sequence[int],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]:
        """`backend.Backend.generate`."""
        reqs = build_requests(
            token_ids, keys, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
        )
        parts = shard(len(reqs), self.dp)
        for conn, part in zip(self.conns, parts):
            conn.send(([reqs[i] for i in part], n))
        out: list[list[str]] = [[] for _ in reqs]
        for conn, part in zip(self.conns, parts):
            status, res = conn.recv()
            if status != "ok":
                raise RuntimeError(f"vLLM worker: {res}")
            for i, texts in zip(part, res):
                out[i] = texts
        return out

    def close(self) -> None:
        for c in self.conns:
            with contextlib.suppress(OSError):  # BrokenPipeError too
                c.send(None)
        for w in self.workers:
            w.join(timeout=60)
        self.conns, self.workers = [], []
