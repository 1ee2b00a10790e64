"""Worker for tests/rpsft/test_distributed.py, run under torchrun (gloo, CPU).

torchrun --nproc_per_node 2 dist_worker.py ddp  TOKENIZER_DIR OUT_DIR
torchrun --nproc_per_node 2 dist_worker.py fsdp2 OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)


def ddp(tok_dir: str, out: str) -> None:
    from conftest import base_args, pc_dataset, tiny_model
    from safetensors.torch import save_file

    from anchorft.rpsft.data import load_tokenizer
    from anchorft.rpsft.trainer import RPSFTTrainer

    tok = load_tokenizer(tok_dir)
    model = tiny_model("llama", len(tok))
    args = base_args(out, ddp_backend="gloo", **ddp_kwargs(per_device=2))
    tr = RPSFTTrainer(model, args, train_dataset=pc_dataset(16), processing_class=tok)
    tr.train()
    if tr.args.process_index == 0:
        save_file(
            {n: p.detach().contiguous() for n, p in tr.model.named_parameters()}, os.path.join(out, "w.safetensors")
        )
        with open(os.path.join(out, "log.json"), "w") as f:
            json.dump(tr.state.log_history, f)


def ddp_kwargs(per_device: int) -> dict:
    return dict(
        method="rpsft",
        anchor_lambda=20.0,
        max_steps=3,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=2,
        learning_rate=3e-2,
    )


def fsdp2(out: str) -> None:
    """The shard-aware penalty gradient on FSDP2 (fully_shard) parameters equals the unsharded one."""
    from conftest import tiny_model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from anchorft.rpsft.anchor import SubspaceAnchor

    dist.init_process_group("gloo")
    m = tiny_model("llama", 63, hidden=40, inter=51)  # odd row counts: uneven shards
    ref = tiny_model("llama", 63, hidden=40, inter=51)
    anchor = SubspaceAnchor.from_model(m, rank=5)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p, q in zip(m.parameters(), ref.parameters()):
            d = 0.05 * torch.randn(p.shape, generator=g)
            p.add_(d)
            q.add_(d)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    x = torch.randint(0, 63, (2, 7), generator=torch.Generator().manual_seed(2))
    m(input_ids=x).logits.sum().backward()
    ref(input_ids=x).logits.sum().backward()
    got = anchor.add_penalty_grad_(m, 3.0)
    want = anchor.add_penalty_grad_(ref, 3.0)
    err = 0.0
    for (_n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        err = max(err, float((p.grad.full_tensor() - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-12)))
    if dist.get_rank() == 0:
        with open(os.path.join(out, "fsdp2.json"), "w") as f:
            json.dump({"got": got, "want": want, "max_rel_err": err, "sharded": type(p).__name__}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "ddp":
        ddp(sys.argv[2], sys.argv[3])
    else:
        fsdp2(sys.argv[2])
