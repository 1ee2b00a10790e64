"""`train()`: the library entry point behind `anchorft train` (and the testbed's method comparison)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from typing import Any

import datasets
import torch
from transformers import PreTrainedModel
from transformers.integrations import deepspeed as hf_ds

from anchorft import stop
from anchorft.eval.loading import load_tokenizer
from anchorft.io import pyplot, save_figure, write_json
from anchorft.preflight import check_model_source
from anchorft.provenance import write_metrics
from anchorft.rpsft.adapters import get_adapter
from anchorft.rpsft.anchor import select_parameters
from anchorft.rpsft.anchor_plan import map_for, parse_anchor_map, select_layers
from anchorft.rpsft.checkpoints import fallback_summary, last_complete_checkpoint
from anchorft.rpsft.config import RPSFTConfig
from anchorft.rpsft.data import check_sft_source, load_sft_dataset, validate_sft_dataset
from anchorft.rpsft.model_loading import check_model_folder, load_model
from anchorft.rpsft.peft_methods import gather_adapter, merge_adapter, tuner_layers
from anchorft.rpsft.recipes import NOT_HASHED
from anchorft.rpsft.release_format import ReleaseCollator, release_dataset, release_family
from anchorft.rpsft.sharding import unwrap
from anchorft.rpsft.stopping import whole_run_loss
from anchorft.rpsft.trainer import RPSFTTrainer, frozen_copy
from anchorft.runs import check_output_dir, claim_output, same_run

__all__ = ["train", "load_model", "check_model_folder", "check_launch", "zero_stage", "merge_peft_run"]
__all__ += ["check_train_inputs", "claim_training_run"]

logger = logging.getLogger(__name__)


def fsdp_version(args) -> int | None:
    """The FSDP version this process will run (None: no FSDP): the trainer arguments' `fsdp_config`, else what
    `accelerate launch` exported (ACCELERATE_USE_FSDP, FSDP_VERSION)."""
    if getattr(args, "fsdp", None):
        cfg = getattr(args, "fsdp_config", None) or {}
        return int(cfg.get("version", cfg.get("fsdp_version", 2)))
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return int(os.environ.get("FSDP_VERSION", "1"))
    return None


def zero_stage(args) -> int | None:
    """The DeepSpeed ZeRO stage this process will run (None: no DeepSpeed): the trainer arguments' `deepspeed`
    config (a dict or a JSON file), else what `accelerate launch` exported (ACCELERATE_USE_DEEPSPEED with
    ACCELERATE_DEEPSPEED_ZERO_STAGE or ACCELERATE_DEEPSPEED_CONFIG_FILE)."""
    cfg = getattr(args, "deepspeed", None)
    env = os.environ
    if not cfg and env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"):
            return int(env["ACCELERATE_DEEPSPEED_ZERO_STAGE"])
        cfg = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if not cfg:
        return None
    if isinstance(cfg, (str, os.PathLike)):
        with open(cfg) as f:
            cfg = json.load(f)
    return int((cfg.get("zero_optimization") or {}).get("stage", 0))


def check_launch(args, anchored: bool, what: str) -> None:
    """One-line ValueError, before any model is loaded, for a launcher the run cannot work under: a weight anchor
    under FSDP1 (flattened parameters; the anchor needs FSDP2's row-sharded DTensors); a PEFT method that cannot
    run under ZeRO-3 (`Adapter.zero3`: OSF decomposes each weight when the adapter is created, and a model loaded
    under ZeRO-3's partitioned init holds empty shards then); a PEFT method or `lora_anchor` under FSDP1 (flattened
    parameters). Under FSDP2 OSF's gradient projection, a hook PEFT registers on each parameter that `fully_shard`
    replaces, is applied by the trainer instead (`Adapter.project_grads`), and the adapter anchor gathers what it
    needs (`adapter_anchor`)."""
    version = fsdp_version(args)
    if anchored and version is not None and version != 2:
        raise ValueError(
            f"{what} anchors the weights, which needs FSDP2 (fsdp_version: 2, configs/accelerate/fsdp2.yaml); "
            f"got FSDP{version}, whose flattened parameters it cannot read"
        )
    peft = getattr(getattr(args, "method_spec", None), "peft", None)
    stage = zero_stage(args) if peft is not None else None
    if stage == 3 and (why := get_adapter(peft).zero3):
        raise ValueError(f"{what}: {why}")
    if peft is not None and version is not None and version != 2:
        raise ValueError(
            f"{what} cannot run under FSDP{version}: its adapter is read from FSDP2's row-sharded DTensors, not from "
            "FSDP1's flattened parameters; use fsdp_version: 2 (configs/accelerate/fsdp2.yaml)"
        )


@contextlib.contextmanager
def _one_process_loading():
    """`from_pretrained` on this process alone: transformers' ZeRO-3 flag (which makes it load partitioned, a
    collective every rank must join) is lifted for the block."""
    ref = hf_ds._hf_deepspeed_config_weak_ref
    hf_ds._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = ref


def merge_peft_run(trainer: RPSFTTrainer, base: str | PreTrainedModel) -> None:
    """After a PEFT run: gather the adapter whole from the engine (every rank: a collective under ZeRO-3 and FSDP2),
    then on process 0 alone merge it into the base weights (`peft_methods.merge_adapter`) and make the plain model
    `trainer.model`, which the final `save_model` writes (`RPSFTTrainer.save_model`). The base weights are read
    again from `base` when it is a path or hub name (the engine's copy may be partitioned or sharded), else taken
    from the trained model itself (`unload`: the adapter layers removed, nothing merged), which is whole whenever
    `train` lets a model object through. Other processes keep the trained PEFT model."""
    state = gather_adapter(trainer.model)
    merged = None
    if trainer.is_world_process_zero():
        layers = tuner_layers(trainer.model)  # before `unload` takes them out of the model
        if isinstance(base, (str, os.PathLike)):
            with _one_process_loading():
                plain = load_model(base, trainer.args)
        else:
            plain = unwrap(trainer.model).unload()
        merged = merge_adapter(plain, None, state, layers=layers)
        if trainer.args.world_size == 1:
            merged = merged.to(trainer.args.device)
    trainer.set_merged_model(merged)


# logged key -> (scale, y-axis label) of training.png; the drift, a share of the reference's norm, in %
_TRAINING_AXES = {
    "loss": (1.0, "training loss (the method's objective)"),
    "anchor/penalty": (1.0, "anchor penalty R (without lambda)"),
    "anchor/drift_max": (100.0, "max drift ||D||_F / ||S_ref||_F (%)"),
}


def run_settings(args: RPSFTConfig, steps: int) -> str:
    """The settings that tell runs apart, for training.png's title: the method's own (anchor rank and lambda, LoRA
    rank), the learning rate, the effective batch and the optimiser steps run."""
    spec, parts = args.method_spec, []
    if args.anchored and not spec.full_rank:
        parts.append(f"anchor_rank={args.anchor_rank}")
    if args.anchored:
        parts.append(f"anchor_lambda={args.anchor_lambda:g}")
    if spec.peft == "lora":
        parts.append(f"lora_rank={args.lora_rank}")
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
    return ", ".join([*parts, f"lr={args.learning_rate:g}", f"batch {batch}", f"{steps} steps"])


def run_artifacts(trainer: RPSFTTrainer) -> str:
    """What a finished run left in its output folder, for the end-of-run line: the model (its weights file, or the
    number of shards; with its config and tokenizer), rpsft_config.json, metrics.json and training.png as far as
    they exist, the checkpoints, and the TensorBoard logs' folder when `report_to` has tensorboard (transformers
    writes them under OUT/runs/DATE_HOST unless TENSORBOARD_LOGGING_DIR says otherwise)."""
    out = trainer.args.output_dir
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    shards = [n for n in names if n.startswith("model") and n.endswith(".safetensors")]
    parts = [shards[0] if len(shards) == 1 else f"{len(shards)} model shards"] if shards else []
    if parts and "config.json" in names:
        parts[0] += " (with config.json" + (" and the tokenizer)" if "tokenizer_config.json" in names else ")")
    parts += [n for n in ("rpsft_config.json", "metrics.json", "training.png") if n in names]
    steps = sorted((n for n in names if n.startswith("checkpoint-") and n[11:].isdigit()), key=lambda n: int(n[11:]))
    if steps:
        parts.append(f"checkpoint{'s' * (len(steps) > 1)} {', '.join(steps)}")
    for cb in trainer.callback_handler.callbacks:
        logs = getattr(cb, "logging_dir", None) if type(cb).__name__ == "TensorBoardCallback" else None
        if logs and os.path.isdir(logs):
            parts.append(f"TensorBoard logs in {logs} (tensorboard --logdir {logs})")
    return "; ".join(parts)


def run_title(method: str, full_rank: bool, fallback: dict | None, settings: str = "") -> str:
    """training.png's title: the method and its `settings` (`run_settings`), and for a low-rank anchor the share of
    matrices on the L2 fallback (a run whose every matrix fell back is an L2 run, whatever its method says);
    `fallback` is `fallback_summary`."""
    head = f"method={method}" + (f", {settings}" if settings else "")
    if full_rank or not fallback or not fallback["fallback"]:
        return head
    n, total = fallback["fallback"], fallback["matrices"]
    share = "every matrix" if n == total else f"{n} of {total} matrices"
    return f"{head} ({share} on the L2 fallback: anchor_rank >= min(m, n))"


def _write_run_artifacts(trainer: RPSFTTrainer, out: str, final_drift: dict | None) -> None:
    """Resolved config, metrics.json (log history + anchor summary) and a PNG of loss / penalty."""
    args = trainer.args
    write_json(os.path.join(out, "rpsft_config.json"), args.to_dict(), indent=1, default=str)
    hist = trainer.state.log_history
    metrics = {"method": args.method, "global_step": trainer.state.global_step, "log_history": hist}
    # the whole run's loss, before and after a resume (log_history's last "train_loss" is transformers' own: the
    # steps of the last train() call only)
    metrics["train_loss"], metrics["train_loss_steps"] = whole_run_loss(hist)
    metrics["resumed_at_step"] = getattr(trainer, "_initial_global_step", 0) or None
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # this process's peak (rank 0), for the checks
        metrics["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    if final_drift is not None and trainer._anchor is not None:
        metrics["anchor"] = {"repr": repr(trainer._anchor), **fallback_summary(trainer._anchor), **final_drift}
    elif final_drift is not None:
        metrics["anchor"] = {"repr": repr(trainer.adapter_anchor), **final_drift}
    write_metrics(os.path.join(out, "metrics.json"), metrics, default=str)
    steps = [h for h in hist if "loss" in h]
    if not steps:
        return

    keys = [k for k in ("loss", "anchor/penalty", "anchor/drift_max") if k in steps[-1]]
    fig, axes = pyplot().subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    for ax, k in zip(axes[0], keys):
        scale, ylabel = _TRAINING_AXES[k]
        ax.plot([h["step"] for h in steps if k in h], [scale * h[k] for h in steps if k in h])
        ax.set_xlabel("optimiser step")
        ax.set_ylabel(ylabel)
        ax.set_title(k)
    fallback = fallback_summary(trainer._anchor) if trainer._anchor is not None else None
    title = run_title(args.method, args.method_spec.full_rank, fallback, run_settings(args, trainer.state.global_step))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "training.png"), dpi=100)


def train(
    args: RPSFTConfig,
    model: str | PreTrainedModel,
    train_dataset: datasets.Dataset | str,
    tokenizer=None,
    eval_dataset: datasets.Dataset | str | None = None,
    ref_model: str | PreTrainedModel | None = None,
    anchor_fisher: dict[str, torch.Tensor] | None = None,
) -> RPSFTTrainer:
    """Fine-tune `model` with `args.method` and return the trainer after `trainer.train()`.

    - args: an `RPSFTConfig` (method: a row of `anchorft.rpsft.methods.METHODS`, anchor_* and iw_* fields;
      its fields are validated when it is built; CPU-safe settings are chosen there when no GPU is present).
    - model: a PreTrainedModel, or a local path / hub name loaded with AutoModelForCausalLM
      (trust_remote_code only if `args.trust_remote_code`).
    - train_dataset / eval_dataset: a datasets.Dataset, a local .jsonl / .json / .parquet file, a
      `save_to_disk` folder, or a hub name; columns 'prompt' + 'completion' or 'messages'.
    - tokenizer: defaults to the model's own (a PreTrainedTokenizerFast saved by `tokenizers` is
      loaded as such). Without a pad token, the eos token pads.
    - ref_model: the frozen IW-SFT reference (a model or path); else `args.iw_ref_model` ("copy" for a
      frozen copy of the starting model). Required for methods that need a reference (iw_sft).
    - anchor_fisher: {parameter name: F_ood G} for an anchor_rank_rule 'fisher:F'
      (`anchorft.rpsft.calibration.fisher_gradient_product`).

    Everything is checked before training: the dataset's columns, the anchor targets (a ValueError
    listing the names available), the reference model. rpsft anchors rank `args.anchor_rank`; l2 is
    the full-rank anchor. With `args.resume_from_checkpoint`, training resumes with the checkpoint's
    anchor. A PEFT method (lora, osf) trains its adapters; the adapter is then gathered from the engine and merged
    into the base weights on process 0 (`merge_peft_run`), whose `trainer.model` becomes that plain model, and
    `trainer.save_model` writes it as a `save_pretrained` model (under ZeRO-3 or FSDP the model must be a path or
    hub name: the base weights are read again from there). Writes
    rpsft_config.json, metrics.json and training.png to `args.output_dir`.
    """
    if not isinstance(args, RPSFTConfig):
        raise ValueError(f"args must be an RPSFTConfig, got {type(args).__name__}")
    check_launch(args, args.anchored, f"method={args.method!r}")
    if args.method_spec.peft is not None and not isinstance(model, (str, os.PathLike)):
        if zero_stage(args) == 3 or fsdp_version(args) is not None:
            raise ValueError(
                f"method={args.method!r} under ZeRO-3 or FSDP needs the model as a path or hub name: the adapter is "
                "merged on one process into the base weights read again from there"
            )
    train_ds = load_sft_dataset(train_dataset, field="train_dataset")
    eval_ds = load_sft_dataset(eval_dataset, split="test", field="eval_dataset") if eval_dataset is not None else None
    if args.method_spec.needs_reference and ref_model is None and args.iw_ref_model is None:
        raise ValueError(
            f"method={args.method!r} needs a reference model: pass ref_model=, or set iw_ref_model "
            "(a path / hub name, or 'copy' for a frozen copy of the starting model)"
        )
    # everything that can be checked without weights is checked before loading them
    validate_sft_dataset(train_ds, None, field="train_dataset")
    if eval_ds is not None:
        validate_sft_dataset(eval_ds, None, field="eval_dataset")
    # safe points (anchorft.stop): a signal that library code swallowed (datasets' hashing, a loader's bare
    # `except`) stops the run here; agreed across the ranks of a distributed run, which all pass each of them
    stop.check(agree=True)
    model_obj = load_model(model, args)  # a local folder without weights is refused before anything is loaded
    stop.check(agree=True)
    if tokenizer is None:
        src = model if isinstance(model, (str, os.PathLike)) else getattr(model_obj, "name_or_path", None)
        if not src:
            raise ValueError("tokenizer: pass one (the model object has no name_or_path to load it from)")
        tokenizer = load_tokenizer(os.fspath(src), trust_remote_code=bool(args.trust_remote_code))
    if tokenizer.eos_token is None and args.eos_token is None:
        raise ValueError("tokenizer has no eos_token: set one, or set eos_token in the config")
    if tokenizer.pad_token is None and args.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token if args.eos_token is None else args.eos_token
    validate_sft_dataset(train_ds, tokenizer, field="train_dataset")
    if eval_ds is not None:
        validate_sft_dataset(eval_ds, tokenizer, field="eval_dataset")
    if args.anchored:
        names = [n for n, _ in select_parameters(model_obj, args.anchor_targets, args.anchor_include_embeddings)]
        map_for(select_layers(names, args.anchor_layers), parse_anchor_map(args.anchor_map))
    collator = None
    if args.chat_format == "release":
        family = release_family(getattr(model_obj.config, "model_type", None))
        train_ds = release_dataset(train_ds, tokenizer, family)
        eval_ds = release_dataset(eval_ds, tokenizer, family) if eval_ds is not None else None
        multiple = args.pad_to_multiple_of if isinstance(args.pad_to_multiple_of, int) else None  # "auto": Neuron only
        collator = ReleaseCollator(pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=multiple)
    ref = None
    if args.method_spec.needs_reference:
        spec = ref_model if ref_model is not None else args.iw_ref_model
        ref_dtype = torch.bfloat16 if args.bf16 else None
        ref = frozen_copy(model_obj, ref_dtype) if spec == "copy" else load_model(spec, args, field="ref_model")
    trainer = RPSFTTrainer(
        model_obj,
        args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        ref_model=ref,
        anchor_fisher=anchor_fisher,
        **({"data_collator": collator} if collator is not None else {}),
    )
    stop.check(agree=True)  # after the datasets' tokenization (in the trainer's constructor)
    resume = args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "false"):
        resume = resume.lower() == "true"
    # the handler only records inside training, in one process as in a group: `StopOnSignal` saves a checkpoint at
    # the step's end and stops (a raise mid-step would leave the step half applied and save nothing); the worst
    # delay from the signal to the exit is one optimiser step plus that save
    with stop.deferred():
        trainer.train(resume_from_checkpoint=resume)
    # stopped by a signal (anchorft.rpsft.stopping: every rank at the same step, after a checkpoint): raise it, so
    # that the run is marked interrupted rather than finished
    stop.check(agree=True)
    # on every rank: under FSDP2 the drift is a collective (one all-reduce of the k x k blocks), under ZeRO-3 a
    # gather per matrix
    final_drift = trainer._active_anchor.drift(trainer.model) if trainer._active_anchor is not None else None
    if args.method_spec.peft is not None:
        # a PEFT method: the adapter gathered from the engine and merged into the base weights on process 0, so that
        # what is saved (`save_model`) and evaluated is a plain model of the base's architecture
        merge_peft_run(trainer, model)
    if args.should_save:
        _write_run_artifacts(trainer, args.output_dir, final_drift)
    stop.check(agree=True)
    return trainer


def check_train_inputs(script, args) -> None:
    """Everything a fine-tune's user named (`ScriptArguments` and `RPSFTConfig`), checked before a model is loaded
    (minutes for a large one): the launch, the datasets, the model sources and their weights, the reference model,
    the output folder. A one-line ValueError naming the flag."""
    check_launch(args, args.anchored, f"--method {args.method}")
    check_sft_source(script.dataset, "--dataset")
    check_sft_source(script.eval_dataset, "--eval_dataset")
    check_model_source(script.model_name_or_path, "--model_name_or_path")
    check_model_source(script.tokenizer_name_or_path, "--tokenizer_name_or_path", what="tokenizer")
    if args.iw_ref_model not in (None, "copy"):
        check_model_source(args.iw_ref_model, "--iw_ref_model")
    check_output_dir(args.output_dir, "--output_dir")
    check_model_folder(script.model_name_or_path, "--model_name_or_path")  # weights, not only config.json
    if args.iw_ref_model not in (None, "copy"):
        check_model_folder(args.iw_ref_model, "--iw_ref_model")


def claim_training_run(script, args, overwrite: bool) -> tuple[Any, bool]:
    """Check and claim `args.output_dir` for `anchorft train` (process 0 only): (claim or None, whether the same run
    had finished). The same config unfinished: `args.resume_from_checkpoint` set to its last complete checkpoint."""
    # what defines the run (its marker's hash): script arguments and training fields, output-only ones aside
    skip = (*NOT_HASHED, "resume_from_checkpoint")  # a resumed run is the same run
    fields = {k: v for k, v in args.to_dict().items() if k not in skip}
    config = {"script": dataclasses.asdict(script), "args": fields}
    check_output_dir(args.output_dir, "--output_dir")
    status = None if overwrite else same_run(args.output_dir, "train", config)  # the same on every process
    claim = None
    if int(os.environ.get("RANK", "0")) == 0:
        # the one claim outside runs.run_claimed: every process of a distributed launch runs the work and decides
        # reuse and resume from the marker (`same_run`), while only process 0 claims (and locks) the folder, and the
        # run is finished only after every process agreed that no signal arrived during the save
        claim = claim_output(args.output_dir, "train", config, overwrite=overwrite, flag="--output_dir")
    if status == "complete":
        return None, True
    if status is not None and args.resume_from_checkpoint is None:
        last = last_complete_checkpoint(args.output_dir)
        if last is not None:  # the command says so (process 0), as for a --resume_from_checkpoint given
            args.resume_from_checkpoint = last
    return claim, False
