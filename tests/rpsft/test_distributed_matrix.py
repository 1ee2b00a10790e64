"""Every method under every launcher, 2 processes on CPU (torchrun, gloo): DDP, DeepSpeed ZeRO-2 / ZeRO-3, FSDP2.

One 2-process launch per launcher (`matrix_worker.py`, cached for the module) trains sft, dft, iw_sft, l2, rpsft
(block), rpsft (subspace kind) and rpsft with the remainder L2 through `anchorft.rpsft.train.train`, each with a
checkpoint at step 2 of 4, ends with the final `save_model` (as `anchorft train` does), and resumes each from its
step-2 checkpoint. Each (method, launcher) cell checks: the engine is the launcher's (DeepSpeedEngine, DTensor
parameters, DDP); the final weights are a `save_pretrained` folder that loads into a fresh model with every weight;
the resumed run reaches the same weights (max abs difference <= 1e-6); the weights equal a one-process run with the
same global batch (max |difference| / max |weight| <= 1e-3 per matrix).

Slow (4 launches, each process imports torch / transformers / TRL / DeepSpeed): `make test-dist`, or
`pytest -m '' -k distributed`. The DeepSpeed cells need `deepspeed` (the dev extras; DS_BUILD_OPS=0 is enough).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from matrix_worker import METHODS, N_ROWS, PER_DEVICE, train_kwargs  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "matrix_worker.py")
ENGINES = {
    "ddp": "DistributedDataParallel",
    "zero2": "DeepSpeedEngine",
    "zero3": "DeepSpeedEngine",
    "fsdp2": "DTensor",
}
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, rp):
    """A tiny Llama and its tokenizer, saved with save_pretrained (the runs load it by path, as `anchorft train`)."""
    path = str(tmp_path_factory.mktemp("base"))
    tok = rp.build_tokenizer(path)
    rp.tiny_model("llama", len(tok)).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def launch(base_dir, tmp_path_factory):
    """launch(launcher) -> (output folder, log tail): one torchrun of the worker per launcher, run on first use."""
    done: dict[str, tuple[str, str]] = {}

    def run(launcher: str) -> tuple[str, str]:
        if launcher not in done:
            out = str(tmp_path_factory.mktemp(launcher))
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"}
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
            cmd += ["--master_port", str(_free_port()), WORKER, launcher, base_dir, out, *METHODS]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            tail = "" if res.returncode == 0 else f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-5000:]}"
            done[launcher] = (out, tail)
        return done[launcher]

    return run


@pytest.fixture(scope="module")
def one_process(base_dir, tmp_path_factory, rp):
    """one_process(method) -> {name: weight} after the same run in one process (per-device batch doubled)."""
    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.train import train

    done: dict[str, dict[str, torch.Tensor]] = {}

    def run(method: str) -> dict[str, torch.Tensor]:
        if method not in done:
            kw = dict(train_kwargs(method, 2 * PER_DEVICE), save_strategy="no")
            args = rp.base_args(str(tmp_path_factory.mktemp(f"one-{method}")), **kw)
            tr = train(args, base_dir, rp.pc_dataset(N_ROWS), tokenizer=load_tokenizer(base_dir))
            done[method] = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
        return done[method]

    return run


def _load(folder: str) -> dict[str, torch.Tensor]:
    """The weights of a save_pretrained folder, loaded into a fresh model (every weight present)."""
    from transformers import AutoModelForCausalLM

    assert os.path.isfile(os.path.join(folder, "model.safetensors")), f"no model.safetensors in {os.listdir(folder)}"
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"] and not info["unexpected_keys"], info
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(ENGINES))
@pytest.mark.parametrize("method", list(METHODS))
def test_distributed_cell(method, launcher, launch, one_process, base_dir):
    if launcher.startswith("zero") and not HAS_DEEPSPEED:
        pytest.skip("deepspeed is not installed (the dev extras install it)")
    out, tail = launch(launcher)
    info_path = os.path.join(out, method, "info.json")
    assert os.path.isfile(info_path), f"{launcher}: {method} did not finish\n{tail}"
    with open(info_path) as f:
        info = json.load(f)
    for run in ("run", "resume"):
        assert info[run]["engine"] == ENGINES[launcher], (run, info[run])
        assert info[run]["global_step"] == train_kwargs(method, 1)["max_steps"]
    run_w = _load(os.path.join(out, method, "run"))
    resumed = _load(os.path.join(out, method, "resume"))
    base = _load(base_dir)
    one = one_process(method)
    assert max(float((run_w[n] - base[n]).abs().max()) for n in base) > 1e-2  # the run trained
    for n, w in one.items():
        assert float((resumed[n] - run_w[n]).abs().max()) <= 1e-6, f"resume differs: {n}"
        assert float((run_w[n] - w).abs().max() / w.abs().max()) <= 1e-3, f"differs from one process: {n}"
