"""The fine-tuning methods, in one table: what each one is, and everything that switches on it reads it.

The config, the trainer, `train`, the recipe checks, the testbed comparison and its report, the RL anchor
(`RL_ANCHOR_METHODS`: "none" and the anchored rows) and the memory estimate all look a method up here; none compares
method names itself. Adding a method: docs/architecture.md, "How to add". `tests/rpsft/test_methods.py` defines a
method in the test module, registers it and trains with it; `tests/rpsft/test_method_from_table.py` checks that a
registered row is a method of every part above.

A method is one of:
- a TRL loss: `loss_type` is passed to TRL's SFTConfig ("nll" for SFT, "dft" for DFT);
- a custom loss on per-token log-probabilities: `loss(args, log_probs, mask, num_items, ref_log_probs)`
  returns (loss, {log name: per-sequence tensor}); the trainer computes the log-probabilities with TRL's
  fused LM head, and those of a frozen reference model when `needs_reference`;
- either of these plus the subspace anchor (`anchored`), at rank `anchor_rank` or at full rank (`full_rank`:
  the L2 penalty ||W - W_0||^2 on every matrix);
- a PEFT adapter (`peft`: "lora" or "osf"): the model is wrapped by PEFT before training (only the adapter
  trains) and merged back into a plain model when training ends (`anchorft.rpsft.peft_methods`); a lora run
  may carry RPSFT's penalty on its effective update (`lora_anchor`, `anchorft.rpsft.adapter_anchor`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from anchorft.rpsft.adapters import ADAPTERS
from anchorft.rpsft.losses import iw_sft_loss

__all__ = ["Method", "METHODS", "RL_ANCHOR_METHODS", "RUN_KEYS", "get_method", "method_names", "register"]

# the settings a comparison may sweep per run (see `Method.sweep_keys`): AnchorOptions fields (not anchor_map),
# the learning rate and the LoRA rank; the testbed's RunSpec has one override field for each, in this order
RUN_KEYS = (
    "anchor_rank",
    "anchor_lambda",
    "anchor_targets",
    "anchor_include_embeddings",
    "learning_rate",
    "anchor_rank_rule",
    "anchor_layers",
    "anchor_memory",
    "anchor_lambda_rest",
    "anchor_kind",
    "lora_rank",
)
_ANCHOR_KEYS = ("anchor_lambda", "anchor_targets", "anchor_include_embeddings", "learning_rate", "anchor_layers")
# the options of an anchor below full rank (rpsft): rank rules, budget, remainder L2, kind
_RANK_KEYS = ("anchor_rank", "anchor_rank_rule", "anchor_memory", "anchor_lambda_rest", "anchor_kind")

LossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class Method:
    """One row of the methods table."""

    name: str
    help: str
    loss_type: str = "nll"  # TRL SFTConfig.loss_type
    anchored: bool = False  # adds lambda * R(W), the subspace anchor's penalty
    full_rank: bool = False  # the anchor at every rank: L2 anchoring (only with anchored)
    needs_reference: bool = False  # a frozen reference model (passed to `loss` as ref_log_probs)
    loss: LossFn | None = None  # custom loss on per-token log-probabilities (None: TRL's loss_type)
    sweep_keys: tuple[str, ...] = ("learning_rate",)  # RUN_KEYS a comparison sweep applies to
    colour: str = "k"  # in the testbed's trade-off plot
    peft: str | None = None  # a registered PEFT method ("lora", "osf"): anchorft.rpsft.adapters

    def __post_init__(self) -> None:
        if self.full_rank and not self.anchored:
            raise ValueError(f"method {self.name!r}: full_rank needs anchored")
        if self.needs_reference and self.loss is None:
            raise ValueError(f"method {self.name!r}: needs_reference needs a custom loss that reads ref_log_probs")
        if self.peft is not None and self.peft not in ADAPTERS:
            raise ValueError(
                f"method {self.name!r}: peft must be None or one of {sorted(ADAPTERS)}, got {self.peft!r}"
            )
        if self.peft is not None and self.anchored:
            raise ValueError(f"method {self.name!r}: a PEFT method anchors its adapter itself (lora_anchor)")
        bad = [k for k in self.sweep_keys if k not in RUN_KEYS]
        if bad:
            raise ValueError(f"method {self.name!r}: sweep_keys {bad} not in {RUN_KEYS}")

    @property
    def uses_rank(self) -> bool:
        """True when `anchor_rank` matters (an anchor below full rank)."""
        return self.anchored and not self.full_rank


def _iw_sft(args, log_probs, mask, num_items, ref_log_probs):
    loss, w = iw_sft_loss(
        log_probs,
        ref_log_probs,
        mask,
        num_items=num_items,
        temperature=args.iw_temperature,
        clip=args.iw_clip,
        detach_weight=args.iw_detach_weight,
    )
    return loss, {"iw/weight_mean": w}


METHODS: dict[str, Method] = {}


def register(method: Method, replace: bool = False) -> Method:
    """Add `method` to the table (ValueError if the name is taken, unless `replace`); returns it."""
    if method.name in METHODS and not replace:
        raise ValueError(f"method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def method_names() -> tuple[str, ...]:
    """The registered methods' names, in table order."""
    return tuple(METHODS)


class _RLAnchorMethods:
    """'none' and the anchored methods of the table, read when asked (a method registered later is one too): the
    weight anchors of the RL stage (`DAPOConfig.anchor_method`), also as argparse choices."""

    def __iter__(self):
        return iter(("none", *(m.name for m in METHODS.values() if m.anchored)))

    def __contains__(self, name) -> bool:
        return name in tuple(self)


RL_ANCHOR_METHODS = _RLAnchorMethods()


def get_method(name: str) -> Method:
    """The table row of `name`; ValueError listing the methods otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {method_names()}, got {name!r}") from None


register(Method("sft", "NLL", colour="C0"))
register(Method("dft", "dynamic fine-tuning, TRL's loss_type='dft'", loss_type="dft", colour="C1"))
register(
    Method(
        "iw_sft", "importance-weighted SFT, needs a reference model", loss=_iw_sft, needs_reference=True, colour="C2"
    )  # fmt: skip
)
register(
    Method("l2", "NLL + lambda ||W - W0||^2", anchored=True, full_rank=True, sweep_keys=_ANCHOR_KEYS, colour="C3")
)
register(
    Method(
        "rpsft",
        "NLL + lambda ||U0^T (W - W0) V0||^2 on the top-k singular subspaces",
        anchored=True,
        sweep_keys=(*_RANK_KEYS, *_ANCHOR_KEYS),
        colour="C4",
    )  # fmt: skip
)
register(
    Method(
        "lora",
        "LoRA adapters through PEFT (lora_rank, lora_alpha, lora_dropout, lora_target_modules), merged at the end; "
        "lora_anchor adds RPSFT's penalty on the adapter's effective update",
        peft="lora",
        sweep_keys=("lora_rank", "learning_rate", "anchor_rank", "anchor_lambda", "anchor_kind"),
        colour="C5",
    )  # fmt: skip
)
register(
    Method(
        "osf",
        "PEFT's orthogonal subspace fine-tuning: the top anchor_rank singular directions of each matrix frozen "
        "(effective_rank = anchor_rank), the rest trained",
        peft="osf",
        sweep_keys=("anchor_rank", "learning_rate"),
        colour="C6",
    )  # fmt: skip
)
