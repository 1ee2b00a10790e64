"""Worker for tests/rpsft/test_distributed_matrix.py: every method under one launcher, 2 processes (torchrun, gloo).

torchrun --nproc_per_node 2 matrix_worker.py LAUNCHER BASE_DIR OUT_DIR METHOD...
torchrun --nproc_per_node 2 matrix_worker.py rl BASE_DIR REF_DIR OUT_DIR   (tests/rpsft/test_rl_deepspeed.py)
torchrun --nproc_per_node 2 matrix_worker.py penalty BASE_DIR OUT_DIR     (the one-step penalty check)

LAUNCHER is ddp, zero2, zero3 or fsdp2; BASE_DIR a tiny model and tokenizer saved with save_pretrained; METHOD a
name of `METHODS` below (a cell of `REFUSED` writes the refusal's line to info.json instead of training).
accelerate attaches DeepSpeed and FSDP to GPU states only, so this worker sets accelerate's state itself (gloo
process group, then the launcher's distributed type and plugin), as `accelerate launch` does on GPUs. For each
method: `anchorft.rpsft.train.train` from BASE_DIR with checkpoints every 2 steps, then the final `save_model` (as
`anchorft train` ends); then a second run resuming from the middle checkpoint. Rank 0 writes
OUT_DIR/METHOD/{run,resume}/model.safetensors and OUT_DIR/METHOD/info.json.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(1)

# method name -> RPSFTConfig fields (the test's one-process runs use the same)
METHODS = {
    "sft": dict(method="sft"),
    "dft": dict(method="dft"),
    "iw_sft": dict(method="iw_sft", iw_ref_model="copy"),
    "l2": dict(method="l2", anchor_lambda=1.0),
    "rpsft": dict(method="rpsft", anchor_lambda=1.0, anchor_rank=4),
    "rpsft_subspace": dict(method="rpsft", anchor_lambda=1.0, anchor_rank=4, anchor_kind="subspace"),
    # the remainder L2 stores W_0; under FSDP2 the residual of the rest is cut to each shard's rows
    "rpsft_rest": dict(method="rpsft", anchor_lambda=1.0, anchor_rank=4, anchor_lambda_rest=0.5),
    # PEFT methods: the adapter gathered from the engine and merged into the base weights on one process
    "lora": dict(method="lora", lora_rank=4, lora_alpha=8.0),
    "osf": dict(method="osf", anchor_rank=4),
    "lora_anchor": dict(
        method="lora", lora_rank=4, lora_alpha=8.0, lora_anchor=True, anchor_lambda=1.0, anchor_rank=4
    ),
}
# (method, launcher) -> the start of the one-line refusal `check_launch` gives before any model is loaded
REFUSED = {
    ("osf", "zero3"): "method='osf': OSF cannot run under ZeRO-3",
}
MAX_STEPS, SAVE_STEPS, PER_DEVICE, ACCUM, N_ROWS = 4, 2, 2, 2, 32


def train_kwargs(method: str, per_device: int) -> dict:
    """The run's settings: 4 optimiser steps of 2 micro-batches (global batch 8), a checkpoint every 2 steps, a
    warm-up-and-decay schedule (lr 0, 1, 0.75, 0.25 x 1e-2: a resume that restarted it would step at 0 and 1)."""
    return dict(
        METHODS[method],
        lr_scheduler_type="cosine",
        warmup_steps=1,
        max_steps=MAX_STEPS,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=ACCUM,
        learning_rate=1e-2,
        max_grad_norm=1.0,
    )


def ds_config(stage: int) -> dict:
    """configs/accelerate/zero{2,3}.yaml as a DeepSpeed config (fp32 here: no GPU)."""
    zero = {"stage": stage}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        # every parameter partitioned, as a large model's matrices are (the default keeps those under 1e5 numbers
        # whole, which here would be all of them, and no gather would be exercised)
        zero["stage3_param_persistence_threshold"] = 0
    return {
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
    }


FSDP2_CONFIG = {  # configs/accelerate/fsdp2.yaml
    "version": 2,
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "state_dict_type": "SHARDED_STATE_DICT",
    "reshard_after_forward": True,
    "cpu_ram_efficient_loading": True,  # as shipped: rank 0 loads the weights, the others get them at wrapping
}


def freeze_imports() -> None:
    """Keep the objects alive now (mostly the modules torch, transformers, TRL and DeepSpeed loaded) out of later
    garbage collections: accelerate runs a full collection at each trainer's start and end, which otherwise scans
    them all (about 0.3 s each, 20-36 a launch). Objects freed by reference counting are freed as before."""
    gc.collect()
    gc.freeze()


def start(launcher: str) -> dict:
    """Start the process group for `launcher`; the extra trainer arguments."""
    if launcher == "ddp":
        return dict(ddp_backend="gloo")
    if launcher.startswith("zero"):
        from conftest import import_deepspeed

        deepspeed = import_deepspeed()

        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        deepspeed.init_distributed(dist_backend="gloo")
        return dict(deepspeed=ds_config(int(launcher[-1])), accelerator_config={"use_configured_state": True})
    os.environ["ACCELERATE_USE_FSDP"] = "true"
    os.environ["FSDP_VERSION"] = "2"
    dist.init_process_group("gloo")
    return dict(fsdp="full_shard", fsdp_config=dict(FSDP2_CONFIG), accelerator_config={"use_configured_state": True})


def set_state(launcher: str) -> None:
    """accelerate's state for the next trainer (each trainer builds its own Accelerator, whose plugins can only be
    set on a fresh AcceleratorState): the gloo process group, the launcher's distributed type."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    if launcher == "ddp":
        return
    AcceleratorState._reset_state()
    if launcher.startswith("zero"):
        kind = DistributedType.DEEPSPEED
    else:
        # accelerate turns a multi-GPU state with an FSDP plugin into FSDP (AcceleratorState, when the trainer
        # builds its Accelerator); the process keeps its CPU device
        kind = DistributedType.MULTI_GPU
    st = PartialState()
    st.backend = "gloo"
    st.num_processes, st.process_index = dist.get_world_size(), dist.get_rank()
    st.local_process_index = int(os.environ["LOCAL_RANK"])
    st.distributed_type = kind


def engine(trainer) -> str:
    """What the trainer trains: DeepSpeedEngine, DTensor (FSDP2 parameters) or DistributedDataParallel."""
    if type(trainer.model_wrapped).__name__ == "DeepSpeedEngine":
        return "DeepSpeedEngine"
    p = next(trainer.model_wrapped.parameters())  # after a PEFT run, process 0's `model` is the merged plain model
    if type(p).__name__ == "DTensor":
        return "DTensor"
    return type(trainer.model_wrapped).__name__


def ram_efficient() -> bool:
    """Whether transformers loads the weights on rank 0 only (FSDP's cpu_ram_efficient_loading reached the loader)."""
    from transformers.distributed.fsdp import is_fsdp_enabled

    return bool(is_fsdp_enabled())


def main(launcher: str, base: str, out: str, methods: list[str]) -> None:
    import datasets

    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.train import train
    from conftest import base_args, pc_dataset

    extra = start(launcher)
    freeze_imports()
    tok = load_tokenizer(base)
    data: datasets.Dataset = pc_dataset(N_ROWS)
    rank = int(os.environ["RANK"])
    for method in methods:
        info = {}
        for run in ("run", "resume"):
            folder = os.path.join(out, method, run)
            kw = train_kwargs(method, PER_DEVICE)
            if run == "resume":
                kw["resume_from_checkpoint"] = os.path.join(out, method, "run", f"checkpoint-{SAVE_STEPS}")
            set_state(launcher)
            args = base_args(folder, **extra, **kw)
            if (method, launcher) in REFUSED:  # refused before loading, on every rank alike: no collective yet
                try:
                    train(args, base, data, tokenizer=tok)
                except ValueError as e:
                    info = {"refused": str(e)}
                    break
                raise AssertionError(f"{method} under {launcher} was not refused")
            tr = train(args, base, data, tokenizer=tok)
            info[run] = {"engine": engine(tr), "global_step": tr.state.global_step, "ram_efficient": ram_efficient()}
            tr.save_model(folder)  # as `anchorft train` ends
            if run == "run":
                info["checkpoint"] = sorted(os.listdir(os.path.join(folder, f"checkpoint-{SAVE_STEPS}")))
                info["log"] = tr.state.log_history
            del tr
        if method == methods[0]:
            freeze_imports()  # the modules the first method's training loaded
        if rank == 0:
            os.makedirs(os.path.join(out, method), exist_ok=True)
            with open(os.path.join(out, method, "info.json"), "w") as f:
                json.dump(info, f)
        dist.barrier()


# anchor -> SubspaceAnchor.from_model arguments, for the one-step penalty check (test_distributed_matrix.py)
PENALTY_ANCHORS = {
    "block": dict(rank=4),
    "subspace": dict(rank=4, kind="subspace"),
    "rest": dict(rank=4, lambda_rest=0.5),
    "fallback": dict(rank=10_000),  # every matrix at or past its size: the L2 fallback
}
PENALTY_DRIFT = 0.05  # the drift put on every weight: conftest.perturb(model, PENALTY_DRIFT, seed=1)


def penalty_check(base: str, out: str) -> None:
    """The anchor's penalty and its gradient under DeepSpeed ZeRO-2 and ZeRO-3, as the trainer computes them there
    (autograd through `penalty_terms`, which gathers a ZeRO-3 matrix at a time; DeepSpeed reduces the gradient):
    for each anchor of PENALTY_ANCHORS, built from BASE's weights, then every weight drifted. Rank 0 writes
    OUT/zero{2,3}-ANCHOR.safetensors: "terms" (per matrix) and "grad.NAME" (the whole gradient, gathered)."""
    from conftest import import_deepspeed

    deepspeed = import_deepspeed()
    from deepspeed.utils import safe_get_full_grad
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from anchorft.rpsft.anchor import SubspaceAnchor
    from conftest import perturb

    start("zero3")
    freeze_imports()
    world, rank = dist.get_world_size(), dist.get_rank()
    for stage in (2, 3):
        for name, kw in PENALTY_ANCHORS.items():
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            anchor = SubspaceAnchor.from_model(model, **kw)
            perturb(model, PENALTY_DRIFT, seed=1)
            cfg = dict(ds_config(stage), train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
            cfg.update(train_batch_size=world, gradient_clipping=0.0)
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
            engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
            # as in training, the penalty joins the loss of a forward (here weighted 0), whose backward DeepSpeed
            # hooks; a ZeRO-3 parameter's gradient is accumulated while that backward has it gathered
            logits = engine(input_ids=torch.tensor([[2, 5, 6, 7]])).logits
            terms = anchor.penalty_terms(engine.module)
            engine.backward(0.0 * logits.sum() + terms.sum())
            grads = {f"grad.{n}": safe_get_full_grad(p) for n, p in engine.module.named_parameters()}
            if rank == 0:
                tensors = {k: g.detach().clone().contiguous() for k, g in grads.items() if g is not None}
                path = os.path.join(out, f"zero{stage}-{name}.safetensors")
                save_file({"terms": terms.detach().clone(), **tensors}, path)
            engine.destroy()
            dist.barrier()


RL_PROMPTS = [{"prompt": f"what is {w} plus {w}", "answer": "0"} for w in ("one", "two", "three", "four")]


def rl_kwargs(world: int) -> dict:
    """DAPO with the anchor (L2 to another model) and a constant reward: every advantage is 0, so the policy loss has
    no gradient and the weights move by the anchor's alone (2 updates of 2 micro-batches each). Plain SGD without
    clipping, so the update is lr x the anchor's gradient: a wrong scale, or a penalty missing on one rank (its
    gradient averaged with the others'), changes the update, where AdamW's per-entry normalisation or a clipped
    norm would hide it."""
    return dict(
        steps=1, prompts_per_step=4, mini_batch_prompts=2, num_generations=2, micro_batch=2 // world,
        max_completion_length=4, learning_rate=1e-2, optim="sgd", max_grad_norm=0.0, anchor_method="l2",
        anchor_lambda=2.0, save_model=True, disable_tqdm=True, report_to=[],
    )  # fmt: skip


def constant_reward(completion: str, answer: str) -> float:
    return 1.0


def rl(base: str, ref: str, out: str) -> None:
    """The anchored DAPO run under ZeRO-2 and ZeRO-3: `run_rl` as `anchorft rl` calls it."""
    from conftest import import_deepspeed

    import_deepspeed()  # accelerate starts DeepSpeed below: without the inference kernel's build
    from anchorft.rpsft.dapo_config import DAPOConfig
    from anchorft.rpsft.rl import run_rl

    extra = start("zero3")
    freeze_imports()
    for stage in (2, 3):
        set_state(f"zero{stage}")
        extra["deepspeed"] = ds_config(stage)
        s = DAPOConfig(**rl_kwargs(2), anchor_reference=ref, **extra)
        folder = os.path.join(out, f"zero{stage}")
        m = run_rl(base, RL_PROMPTS, folder, s, reward_fn=constant_reward)
        rank = int(os.environ["RANK"])
        info = {"anchor": m["anchor"], "optimizer_steps": m["optimizer_steps"], "zero3": stage == 3}
        info["z3_params"] = sum(hasattr(p, "ds_id") for p in m["model"].parameters())
        with open(os.path.join(folder, f"info-rank{rank}.json"), "w") as f:  # each rank's own penalty
            json.dump(info, f)
        dist.barrier()


if __name__ == "__main__":
    if sys.argv[1] == "rl":
        rl(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "penalty":
        penalty_check(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
