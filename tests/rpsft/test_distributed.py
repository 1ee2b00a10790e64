"""2-process runs on CPU (gloo, torchrun): DDP training equals the 1-process run; FSDP2 shard-aware penalty.

Slow (each process imports torch/transformers/trl: ~20-50 s on the shared 2-core machine): run with -m slow.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        WORKER,
        *args,
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]


@pytest.mark.slow
def test_ddp_two_processes_match_one(rp, tokenizer_dir, tokenizer, tmp_path):
    sys.path.insert(0, os.path.dirname(__file__))
    from dist_worker import ddp_kwargs

    from anchorft.rpsft.trainer import RPSFTTrainer

    torchrun("ddp", tokenizer_dir, str(tmp_path / "ddp"))
    ddp_w = load_file(str(tmp_path / "ddp" / "w.safetensors"))
    ddp_log = json.loads((tmp_path / "ddp" / "log.json").read_text())
    # one process, same global batch (2 ranks x 2 = 4 per micro-batch, 2 accumulation steps)
    args = rp.base_args(str(tmp_path / "one"), **ddp_kwargs(per_device=4))
    tr = RPSFTTrainer(
        rp.tiny_model("llama", len(tokenizer)), args, train_dataset=rp.pc_dataset(16), processing_class=tokenizer
    )
    tr.train()
    for n, p in tr.model.named_parameters():
        torch.testing.assert_close(ddp_w[n], p.detach(), rtol=1e-4, atol=2e-5, msg=n)
    pen_ddp = [h["anchor/penalty"] for h in ddp_log if "anchor/penalty" in h]
    pen_one = [h["anchor/penalty"] for h in tr.state.log_history if "anchor/penalty" in h]
    assert pen_ddp[-1] > 0 and pen_ddp == pytest.approx(pen_one, rel=1e-3)


@pytest.mark.slow
def test_fsdp2_shard_aware_penalty_grad(tmp_path):
    torchrun("fsdp2", str(tmp_path))
    res = json.loads((tmp_path / "fsdp2.json").read_text())
    assert res["sharded"] == "DTensor"
    assert res["got"]["penalty"] == pytest.approx(res["want"]["penalty"], rel=1e-5)
    assert res["max_rel_err"] < 1e-4
