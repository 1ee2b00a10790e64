"""The PEFT methods of the methods table (`Method.peft`): LoRA and PEFT's orthogonal subspace fine-tuning (OSF).

- lora (Hu et al. 2021): W = W_0 + (alpha / r) B A on the adapted modules, A (r x n) random, B (m x r) zero at
  the start; only A and B train. The release's LoRA baseline: r = 32, alpha = 64, dropout 0.
- osf (PEFT's `OSFConfig`, orthogonal subspace fine-tuning): each adapted W_0 = U S V^T is split at
  `effective_rank`; the top singular directions are frozen, the rest (its own U_low S_low V_low) train with
  gradients projected orthogonal to the frozen subspaces. `effective_rank` is RPSFT's `anchor_rank`, so the two
  protect the same number of directions per matrix.

The trainer wraps the model with `peft_config_for(args)` (TRL's SFTTrainer calls `get_peft_model`), and
`anchorft.rpsft.train.train` merges the adapter back (`merge_adapter_model`) once training ends, so what is
saved and evaluated is a plain `save_pretrained` model of the base's architecture.
"""

from __future__ import annotations

from torch import nn

__all__ = ["peft_config_for", "merge_adapter_model", "is_peft_model"]


def peft_config_for(args):
    """The PEFT config of `args.method` (a `RPSFTConfig`): a `LoraConfig` or an `OSFConfig`; None for a method
    without an adapter."""
    kind = args.method_spec.peft
    if kind is None:
        return None
    try:
        from peft import LoraConfig, OSFConfig
    except ImportError as e:  # pragma: no cover - the dev and peft extras install it
        raise ImportError(f"method {args.method!r} needs peft: pip install 'anchorft[peft]'") from e
    targets = args.lora_target_modules
    if kind == "lora":
        return LoraConfig(
            r=args.lora_rank,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=targets,
            bias="none",
            task_type="CAUSAL_LM",
        )
    return OSFConfig(effective_rank=args.anchor_rank, target_modules=targets, task_type="CAUSAL_LM")


def is_peft_model(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, PeftModel)


def merge_adapter_model(model: nn.Module) -> nn.Module:
    """The plain model with the active adapters merged into its weights (`merge_and_unload`); `model` itself when
    it holds no adapter."""
    if not is_peft_model(model):
        return model
    return model.merge_and_unload()
