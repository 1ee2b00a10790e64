"""2-process runs on CPU (gloo, torchrun): DDP and DeepSpeed ZeRO-2 / ZeRO-3 training equal the 1-process
run; FSDP2 shard-aware penalty; the anchor on ZeRO-3 partitioned parameters.

Slow (each process imports torch/transformers/trl: ~20-50 s on the shared 2-core machine): run with -m slow.
The DeepSpeed tests need `pip install deepspeed` (DS_BUILD_OPS=0 is enough: its CPU accelerator, gloo).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")


needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (pip install deepspeed)"
)


def torchrun(*args: str, **env_extra: str) -> None:
    # --standalone: the launcher binds a free port itself (one picked here first could be taken meanwhile)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **env_extra}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", WORKER, *args]
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
    # built on the sharded parameters (each matrix gathered once): the bases and fingerprint of the unsharded
    # model, and a shard-aware penalty of 0 at the weights it was built from
    assert res["after_shard_fingerprint_equal"] and res["after_shard_bases_err"] < 1e-5
    assert abs(res["after_shard_penalty"]) < 1e-8


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_two_processes_match_one(stage, rp, tokenizer_dir, tokenizer, tmp_path):
    """RPSFTTrainer under DeepSpeed ZeRO-2 / ZeRO-3 (2 processes, gradient accumulation 2, tied embeddings)
    gives the weights and the penalty log of the 1-process run without DeepSpeed."""
    sys.path.insert(0, os.path.dirname(__file__))
    from dist_worker import zero_kwargs

    from anchorft.rpsft.trainer import RPSFTTrainer

    out = tmp_path / f"zero{stage}"
    torchrun("zero", str(stage), tokenizer_dir, str(out), DS_ACCELERATOR="cpu")
    ds_w = load_file(str(out / "w.safetensors"))
    ds = json.loads((out / "log.json").read_text())
    assert ds["mode"] == "autograd"
    # the anchor is built once the engine exists (after accelerator.prepare): one SVD per matrix, none before
    assert len(ds["svd"]) == 15 and set(ds["svd"]) == {"DeepSpeedEngine"}
    assert (ds["zero3_params"] > 0) == (stage == 3)  # ZeRO-3 really partitioned the parameters
    args = rp.base_args(str(tmp_path / "one"), **zero_kwargs(per_device=4))
    tr = RPSFTTrainer(
        rp.tiny_model("llama", len(tokenizer), tie=True),
        args,
        train_dataset=rp.pc_dataset(16),
        processing_class=tokenizer,
    )
    tr.train()
    # dropping the penalty (lambda 0) or counting it twice (lambda 40) moves some weight by > 50 % (max abs
    # relative to the matrix's largest entry); the runs agree to ~6e-5
    for n, p in tr.model.named_parameters():
        w = p.detach()
        assert float((ds_w[n] - w).abs().max() / w.abs().max()) < 1e-3, n
    pen_ds = [h["anchor/penalty"] for h in ds["log"] if "anchor/penalty" in h]
    pen_one = [h["anchor/penalty"] for h in tr.state.log_history if "anchor/penalty" in h]
    assert pen_ds[-1] > 0 and pen_ds == pytest.approx(pen_one, rel=1e-4)


@pytest.mark.slow
@needs_deepspeed
def test_deepspeed_zero3_anchor_on_partitioned_parameters(tmp_path):
    """On ZeRO-3 partitioned weights (2 ranks, uneven partitions, tied embeddings, k_proj / v_proj in the L2
    fallback, whose backward gathers the weight again): the anchor built by gathering
    equals the unpartitioned one, the penalty too, and the engine's gradient of loss + 3 R equals autograd loss
    gradient + the closed-form 3 dR/dW; add_penalty_grad_ refuses (the gradient lives in the engine)."""
    torchrun("zero3_anchor", str(tmp_path), DS_ACCELERATOR="cpu")
    res = json.loads((tmp_path / "zero3_anchor.json").read_text())
    assert res["partitioned"] and res["entries"] == 15 and res["fallbacks"] == 4 and res["grads_compared"] > 0
    assert res["fingerprint_equal"] and res["bases_max_abs_err"] < 1e-6
    assert 0.45 < res["w0_held"] <= 0.55  # the fallbacks' W_0 held like the weights: about half on each of 2 ranks
    assert res["penalty"] > 0 and res["penalty"] == pytest.approx(res["want_penalty"], rel=1e-5)
    assert res["grad_max_rel_err"] < 1e-4
    assert "ZeRO-3" in res["refused"]
