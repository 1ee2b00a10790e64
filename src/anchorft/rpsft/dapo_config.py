"""`DAPOConfig`: TRL's GRPOConfig with DAPO's settings in the release's units (defaults: the paper's).

DAPO (Yu et al. 2025, arXiv:2503.14476) as the RPSFT release runs it counts in RL steps: each step draws
`prompts_per_step` prompts x `num_generations` completions, then makes `prompts_per_step / mini_batch_prompts`
policy updates, each over a mini-batch accumulated from micro-batches of `micro_batch` completions per device.
TRL counts optimiser updates. `__post_init__` derives TRL's fields from the RL-step ones (`dapo_schedule`):
max_steps, per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, warmup_steps and
the scheduler; a TRL field set by hand to another value than the derived one is an error naming the RL-step
field to set instead. `use_vllm` takes "auto" (TRL's colocated vLLM rollouts when vLLM and CUDA are there),
"true" or "false" and is a bool after construction. On a machine without a GPU, use_cpu=True, bf16=False and
gradient_checkpointing=False are chosen automatically, as for `RPSFTConfig`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, TrlParser

from anchorft.dataclass_yaml import check_choices
from anchorft.errors import check_mapping_types
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.arg_checks import check_trainer_args
from anchorft.rpsft.methods import RL_ANCHOR_METHODS, get_method
from anchorft.rpsft.prechecks import read_rl_config
from anchorft.rpsft.recipes import as_trl_reads, parse_with_config

__all__ = [
    "DAPOConfig",
    "RLScriptArguments",
    "dapo_schedule",
    "resolve_vllm",
    "load_rl_config",
    "parse_rl_argv",
    "rl_parser",
]

# the TRL fields that DAPOConfig derives, with the RL-step field to set instead
_DERIVED = {
    "max_steps": "steps",
    "gradient_accumulation_steps": "micro_batch / mini_batch_prompts",
    "steps_per_generation": "prompts_per_step / mini_batch_prompts",
    "warmup_steps": "rl_warmup_steps or rl_warmup_ratio",
}

_SUMMARY = (
    *("steps", "prompts_per_step", "mini_batch_prompts", "micro_batch", "num_generations", "max_completion_length"),
    *("learning_rate", "rl_warmup_steps", "rl_warmup_ratio", "weight_decay", "max_grad_norm", "temperature", "top_p"),
    *("epsilon", "epsilon_high", "delta", "beta", "loss_type", "mask_truncated_completions", "overlong_cache"),
    *("master_dtype", "gradient_checkpointing", "use_vllm", "vllm_gpu_memory_utilization", "seed", "save_model"),
    *("max_prompt_length", "vllm_importance_sampling_correction"),
    *("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation"),
    *("warmup_steps", "lr_scheduler_type", "logging_steps"),
)


def dapo_schedule(
    *,
    steps: int,
    prompts_per_step: int,
    num_generations: int,
    mini_batch_prompts: int | None = None,
    micro_batch: int | None = None,
    rl_warmup_steps: int = 0,
    rl_warmup_ratio: float = 0.0,
    world_size: int = 1,
) -> dict:
    """TRL's batch and schedule fields for DAPO counted in RL steps. One RL step = `prompts_per_step` x
    `num_generations` completions, then `prompts_per_step / mini_batch_prompts` updates (TRL optimiser steps)
    over mini-batches of `mini_batch_prompts` x `num_generations` completions accumulated from micro-batches of
    `micro_batch` per device; max_steps and the warm-up count updates, as VERL's per-update schedule does."""
    mini = mini_batch_prompts or prompts_per_step
    if mini < 1 or prompts_per_step % mini:
        raise ValueError(f"mini_batch_prompts ({mini}) must divide prompts_per_step ({prompts_per_step})")
    updates = prompts_per_step // mini
    mini_completions = mini * num_generations
    micro = micro_batch or max(1, mini_completions // world_size)
    if mini_completions % (micro * world_size):
        raise ValueError(
            f"a mini-batch of {mini_completions} completions is not a whole number of micro-batches of {micro} "
            f"on {world_size} device(s)"
        )
    accum = mini_completions // (micro * world_size)
    warm = rl_warmup_steps * updates if rl_warmup_steps else int(round(rl_warmup_ratio * steps * updates))
    return dict(
        max_steps=steps * updates, per_device_train_batch_size=micro, gradient_accumulation_steps=accum,
        steps_per_generation=accum * updates, num_iterations=1, warmup_steps=warm,
        lr_scheduler_type="constant_with_warmup" if warm > 0 else "constant",
    )  # fmt: skip


def resolve_vllm(want: str | bool, cuda: bool, has_vllm: bool) -> bool:
    """use_vllm "auto" | "true" | "false" (or a bool) -> whether TRL generates with vLLM (colocated)."""
    want = str(want).lower()
    if want not in ("auto", "true", "false"):
        raise ValueError(f"use_vllm must be auto, true or false, got {want!r}")
    if want == "true" and not (has_vllm and cuda):
        raise ValueError("use_vllm true: vLLM rollouts need vllm installed and a CUDA device")
    return want == "true" or (want == "auto" and has_vllm and cuda)


@dataclass
class DAPOConfig(AnchorOptions, GRPOConfig):
    """GRPOConfig for DAPO from an SFT checkpoint, in RL steps; defaults are the paper's (the release's) values.

    `anchorft rl` parses it with TrlParser (YAML through `--config`, every field also a flag);
    `anchorft.rpsft.rl.run_rl` trains with it. Fields TRL already has keep TRL's meaning; the defaults of
    learning_rate (1e-6), num_generations (8), epsilon / epsilon_high (0.2 / 0.28), beta (0), loss_type ("dapo"),
    temperature and top_p (1.0) are DAPO's.
    """

    steps: int = field(default=100, metadata={"help": "RL steps (rollout batches); TRL's max_steps is derived."})
    prompts_per_step: int = field(default=4, metadata={"help": "Prompts per RL step (each gets num_generations)."})
    mini_batch_prompts: int | None = field(
        default=None, metadata={"help": "Prompts per policy update (must divide prompts_per_step); None: one update."}
    )
    micro_batch: int | None = field(
        default=None,
        metadata={"help": "Completions per device per forward pass; None: the whole mini-batch on each device."},
    )
    rl_warmup_steps: int = field(default=0, metadata={"help": "RL steps of linear warm-up (VERL counts them so)."})
    rl_warmup_ratio: float = field(default=0.0, metadata={"help": "Warm-up as a fraction of the RL steps."})
    overlong_cache: int | None = field(
        default=None,
        metadata={"help": "DAPO's soft overlong punishment over the last N completion tokens (eq. 13); 0: off."},
    )
    master_dtype: str = field(
        default="fp32",
        metadata={
            "help": "'fp32': fp32 weights and AdamW, bf16 autocast on GPU (lr 1e-6 rounds away in bf16); "
            "'bf16': all bf16.",
            "choices": ["fp32", "bf16"],
        },
    )
    save_model: bool = field(default=True, metadata={"help": "Save the final model to OUT/model."})
    use_vllm: str = field(  # type: ignore[assignment]  # "auto" | "true" | "false"; a bool after __post_init__
        default="auto",
        metadata={"help": "'auto': TRL's colocated vLLM rollouts when vLLM and CUDA are there; 'true' or 'false'."},
    )
    max_completion_length: int | None = field(default=1024, metadata={"help": "Tokens per completion at most."})
    max_prompt_length: int | None = field(
        default=2048,
        metadata={
            "help": "Prompts longer than this (tokens, chat template included) are dropped before training and "
            "counted (the release's filter); None keeps every prompt."
        },
    )
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={
            "help": "TRL's truncated importance-sampling correction of vLLM rollouts (TRL's default: on); off as "
            "in the release, which runs without one."
        },
    )
    epsilon_high: float | None = field(default=0.28, metadata={"help": "DAPO's upper clip (eq. 8)."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimiser steps."})
    seed: int = field(default=0, metadata={"help": "Random seed (also the data seed)."})
    save_strategy: str = field(default="no", metadata={"help": "TRL checkpoints during training (default: none)."})
    disable_tqdm: bool | None = field(default=False, metadata={"help": "Hide TRL's progress bar."})
    # the weight anchor during RL (docs/anchoring.md): AnchorOptions, as `anchorft train`, plus these two
    anchor_method: str = field(
        default="none",
        metadata={
            "help": "Weight anchor during DAPO: 'none' or an anchored method of the methods table (rpsft: the top-k "
            "subspace anchor; l2: full rank).",
            "choices": RL_ANCHOR_METHODS,
        },
    )
    anchor_reference: str = field(
        default="start",
        metadata={
            "help": "W_0 of the anchor: 'start' (the RL starting weights, e.g. the SFT model) or a model folder."
        },
    )

    def __post_init__(self):
        if self.overlong_cache == 0:
            self.overlong_cache = None
        self._validate_dapo_fields()
        check_trainer_args(self)
        cuda = torch.cuda.is_available()
        world = int(os.environ.get("WORLD_SIZE", "1"))
        derived = dapo_schedule(
            steps=self.steps, prompts_per_step=self.prompts_per_step, num_generations=self.num_generations,
            mini_batch_prompts=self.mini_batch_prompts, micro_batch=self.micro_batch,
            rl_warmup_steps=self.rl_warmup_steps, rl_warmup_ratio=self.rl_warmup_ratio, world_size=world,
        )  # fmt: skip
        defaults = {"max_steps": -1, "gradient_accumulation_steps": 1, "steps_per_generation": None, "warmup_steps": 0}
        for name, instead in _DERIVED.items():
            if getattr(self, name) not in (defaults[name], derived[name]):
                raise ValueError(
                    f"{name}={getattr(self, name)!r}: DAPOConfig derives it ({derived[name]!r}); set {instead} instead"
                )
        for name, value in derived.items():
            setattr(self, name, value)
        if self.data_seed is None:
            self.data_seed = self.seed
        self.vllm_requested = str(self.use_vllm).lower()  # "auto" | "true" | "false", before this machine decides
        self.use_vllm = resolve_vllm(self.use_vllm, cuda, importlib.util.find_spec("vllm") is not None)
        if self.use_vllm:
            self.vllm_mode = "colocate"
        if not cuda:
            self.use_cpu, self.bf16, self.fp16 = True, False, False
            self.gradient_checkpointing = self.activation_checkpointing = False
        else:
            self.bf16 = True if self.bf16 is None else self.bf16
        super().__post_init__()

    def dapo_settings(self) -> dict:
        """The settings DAPO runs with (the RL-step fields, TRL's fields they give, and DAPO's own), as JSON."""
        d = self.to_dict()
        return {k: d[k] for k in _SUMMARY}

    def _validate_dapo_fields(self) -> None:
        for name in ("steps", "prompts_per_step", "max_completion_length"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.num_generations is None or self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (group advantages), got {self.num_generations}")
        if not (0 <= self.epsilon and (self.epsilon_high is None or self.epsilon_high >= self.epsilon)):
            raise ValueError(f"need 0 <= epsilon <= epsilon_high, got {self.epsilon}, {self.epsilon_high}")
        if self.beta < 0 or self.learning_rate <= 0 or self.temperature <= 0:
            raise ValueError("need beta >= 0, learning_rate > 0, temperature > 0")
        if self.overlong_cache is not None and not 0 < self.overlong_cache < self.max_completion_length:
            raise ValueError(f"overlong_cache must be in (0, max_completion_length), got {self.overlong_cache}")
        mp = self.max_prompt_length
        if mp is not None and (isinstance(mp, bool) or not isinstance(mp, int) or mp < 1):
            raise ValueError(f"max_prompt_length must be an integer >= 1 or None, got {mp!r}")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch}")
        check_choices(self, GRPOConfig)  # master_dtype, anchor_method, anchor_kind
        if self.delta is not None and self.delta <= 1 + (self.epsilon_high or self.epsilon):
            raise ValueError(f"delta (dual clip) must exceed 1 + epsilon_high, got {self.delta}")
        if self.rl_warmup_steps < 0 or self.rl_warmup_ratio < 0 or (self.rl_warmup_steps and self.rl_warmup_ratio):
            raise ValueError("give rl_warmup_steps >= 0 or rl_warmup_ratio, not both")
        if self.anchor_method != "none":
            self.validate_anchor_options()

    @property
    def anchor_spec(self):
        """The methods-table row of `anchor_method` (None for "none")."""
        return None if self.anchor_method == "none" else get_method(self.anchor_method)


@dataclass
class RLScriptArguments:
    """The model, data and output of `anchorft rl` (parsed by TrlParser beside `DAPOConfig`)."""

    model: str | None = field(default=None, metadata={"help": "Local SFT checkpoint directory."})
    dataset: str | None = field(
        default=None, metadata={"help": "JSONL prompts with gold answers (required unless --estimate)."}
    )
    out: str | None = field(default=None, metadata={"help": "Output directory (required unless --estimate)."})
    limit: int | None = field(default=None, metadata={"help": "Use the first N prompts."})
    skip_bad: bool = field(default=False, metadata={"help": "Skip and count malformed dataset lines."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an output folder that holds another run."})
    estimate: bool = field(
        default=False,
        metadata={
            "help": "Print the memory estimate for --model (parameters counted from config.json, no weights "
            "loaded) on 1 and 8 GPUs, and exit."
        },
    )


def load_rl_config(path: str) -> dict:
    """The `--config` YAML (`preset:` parents merged), its keys and value types checked against the dataclasses."""
    path, cfg = read_rl_config(path, DAPOConfig)
    as_trl_reads(cfg, RLScriptArguments, DAPOConfig)  # `learning_rate: 1e-6` is a float, as TrlParser reads it
    check_mapping_types(cfg, RLScriptArguments, path)
    check_mapping_types(cfg, DAPOConfig, path)
    return cfg


def parse_rl_argv(argv: list[str]) -> tuple:
    """(RLScriptArguments, DAPOConfig) from `anchorft rl`'s arguments: TrlParser over both (every field a flag, as
    --snake_case or --kebab-case), with the `--config` YAML read, its keys and value types checked (one-line errors
    naming the file), then set as the parser's defaults."""
    return parse_with_config(rl_parser(), argv, load_rl_config)


def rl_parser() -> TrlParser:
    """TrlParser over (RLScriptArguments, DAPOConfig): every field a flag, as --snake_case or --kebab-case."""
    return TrlParser((RLScriptArguments, DAPOConfig), prog="anchorft rl")
