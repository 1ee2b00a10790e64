"""`RPSFTConfig`: TRL's SFTConfig plus the method and the anchor's settings (defaults from the paper).

It configures every method of the methods table (`anchorft.rpsft.methods`), not only RPSFT."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
from trl import SFTConfig

from anchorft.dataclass_yaml import check_choices
from anchorft.rpsft.adapters import get_adapter
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.arg_checks import check_rpsft_numbers, check_trainer_args
from anchorft.rpsft.methods import METHODS, get_method

__all__ = ["RPSFTConfig", "ScriptArguments", "accumulation_for"]

logger = logging.getLogger(__name__)


# anchor options the adapter anchor (`lora_anchor`) does not read: set with it, they are refused, not ignored
_ADAPTER_UNREAD = ("anchor_rank_rule", "anchor_map", "anchor_layers", "anchor_memory", "anchor_lambda_rest",
                   "anchor_targets", "anchor_include_embeddings")  # fmt: skip


def adapter_anchor_ignores(options: AnchorOptions) -> list[str]:
    """The anchor options set away from their defaults that the adapter anchor would not read (it anchors every
    adapted matrix at anchor_rank with anchor_lambda and anchor_kind)."""
    defaults = AnchorOptions()
    return [f"{n}={getattr(options, n)!r}" for n in _ADAPTER_UNREAD if getattr(options, n) != getattr(defaults, n)]


@dataclass
class ScriptArguments:
    """The model and data of `anchorft train` (parsed by TrlParser beside `RPSFTConfig`)."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "Model: a local path or hub name."})
    dataset: str | None = field(
        default=None,
        metadata={"help": "Training data: .jsonl / .json / .parquet file, save_to_disk folder, or hub name."},
    )
    eval_dataset: str | None = field(default=None, metadata={"help": "Optional evaluation data (same forms)."})
    tokenizer_name_or_path: str | None = field(default=None, metadata={"help": "Tokenizer (default: the model's)."})


@dataclass
class RPSFTConfig(AnchorOptions, SFTConfig):
    """SFTConfig with the fine-tuning method and the subspace anchor (Jin et al., arXiv:2605.10973).

    The name is the paper's, but it runs every method of the table `anchorft.rpsft.methods.METHODS`
    (sft, dft, iw_sft, l2, rpsft, and any registered one); `method` selects the row. The anchor's options are
    `AnchorOptions`, a base class (flat `--anchor_*` flags); the SFT-only ones (anchor_every, calibration,
    SVD, dtype, mode) are here.

    On a machine without a GPU, `use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False`
    are chosen automatically (TRL would otherwise refuse to start). Every field is checked here, so a
    bad value is a ValueError naming the field before any model or data is loaded.
    """

    method: str = field(
        default="rpsft",
        metadata={
            "help": "Fine-tuning method (anchorft.rpsft.methods): "
            + ", ".join(f"'{m.name}' ({m.help})" for m in METHODS.values())
            + ".",
            "choices": METHODS.keys(),  # a live view: a method registered later is a choice too
        },
    )
    anchor_every: int = field(
        default=1,
        metadata={"help": "Apply the penalty every n optimiser steps, scaled by n (1 = every step, as the paper)."},
    )
    anchor_calibration: str | None = field(
        default=None,
        metadata={
            "help": "fisher:F calibration (`anchorft train`): a JSONL of out-of-domain prompt/completion rows for "
            "F_ood; the in-domain gradient G comes from anchor_calibration_id (default: the --dataset JSONL)."
        },
    )
    anchor_calibration_id: str | None = field(
        default=None, metadata={"help": "fisher:F calibration: in-domain JSONL (default: the training dataset)."}
    )
    anchor_calibration_samples: int = field(
        default=32, metadata={"help": "fisher:F calibration: examples per file (one gradient each)."}
    )
    anchor_svd: str = field(
        default="exact",
        metadata={
            "help": "SVD of the pretrained weights: 'exact' (fp32, paper) or 'randomized' (fast, approximate).",
            "choices": ["exact", "randomized"],
        },
    )
    anchor_dtype: str = field(
        default="float32",
        metadata={
            "help": "dtype of the stored bases: float32 (default), float64, bfloat16 or float16.",
            "choices": ["float32", "float64", "bfloat16", "float16"],
        },
    )
    anchor_mode: str = field(
        default="grad",
        metadata={
            "help": "'grad': add the closed-form gradient to .grad once per optimiser step (default). 'autograd': "
            "add the penalty to the loss of the step's last micro-batch (used under DeepSpeed).",
            "choices": ["grad", "autograd"],
        },
    )
    iw_temperature: float = field(default=1.0, metadata={"help": "IW-SFT temperature T in exp(T * mean log ratio)."})
    iw_clip: float = field(default=16.0, metadata={"help": "IW-SFT clip of the sequence weight (paper: 16)."})
    iw_detach_weight: bool = field(
        default=False,
        metadata={
            "help": "IW-SFT: detach the sequence weight (no gradient through it). Default False, as in the paper's "
            "release, where the gradient also flows through the weight."
        },
    )
    effective_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Sequences per optimiser step. When set, gradient_accumulation_steps is derived from it as "
            "effective_batch_size / (per_device_train_batch_size x processes) (processes: $WORLD_SIZE, 1 without a "
            "launcher); a count it cannot be reached with, or another gradient_accumulation_steps than 1, is an "
            "error before anything is loaded."
        },
    )
    chat_format: str = field(
        default="model",
        metadata={
            "help": "Training text: 'model' (each model's own chat template, default) or 'release' (the RPSFT "
            "release's text: Llama-3 header strings with a literal backslash-n for Qwen, the template plus a trailing "
            "newline for Llama; attention mask input_ids != pad_token_id; anchorft.rpsft.release_format).",
            "choices": ["model", "release"],
        },
    )
    iw_ref_model: str | None = field(
        default=None,
        metadata={
            "help": "IW-SFT reference model: a path or hub name, or 'copy' for a frozen copy of the starting model."
        },
    )
    lora_rank: int = field(
        default=32, metadata={"help": "method lora: rank r of the LoRA adapters (the release's LoRA baseline: 32)."}
    )
    lora_alpha: float = field(
        default=64.0, metadata={"help": "method lora: alpha; the update is (alpha / r) B A (release: 64)."}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "method lora: dropout on the adapter's input (0)."})
    lora_target_modules: str = field(
        default="all-linear",
        metadata={
            "help": "methods lora and osf: the adapted modules, PEFT's target_modules: 'all-linear' (every linear "
            "layer but the output layer), 'all-linear-embedding' (lora: every linear and embedding layer but the "
            "output layer, which TRL cannot adapt: the release's set without lm_head; refused on tied embeddings) "
            "or a regex matched against the full module names."
        },
    )
    lora_anchor: bool = field(
        default=False,
        metadata={
            "help": "method lora: add RPSFT's penalty (anchor_kind, anchor_rank, anchor_lambda) on the adapter's "
            "effective update (scaling B A, summed over active adapters) against the top-k bases of the frozen "
            "base weights (anchorft.rpsft.adapter_anchor)."
        },
    )

    def __post_init__(self):
        self._validate_rpsft_fields()
        check_trainer_args(self)
        if self.effective_batch_size is not None:
            self.gradient_accumulation_steps = accumulation_for(
                self.effective_batch_size,
                self.per_device_train_batch_size,
                int(os.environ.get("WORLD_SIZE", "1")),
                self.gradient_accumulation_steps,
            )
        spec = get_method(self.method)
        if spec.loss_type != "nll":
            self.loss_type = spec.loss_type
        else:
            owner = next((m.name for m in METHODS.values() if m.loss_type == self.loss_type != "nll"), None)
            if owner is not None:
                raise ValueError(
                    f"loss_type={self.loss_type!r} conflicts with method={self.method!r}: use method={owner!r}"
                )
        if not torch.cuda.is_available():
            if self.bf16 or self.fp16 or not self.use_cpu:
                logger.info("no GPU: using use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False")
            self.use_cpu, self.bf16, self.fp16 = True, False, False
            self.gradient_checkpointing = self.activation_checkpointing = False
        super().__post_init__()

    def _validate_rpsft_fields(self) -> None:
        get_method(self.method)  # ValueError listing the methods
        self.validate_anchor_options()
        check_choices(self, SFTConfig)  # anchor_svd, anchor_dtype, anchor_mode, chat_format; method, kind above
        check_rpsft_numbers(self)  # anchor_every, lora_rank, lora_alpha, lora_dropout
        if self.method_spec.peft and (why := get_adapter(self.method_spec.peft).refuse(self)):
            raise ValueError(why)
        if self.lora_anchor and self.method_spec.peft != "lora":
            raise ValueError(f"lora_anchor: only for method 'lora', got method={self.method!r}")
        if self.lora_anchor and (ignored := adapter_anchor_ignores(self)):
            raise ValueError(
                f"lora_anchor: the adapter anchor takes anchor_rank, anchor_lambda and anchor_kind on every adapted "
                f"matrix; {', '.join(ignored)} would be ignored: leave {'it' if len(ignored) == 1 else 'them'} unset"
            )
        if not self.iw_temperature > 0:
            raise ValueError(f"iw_temperature must be > 0, got {self.iw_temperature!r}")
        if not self.iw_clip > 0:
            raise ValueError(f"iw_clip must be > 0, got {self.iw_clip!r}")

    @property
    def method_spec(self):
        """The method's row of the methods table (`anchorft.rpsft.methods.Method`)."""
        return get_method(self.method)

    @property
    def anchored(self) -> bool:
        """True for the methods with a weight anchor (the table's `anchored`: rpsft, l2)."""
        return self.method_spec.anchored

    @property
    def weight_anchored(self) -> bool:
        """True when a penalty anchors the weights: the table's anchor (rpsft, l2) or lora_anchor on an adapter."""
        return self.anchored or bool(self.lora_anchor)

    @property
    def anchor_torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.anchor_dtype)


def accumulation_for(effective_batch: int, per_device: int, processes: int, given: int = 1) -> int:
    """Gradient-accumulation steps that give `effective_batch` sequences a step; ValueError (one line) if none do,
    or if `given` (gradient_accumulation_steps as set, 1: not set) is another count."""
    if isinstance(effective_batch, bool) or not isinstance(effective_batch, int) or effective_batch < 1:
        raise ValueError(f"effective_batch_size must be an integer >= 1, got {effective_batch!r}")
    per_step = per_device * processes
    if per_step < 1 or effective_batch % per_step:
        raise ValueError(
            f"effective_batch_size {effective_batch} cannot be reached with {per_device} sequence(s) per device on "
            f"{processes} process(es) ({per_device} x {processes} = {per_step} does not divide {effective_batch}); "
            "change --per_device_train_batch_size, the number of GPUs, or --effective_batch_size"
        )
    accum = effective_batch // per_step
    if given not in (1, accum):
        raise ValueError(
            f"gradient_accumulation_steps {given} contradicts effective_batch_size {effective_batch} ({per_device} "
            f"per device x {processes} process(es) needs {accum}); set only one of them (--effective_batch_size "
            "null to drop it)"
        )
    return accum
