"""`RPSFTTrainer`: TRL's SFTTrainer running every method of the methods table (`anchorft.rpsft.methods`):
the RPSFT anchor and the DFT / IW-SFT / L2 baselines, and any registered method.

Once per optimiser step (docs/rpsft.md, "Design: the penalty counts once per optimiser step", and "DeepSpeed"): in
the default `anchor_mode="grad"`, `lambda * every * dR/dW` (closed form) goes into `.grad` right after the step's
last backward: after DDP's all-reduce (each rank adds the same term once) and before clipping, as a loss term
would be; gradient accumulation never multiplies it. In `anchor_mode="autograd"` (DeepSpeed, whose engine holds
the gradients) the penalty enters the loss of the step's last micro-batch instead, leaving the logged loss
unchanged. The anchor is built when training begins (`on_train_begin`), after `accelerator.prepare`, from the
weights the optimiser will move (under DeepSpeed bf16 the engine's bf16 weights), on each weight's device, so the
penalty is exactly 0 at step 0; on resume it is read from the checkpoint and fingerprint-checked instead.
"""

from __future__ import annotations

import copy
import logging
import os

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints
from trl import SFTTrainer
from trl.models.utils import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import add_fused_lm_head

from anchorft.eval.loading import quiet_model_bars
from anchorft.io import write_json, write_text
from anchorft.rpsft.adapters import get_adapter
from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters
from anchorft.rpsft.checkpoints import (
    ANCHOR_META,
    anchor_meta,
    last_complete_checkpoint,
    resume_anchor,
    warn_fallback,
)
from anchorft.rpsft.config import RPSFTConfig
from anchorft.rpsft.data import load_sft_dataset
from anchorft.rpsft.model_loading import load_model
from anchorft.rpsft.peft_methods import is_peft_model, peft_config_for
from anchorft.rpsft.progress import use_readable_progress
from anchorft.rpsft.sharding import is_zero3, unwrap
from anchorft.rpsft.stopping import add_stop_callback

__all__ = ["RPSFTTrainer", "AnchorSteps", "ANCHOR_DIR", "frozen_copy", "prepare_reference", "save_full_model"]

logger = logging.getLogger(__name__)
ANCHOR_DIR = "anchor"


NO_BASE_LINK = "[None](https://huggingface.co/None)"  # TRL's card for a base model that is not a hub name


def base_model_words(model: nn.Module) -> str:
    """How the model card names a base model that is not on the hub: its local folder's name, or "a model built
    from its config"."""
    name = getattr(getattr(unwrap(model), "config", None), "_name_or_path", "") or ""
    return f"the local model `{os.path.basename(os.path.normpath(name))}`" if name else "a model built from its config"


class AnchorSteps:
    """The anchor's part of a training step (see the module docstring), mixed in before a TRL trainer: `RPSFTTrainer`
    and the RL stage's GRPO trainer (`anchorft.rpsft.rl`). The trainer provides `_active_anchor`, `_anchor_scale`
    (lambda; times anchor_every for SFT), `_anchor_mode` ("grad" or "autograd") and `_anchor_due()` (True on a
    step's last micro-batch when the anchor applies), and sets `_anchor_last` to None; the anchor's last
    {"penalty", "drift_max"} is added to each training log as `anchor/penalty` and `anchor/drift_max`."""

    _project_grads = None  # an adapter's gradient projection under FSDP2 (OSF): after the step's last backward

    def create_model_card(self, *args, **kwargs) -> None:
        """TRL's model card, without its link to "[None](https://huggingface.co/None)" when the base model is a
        local folder or was built from a config (TRL names a hub model only)."""
        super().create_model_card(*args, **kwargs)
        path = os.path.join(self.args.output_dir, "README.md")
        if not (self.is_world_process_zero() and os.path.isfile(path)):
            return
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if NO_BASE_LINK in text:
            write_text(path, text.replace(NO_BASE_LINK, base_model_words(self.model)))

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._anchor_mode == "grad" and self._anchor_due():
            # after the step's last backward (gradients all-reduced), before clipping and optimizer.step()
            self._anchor_last = self._active_anchor.add_penalty_grad_(self.model, self._anchor_scale)
        if self._project_grads and self.model.training and self.accelerator.gradient_state.sync_gradients:
            # OSF under FSDP2: PEFT's projection hooks sit on the tensors `fully_shard` replaced; project the
            # reduced gradient here, at the same point (linear and idempotent: the same update)
            self._project_grads(self.model)
        return loss

    def _add_anchor_term(self, loss: torch.Tensor, num_items_in_batch) -> torch.Tensor:
        """`loss` plus, in "autograd" mode when the anchor is due, coef * (R - R.detach()) (coef: `_anchor_scale`,
        times the accumulation steps when Trainer divides the loss by them)."""
        if self._anchor_mode == "autograd" and self._anchor_due():
            terms = self._active_anchor.penalty_terms(self.model)
            pen = terms.sum()
            coef = self._anchor_scale
            scaled = self.loss_is_scaled_for_ga
            if scaled is None:
                scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or (
                    self.compute_loss_func is not None
                )
            if not scaled:  # Trainer.training_step divides the loss by the accumulation steps
                coef *= self.current_gradient_accumulation_steps
            # gradient coef * dR/dW, value unchanged (the logged loss stays the data loss, as in "grad" mode)
            loss = loss + coef * (pen - pen.detach()).to(loss.dtype)
            self._anchor_last = self._active_anchor.summarize(terms)
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._anchor_last is not None and self.model.training and "loss" in logs:
            logs["anchor/penalty"] = self._anchor_last["penalty"]
            logs["anchor/drift_max"] = self._anchor_last["drift_max"]
        super().log(logs, start_time)


class RPSFTTrainer(AnchorSteps, SFTTrainer):
    """SFTTrainer applying `args.method`: any row of the methods table (sft, dft, iw_sft, l2, rpsft, or one
    registered with `anchorft.rpsft.methods.register`), not only RPSFT. What it does per method is read from
    the table: TRL's loss type, a custom loss, a reference model, the anchor and its rank.

    Extra arguments: `ref_model` (frozen reference, required by methods that need one, e.g. iw_sft) and
    `anchor` (a precomputed `SubspaceAnchor`; otherwise built from the starting weights when training begins,
    after the model is prepared, or reloaded from the checkpoint on resume, never recomputed from tuned
    weights). The anchor is saved in every checkpoint under `checkpoint-N/anchor/`. Logs `anchor/penalty`
    (R without lambda), `anchor/drift_max` (max over matrices of ||D||_F / ||S_ref||_F) and the mean of each
    per-sequence tensor a custom loss returns (iw_sft: `iw/weight_mean`).
    """

    def __init__(
        self,
        model: nn.Module | str,
        args: RPSFTConfig,
        *pos,
        ref_model: nn.Module | None = None,
        anchor: SubspaceAnchor | None = None,
        anchor_fisher: dict[str, torch.Tensor] | None = None,
        **kwargs,
    ):
        if not isinstance(args, RPSFTConfig):
            raise ValueError(f"args must be an RPSFTConfig, got {type(args).__name__}")
        if args.method_spec.needs_reference and ref_model is None:
            raise ValueError(
                f"method={args.method!r} needs a reference model: pass ref_model=, or set iw_ref_model "
                "(a path, or 'copy' for a frozen copy of the starting model) when using anchorft.rpsft.train"
            )
        for field in ("train_dataset", "eval_dataset"):  # a path or hub name, as `anchorft.rpsft.train` takes
            if isinstance(kwargs.get(field), (str, os.PathLike)):
                kwargs[field] = load_sft_dataset(kwargs[field], field=field)
        if args.method_spec.peft is not None:
            if not is_peft_model(model):  # TRL's SFTTrainer wraps the model (get_peft_model)
                if isinstance(model, (str, os.PathLike)):  # loaded here: its modules name the targets
                    model = load_model(model, args)
                kwargs.setdefault("peft_config", peft_config_for(args, model))
        super().__init__(model, args, *pos, **kwargs)
        use_readable_progress(self)  # a bar and a short line per log; the full dicts in OUTPUT_DIR/log.jsonl
        if args.anchored:
            # fail now (before any training) if the targets match nothing
            select_parameters(self.model, args.anchor_targets, args.anchor_include_embeddings)
        self._anchor = anchor
        self._adapter_anchor = None  # lora_anchor: built at on_train_begin from the frozen base weights
        self._peft_merged, self._merged_model = False, None  # a PEFT run's merged model (`set_merged_model`)
        self._anchor_fisher = anchor_fisher  # {name: F_ood G} for fisher rank rules
        if anchor is not None:
            anchor.check_model(self.model, check_fingerprint=False)
        self.add_callback(_AnchorAfterPrepare(self))
        add_stop_callback(self)  # SIGTERM / Ctrl-C: every rank stops at the same step, after a checkpoint
        self._anchor_last: dict[str, float] | None = None
        self._anchor_mode = args.anchor_mode
        peft = args.method_spec.peft
        if peft and get_adapter(peft).prepare:  # the PEFT model as built here, before the engine wraps or casts it
            get_adapter(peft).prepare(self.model)
        self._project_grads = get_adapter(peft).project_grads if peft and self.is_fsdp_enabled else None
        if args.weight_anchored:
            if self.is_deepspeed_enabled:
                # DeepSpeed keeps the gradients in its engine (and ZeRO-3 partitions the weights): the penalty
                # goes into the loss; under ZeRO-3 `penalty_terms` gathers one matrix at a time to compute it
                self._anchor_mode = "autograd"
            if self.is_fsdp_enabled and getattr(self.accelerator.state.fsdp_plugin, "fsdp_version", 1) != 2:
                raise ValueError("RPSFT under FSDP needs fsdp_version 2 (DTensor parameters, sharded by rows)")
        self.ref_model = None
        if args.method_spec.needs_reference:
            self.ref_model = prepare_reference(self, ref_model)

    # ------------------------------------------------------------------ anchor
    @property
    def anchor(self) -> SubspaceAnchor | None:
        """The anchor: None before training begins (and for methods without one)."""
        return self._anchor

    def _build_anchor(self) -> SubspaceAnchor:
        """SVD of the weights as they are now (called once the model is prepared, or on resume of a checkpoint
        killed before its anchor was written, from the starting weights; a collective under torch.distributed:
        every rank calls it)."""
        a = self.args
        # on the device that holds the weights (randomized SVD draws there): cuda:r on rank r
        gen = torch.Generator(device=next(self.model.parameters()).device).manual_seed(a.seed)
        anchor = a.build_anchor(
            self.model,
            full_rank=a.method_spec.full_rank,
            svd=a.anchor_svd,
            dtype=a.anchor_torch_dtype,
            generator=gen,
            progress=not a.disable_tqdm,
            fisher=self._anchor_fisher,
        )
        logger.info("built %r", anchor)
        if not a.method_spec.full_rank:
            warn_fallback(anchor)
        return anchor

    @property
    def adapter_anchor(self):
        """The `AdapterAnchor` of a lora run with lora_anchor (None before training begins, and otherwise)."""
        return self._adapter_anchor

    @property
    def _active_anchor(self):
        return self._anchor if self._anchor is not None else self._adapter_anchor

    def _anchor_on_train_begin(self) -> None:
        """Build the anchor from the prepared model (or place a given / reloaded one next to its weights)."""
        if self.args.lora_anchor and self._adapter_anchor is None:
            # from the frozen base weights, which a resumed run shares: nothing to save in the checkpoint
            from anchorft.rpsft.adapter_anchor import AdapterAnchor

            a = self.args
            self._adapter_anchor = AdapterAnchor.from_model(
                self.model, a.anchor_rank, a.anchor_kind, a.anchor_torch_dtype
            )
            self._adapter_anchor.to(next(self.model.parameters()).device)
            logger.info("built %r", self._adapter_anchor)
        if not self.args.anchored:
            return
        if self._anchor is None:
            self._anchor = self._build_anchor()
        self._anchor.to(model=self.model)

    def _anchor_due(self) -> bool:
        return (
            self.args.weight_anchored
            and self.args.anchor_lambda > 0
            and self.model.training
            and self.accelerator.gradient_state.sync_gradients
            and self.state.global_step % self.args.anchor_every == 0
        )

    def _anchor_scale_value(self) -> float:
        return float(self.args.anchor_lambda) * self.args.anchor_every

    _anchor_scale = property(_anchor_scale_value)  # an undecorated body: mutation testing reaches it

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        """Resolve the checkpoint and reload its anchor (fingerprint-checked); train. A new anchor is built when
        training begins, once the model is prepared."""
        if resume_from_checkpoint is False:
            resume_from_checkpoint = None
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"No valid checkpoint found in output directory ({self.args.output_dir})")
        if self.args.anchored and self._anchor is None:
            if resume_from_checkpoint is not None:
                # the model still holds the starting weights here: the fingerprint check applies
                # (the tensors are moved next to the weights once the model is prepared); a checkpoint killed
                # before its anchor was written gets it rebuilt from these weights, fingerprint-checked
                self._anchor, rebuilt = resume_anchor(
                    resume_from_checkpoint, self.model, self._build_anchor, anchor_dir=ANCHOR_DIR
                )
                if rebuilt:  # every rank: a W_0 held in parts is gathered to be written
                    self._anchor.save(os.path.join(resume_from_checkpoint, ANCHOR_DIR), write=self.args.should_save)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _save_checkpoint(self, model, trial):
        """Save checkpoint-N complete (model, optimizer, state, then its anchor) before any older one is deleted.

        transformers rotates checkpoints (`save_total_limit`) at the end of its own `_save_checkpoint`;
        rotation is deferred here until `checkpoint-N/anchor/` is written, so a kill at any moment leaves
        at least one checkpoint that resumes.
        """
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self._anchor is not None and self.args.should_save:
            # first the fingerprint (a few bytes): a checkpoint killed before its anchor is written can rebuild it
            write_json(os.path.join(folder, ANCHOR_META), anchor_meta(self._anchor))
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if self._anchor is not None:  # every rank: a W_0 held in parts is gathered to be written
            self._anchor.save(os.path.join(folder, ANCHOR_DIR), write=self.args.should_save)
        if self.args.method_spec.peft is not None:
            # the adapter gathered whole (a collective: every rank), whatever the engine's own files hold, so that a
            # checkpoint can be merged into a model on one process as the final save is
            from anchorft.rpsft.peft_methods import ADAPTER_DIR, gather_adapter, save_adapter

            state = gather_adapter(self.model)
            if self.args.should_save:
                save_adapter(os.path.join(folder, ADAPTER_DIR), self.model, state)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def set_merged_model(self, merged: nn.Module | None) -> None:
        """After a PEFT run (`anchorft.rpsft.train.merge_peft_run`): `merged`, the plain model with the adapter merged
        on this process (process 0; None on the others), becomes `self.model` and is what the final `save_model`
        writes. The engine keeps the PEFT model, whose state dict is keyed `base_model.model.*`."""
        self._peft_merged = True
        self._merged_model = merged
        if merged is not None:
            self.model = merged

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """transformers' `save_model`, except for the final save (not a checkpoint's): after a PEFT run, process 0
        writes the model merged on it (`set_merged_model`) with `save_pretrained`; under FSDP the full weights in
        `save_pretrained` format whatever `fsdp_state_dict_type` says (`save_full_model`). No bar for the weights
        written (`quiet_model_bars`): the trainer's own bar is the run's progress."""
        with quiet_model_bars():
            self._save_model(output_dir or self.args.output_dir, _internal_call)

    def _save_model(self, output_dir: str, _internal_call: bool) -> None:
        if not _internal_call and getattr(self, "_peft_merged", False):
            if self._merged_model is not None:
                os.makedirs(output_dir, exist_ok=True)
                self._merged_model.save_pretrained(output_dir, safe_serialization=True)
                if self.processing_class is not None:
                    self.processing_class.save_pretrained(output_dir)
                torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
            self.accelerator.wait_for_everyone()
            return
        if not _internal_call and save_full_model(self, output_dir):
            return
        super().save_model(output_dir, _internal_call)

    # ------------------------------------------------------------------ loss (the step: `AnchorSteps`)
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.args.method_spec.loss is not None and self.model.training:
            loss = self._method_loss(model, inputs, num_items_in_batch)
            outputs = None
        else:
            res = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            loss, outputs = res if return_outputs else (res, None)
        loss = self._add_anchor_term(loss, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def _method_loss(self, model, inputs, num_items_in_batch):
        """The method's custom loss on per-token log-probabilities (TRL's fused LM head), with the reference
        model's when the method needs one."""
        inputs = {**inputs, "use_cache": False}
        outputs = model(**inputs, fused_lm_head=True)
        ref_log_probs = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_log_probs = self.ref_model(**inputs, fused_lm_head=True).log_probs
        mask = (
            outputs.label_mask if getattr(outputs, "label_mask", None) is not None else inputs["labels"][:, 1:] != -100
        )
        loss, logs = self.args.method_spec.loss(self.args, outputs.log_probs, mask, num_items_in_batch, ref_log_probs)
        # like SFTTrainer: num_items_in_batch counts every rank's tokens and DDP averages the gradients
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        for name, value in logs.items():
            self._metrics["train"][name].append(self.accelerator.gather_for_metrics(value).mean().item())
        return loss


class _AnchorAfterPrepare(TrainerCallback):
    """Builds (or places) the trainer's anchor at `on_train_begin`: after `accelerator.prepare`, before step 0."""

    def __init__(self, trainer: RPSFTTrainer):
        self._trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self._trainer._anchor_on_train_begin()


def frozen_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A frozen copy of `model` (the IW-SFT reference pi_ref), cast to `dtype` when given.

    Under bf16 mixed precision the reference only runs forward passes under autocast, so holding it
    in bf16 halves its memory (an fp32 copy of an 8B model is 32 GB per GPU) without changing what
    the weight computation sees. A model that DeepSpeed ZeRO-3 has partitioned (loaded under
    `zero.Init`: each parameter an empty placeholder) is not deep-copied: a new model of the same
    config is built (partitioned the same way) and each weight copied into it, gathered one at a time.
    """
    if any(is_zero3(p) for p in model.parameters()):
        ref = _zero3_copy(model)  # its dtype is the DeepSpeed engine's (bf16 config: bf16)
    else:
        ref = copy.deepcopy(model)
        if dtype is not None:
            ref = ref.to(dtype)
    return ref.eval().requires_grad_(False)


def _zero3_copy(model: nn.Module) -> nn.Module:
    import deepspeed  # lazy: the deepspeed extra

    ref = type(model)._from_config(model.config, dtype=next(model.parameters()).dtype)
    src = dict(model.named_parameters())
    with torch.no_grad():
        for name, q in ref.named_parameters():
            p = src[name]
            with deepspeed.zero.GatheredParameters([p, q], modifier_rank=0):
                q.copy_(p)
        for name, b in model.named_buffers():
            ref.get_buffer(name).copy_(b)
    return ref


def prepare_reference(trainer, ref_model: nn.Module) -> nn.Module:
    """The frozen reference model placed as the policy is: a DeepSpeed inference engine (ZeRO-3: partitioned like
    the policy; ZeRO-1/2: replicated), an FSDP2-sharded module, else the model on the trainer's device (TRL's
    `prepare_deepspeed` / `prepare_fsdp`, as its DPO and GRPO trainers do for theirs). TRL's fused LM head is
    added before wrapping."""
    ref_model.eval().requires_grad_(False)
    add_fused_lm_head(ref_model)
    if trainer.is_deepspeed_enabled:
        return prepare_deepspeed(ref_model, trainer.accelerator)
    if trainer.is_fsdp_enabled:
        return prepare_fsdp(ref_model, trainer.accelerator)  # fully_shard moves the shards to the device
    return ref_model.to(trainer.args.device)


def save_full_model(trainer, output_dir: str) -> bool:
    """Under FSDP with a sharded state dict type (configs/accelerate/fsdp2.yaml: checkpoints stay sharded, for
    resume), write the full weights to `output_dir` in `save_pretrained` format, as `save_model` does for
    FULL_STATE_DICT; True when it did (on every rank: gathering is a collective), False otherwise (nothing done).

    transformers' `Trainer.save_model` writes no weights at all for SHARDED_STATE_DICT."""
    if not getattr(trainer, "is_fsdp_enabled", False):
        return False
    if "FULL_STATE_DICT" in str(trainer.accelerator.state.fsdp_plugin.state_dict_type):
        return False
    state_dict = trainer.accelerator.get_state_dict(trainer.model)  # full tensors on rank 0, on the CPU
    if trainer.args.should_save:
        os.makedirs(output_dir, exist_ok=True)
        trainer._save(output_dir, state_dict=state_dict)
    trainer.accelerator.wait_for_everyone()
    return True
