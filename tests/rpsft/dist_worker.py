"""Worker for tests/rpsft/test_trainer_multiprocess.py, run under torchrun (gloo, CPU).

torchrun --nproc_per_node 2 dist_worker.py ddp  TOKENIZER_DIR OUT_DIR
torchrun --nproc_per_node 2 dist_worker.py fsdp2 OUT_DIR
DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 dist_worker.py zero STAGE TOKENIZER_DIR OUT_DIR
DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 dist_worker.py zero3_anchor OUT_DIR
DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 dist_worker.py held STAGE OUT_DIR  (STAGE: zero2, zero3, fsdp2)
torchrun --nproc_per_node 2 dist_worker.py signal RANKS_DIR INJECT train ARGS...  (`anchorft train ARGS`)
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)


def ddp(tok_dir: str, out: str) -> None:
    from safetensors.torch import save_file

    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.trainer import RPSFTTrainer
    from conftest import base_args, pc_dataset, tiny_model

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
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from anchorft.rpsft.anchor import SubspaceAnchor
    from conftest import tiny_model

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
    # the anchor built after sharding (as the trainer builds it, after prepare) equals the one built unsharded
    a_sh = SubspaceAnchor.from_model(m, rank=5).to(model=m)
    a_un = SubspaceAnchor.from_model(ref, rank=5)
    bases_err = max(
        float((t - a_un.entries[i].tensors()[k]).abs().max())
        for i, e in enumerate(a_sh.entries)
        for k, t in e.tensors().items()
    )
    sh_pen = a_sh.add_penalty_grad_(m, 3.0)
    if dist.get_rank() == 0:
        with open(os.path.join(out, "fsdp2.json"), "w") as f:
            res = {"got": got, "want": want, "max_rel_err": err, "sharded": type(p).__name__}
            res.update(
                after_shard_bases_err=bases_err, after_shard_fingerprint_equal=a_sh.fingerprint == a_un.fingerprint
            )
            res["after_shard_penalty"] = sh_pen["penalty"]
            json.dump(res, f)
    dist.destroy_process_group()


def deepspeed_state() -> None:
    """Start DeepSpeed (gloo, CPU accelerator) and the accelerate state the Trainer adopts.

    accelerate has no CPU DeepSpeed: with no GPU its backend detection finds nothing and records one
    process, so this fills in the process group DeepSpeed started (the Trainer then runs the real
    DeepSpeed engine; `accelerator_config={"use_configured_state": True}` makes it use this state).
    """
    from conftest import import_deepspeed

    deepspeed = import_deepspeed()
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    deepspeed.init_distributed(dist_backend="gloo")
    st = PartialState()
    st.backend = "gloo"
    st.num_processes, st.process_index = dist.get_world_size(), dist.get_rank()
    st.local_process_index = int(os.environ["LOCAL_RANK"])
    st.distributed_type = DistributedType.DEEPSPEED


def zero_kwargs(per_device: int) -> dict:
    return dict(ddp_kwargs(per_device), method="rpsft", max_grad_norm=1.0)


def zero(stage: str, tok_dir: str, out: str) -> None:
    """RPSFTTrainer under DeepSpeed ZeRO-`stage` (2 processes); writes the final full weights and the log."""
    from safetensors.torch import save_file

    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.trainer import RPSFTTrainer
    from conftest import base_args, pc_dataset, tiny_model

    deepspeed_state()
    ds_config = {
        "zero_optimization": {"stage": int(stage)},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
    }
    tok = load_tokenizer(tok_dir)
    model = tiny_model("llama", len(tok), tie=True)
    args = base_args(
        out, deepspeed=ds_config, accelerator_config={"use_configured_state": True}, **zero_kwargs(per_device=2)
    )
    tr = RPSFTTrainer(model, args, train_dataset=pc_dataset(16), processing_class=tok)
    assert tr.is_deepspeed_enabled and tr.accelerator.state.deepspeed_plugin.zero_stage == int(stage)
    import anchorft.rpsft.anchor_store as anchor_mod  # where the bases are computed

    svd_wrappers = []  # for each SVD: the type of the trainer's wrapped model (DeepSpeedEngine once prepared)
    top_k = anchor_mod.top_k_bases

    def counted(*a, **k):
        svd_wrappers.append(type(tr.model_wrapped).__name__)
        return top_k(*a, **k)

    anchor_mod.top_k_bases = counted
    tr.train()
    from conftest import import_deepspeed

    deepspeed = import_deepspeed()

    params = dict(tr.model.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=None):
        weights = {n: p.detach().clone().contiguous() for n, p in params.items()}
    z3 = [n for n, p in params.items() if hasattr(p, "ds_id")]
    if tr.args.process_index == 0:
        save_file(weights, os.path.join(out, "w.safetensors"))
        with open(os.path.join(out, "log.json"), "w") as f:
            json.dump(
                {"log": tr.state.log_history, "zero3_params": len(z3), "mode": tr._anchor_mode, "svd": svd_wrappers},
                f,
            )


def zero3_anchor(out: str) -> None:
    """On ZeRO-3 partitioned parameters: the anchor built, its penalty and the engine's gradient of
    loss + scale * penalty equal the same on an unpartitioned copy (autograd loss + closed-form penalty
    gradient); add_penalty_grad_ refuses."""
    from conftest import import_deepspeed

    deepspeed = import_deepspeed()
    from deepspeed.utils import safe_get_full_grad

    from anchorft.rpsft.anchor import SubspaceAnchor
    from anchorft.rpsft.sharding import is_zero3, take_part

    deepspeed.init_distributed(dist_backend="gloo")
    from conftest import tiny_model

    ref = tiny_model("llama", 63, hidden=40, inter=51, tie=True)  # odd sizes: uneven partitions
    m = tiny_model("llama", 63, hidden=40, inter=51, tie=True)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3},
        "zero_allow_untested_optimizer": True,
    }
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    engine, *_ = deepspeed.initialize(model=m, optimizer=opt, config=config)
    partitioned = all(is_zero3(p) and p.numel() == 0 for p in m.parameters())
    # k_proj / v_proj in the L2 fallback: its backward gathers the partitioned weight again (no D kept)
    fallback = {r"k_proj|v_proj": 10**6}
    a_ds = SubspaceAnchor.from_model(m, rank=5, rank_map=fallback)  # gathers each matrix
    a_ref = SubspaceAnchor.from_model(ref, rank=5, rank_map=fallback)
    # a fallback's W_0 is held like its partitioned weight: this rank's part of the whole
    held = [take_part(r.w0, e.w0_part) if e.w0_part else None for e, r in zip(a_ds.entries, a_ref.entries)]
    bases_err = max(
        float((t - (held[i] if k == "w0" and e.w0_part else a_ref.entries[i].tensors()[k])).abs().max())
        for i, e in enumerate(a_ds.entries)
        for k, t in e.tensors().items()
    )
    w0_held = sum(e.w0.numel() for e in a_ds.entries if e.fallback) / sum(
        e.w0.numel() for e in a_ref.entries if e.fallback
    )
    # move the weights (same displacement on both), then compare penalty and gradient
    g = torch.Generator().manual_seed(1)
    named_ref = dict(ref.named_parameters())
    with deepspeed.zero.GatheredParameters(list(m.parameters()), modifier_rank=0), torch.no_grad():
        for n, p in m.named_parameters():
            d = 0.05 * torch.randn(p.shape, generator=g)
            p.add_(d)
            named_ref[n].add_(d)
    # as in the trainer: the penalty joins the backward of a forward pass that used the weights (DeepSpeed
    # re-gathers each weight for that backward; PyTorch accumulates the gradient at the weight's full shape)
    x = torch.randint(0, 63, (2, 7), generator=torch.Generator().manual_seed(2))
    loss = engine(input_ids=x).logits.float().pow(2).mean()
    pen = a_ds.penalty(m)
    want_pen = a_ref.penalty(ref)
    engine.backward(loss + 3.0 * pen)
    ref(input_ids=x).logits.float().pow(2).mean().backward()
    a_ref.add_penalty_grad_(ref, 3.0)
    err, n_anchored = 0.0, 0
    for n, p in m.named_parameters():
        want = named_ref[n].grad
        got = safe_get_full_grad(p)
        if want is None:
            continue
        n_anchored += 1
        err = max(err, float((got - want).abs().max() / want.abs().max().clamp_min(1e-12)))
    try:
        a_ds.add_penalty_grad_(m, 1.0)
        refused = ""
    except ValueError as e:
        refused = str(e)
    if dist.get_rank() == 0:
        res = {
            "partitioned": partitioned,
            "entries": len(a_ds.entries),
            "fallbacks": sum(e.fallback for e in a_ds.entries),
            "w0_held": w0_held,
            "fingerprint_equal": a_ds.fingerprint == a_ref.fingerprint,
            "bases_max_abs_err": bases_err,
            "penalty": float(pen),
            "want_penalty": float(want_pen),
            "grad_max_rel_err": err,
            "grads_compared": n_anchored,
            "refused": refused,
        }
        with open(os.path.join(out, "zero3_anchor.json"), "w") as f:
            json.dump(res, f)


def signal_run(ranks_dir: str, inject: str, *argv: str) -> None:
    """`anchorft train ARGV` (cli.main) on each rank; with INJECT "1", rank 0 alone sends itself SIGTERM in step 2,
    from code that swallows what the handler raises. Writes RANKS_DIR/rankR.json: the command's exit code, the
    trainer's last step, whether this rank's handler saw a signal; exits 0 (the launcher would stop the other rank
    as soon as one exits with an error)."""
    import signal

    import anchorft.stop as stop
    from anchorft.cli import main
    from anchorft.rpsft.trainer import RPSFTTrainer

    rank = int(os.environ["RANK"])
    seen, steps = [], []
    real_handler, real_train, real_step = stop._handler, RPSFTTrainer.train, RPSFTTrainer.training_step

    def handler(signum, frame):
        seen.append(signum)
        real_handler(signum, frame)

    def train(self, *a, **k):
        try:
            return real_train(self, *a, **k)
        finally:
            steps.append(self.state.global_step)

    def step(self, *a, **k):
        if inject == "1" and rank == 0 and self.state.global_step == 1 and not seen:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except:  # noqa: E722 - library code that swallows the handler's exception (in a group it only records)
                pass
        return real_step(self, *a, **k)

    stop._handler, RPSFTTrainer.train, RPSFTTrainer.training_step = handler, train, step
    rc = main(list(argv))
    os.makedirs(ranks_dir, exist_ok=True)
    with open(os.path.join(ranks_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rc": rc, "step": steps[-1] if steps else None, "signalled": bool(seen)}, f)


def held(stage: str, out: str) -> None:
    """What one rank holds for IW-SFT's reference and L2's anchor under STAGE (zero2, zero3, fsdp2), measured: the
    reference placed as `prepare_reference` places it (TRL's prepare_deepspeed: partitioned under ZeRO-3, whole
    otherwise; fully_shard under FSDP2), the bytes of its parameters on this rank; the anchor's W_0; and the matrices
    autograd saves for the penalty's backward (ZeRO: the autograd form) or the closed form keeps (FSDP2), beyond the
    weights and W_0 themselves."""
    from anchorft.rpsft.anchor import SubspaceAnchor
    from anchorft.rpsft.sharding import is_zero3, local_rows
    from conftest import tiny_model

    kw = dict(hidden=40, inter=51)  # odd sizes: uneven partitions
    m, ref = tiny_model("llama", 63, **kw), tiny_model("llama", 63, **kw)
    anchor = SubspaceAnchor.from_model(m, rank=10**6)  # method l2: every matrix in the fallback
    whole_w0 = {e.name: e.w0.clone() for e in anchor.entries}
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01)
    if stage.startswith("zero"):
        from conftest import import_deepspeed

        deepspeed = import_deepspeed()
        from trl.models.utils import prepare_deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
        cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": int(stage[-1])},
               "zero_allow_untested_optimizer": True}  # fmt: skip
        deepspeed.initialize(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.0), config=cfg)

        class _Acc:  # what prepare_deepspeed reads of the accelerator
            class state:
                class deepspeed_plugin:
                    deepspeed_config = {**cfg, "zero_optimization": dict(cfg["zero_optimization"])}

        ref = prepare_deepspeed(ref, _Acc)
        anchor.to(model=m)  # as the trainers place an anchor once the model is prepared: W_0 held like W
        ref_bytes = sum((p.ds_tensor if is_zero3(p) else p).numel() * p.element_size() for p in ref.parameters())
        kept = []  # (is a weight or W_0, bytes) of each matrix saved, read when saved (a ZeRO-3 weight is whole then)

        def pack(t):
            ptrs = {q.untyped_storage().data_ptr() for q in [*m.parameters(), *(e.w0 for e in anchor.entries)]}
            if t.dim() == 2 or t.untyped_storage().data_ptr() in ptrs:  # (a flat part of W_0 under ZeRO-3)
                kept.append((t.untyped_storage().data_ptr() in ptrs, t.untyped_storage().nbytes()))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            penalty = float(anchor.penalty(m))
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for model in (m, ref):
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        ref_bytes = sum(p.to_local().numel() * p.element_size() for p in ref.parameters())
        anchor.to(model=m)  # as the trainers place an anchor once the model is prepared: W_0 held like W
        with torch.no_grad():
            items, sq, _ = anchor._blocks(m, differentiable=False)  # what the closed form holds until it adds grads
        penalty = float(sq.sum())
        kept = [(False, b.residual.untyped_storage().nbytes()) for b in items if b.residual is not None]
        # the closed form's gradient on the rows this rank holds: 2 x 3 (W - W_0), D recomputed per matrix
        x = torch.randint(0, 63, (2, 7), generator=torch.Generator().manual_seed(2))
        m(input_ids=x).logits.sum().backward()
        params = dict(m.named_parameters())
        before = {e.name: params[e.name].grad.to_local().clone() for e in anchor.entries}
        anchor.add_penalty_grad_(m, 3.0)
        grad_err = 0.0
        for e in anchor.entries:
            w_loc, g_loc, rows, _ = local_rows(params[e.name])
            want = 6.0 * (w_loc - whole_w0[e.name][rows if rows is not None else slice(None)])
            grad_err = max(grad_err, float((g_loc - before[e.name] - want).abs().max()))
    # W_0 held in parts is written whole: every rank gathers, rank 0 writes
    anchor.save(os.path.join(out, f"anchor_{stage}"), write=dist.get_rank() == 0)
    dist.barrier()
    saved = SubspaceAnchor.load(os.path.join(out, f"anchor_{stage}"))
    res = {
        "config": m.config.to_dict(),
        "penalty": penalty,  # every weight moved by 0.01: 1e-4 a number
        "numbers": sum(math.prod(e.shape) for e in anchor.entries),
        "saved_err": max(float((e.w0 - whole_w0[e.name]).abs().max()) for e in saved.entries),
        "reference_bytes": ref_bytes,
        "w0_bytes": sum(e.w0.numel() * e.w0.element_size() for e in anchor.entries),
        "saved_matrices": len(kept),
        "saved_new_bytes": sum(nbytes for known, nbytes in kept if not known),
        "entries": len(anchor.entries),
        "grad_err": grad_err if stage == "fsdp2" else None,
    }
    with open(os.path.join(out, f"held_{stage}_rank{dist.get_rank()}.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    if sys.argv[1] == "signal":
        signal_run(*sys.argv[2:])
    elif sys.argv[1] == "ddp":
        ddp(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "zero":
        zero(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "zero3_anchor":
        zero3_anchor(sys.argv[2])
    elif sys.argv[1] == "held":
        held(sys.argv[2], sys.argv[3])
    else:
        fsdp2(sys.argv[2])
