"""`AnchorOptions`: the subspace anchor's settings, declared once (names, types, defaults: the paper's, help).

A base class of `RPSFTConfig` (`anchorft train`), `DAPOConfig` (`anchorft rl`) and the testbed's RL stage
settings, so TrlParser / HfArgumentParser keep one flat `--anchor_*` flag per field; the testbed comparison's
`RunSpec` takes its per-run overrides from it. `build_anchor` is the one construction of a `SubspaceAnchor`
from them. Options of one trainer only stay there (`anchor_every`, `anchor_svd`, ... in RPSFTConfig;
`anchor_method`, `anchor_reference` in DAPOConfig).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from anchorft.rpsft.paper import PAPER_RANK

__all__ = ["AnchorOptions", "anchor_option_names"]


@dataclass
class AnchorOptions:
    """The anchor's rank (or rank rule, map, budget), lambda, matrices and kind (Jin et al., arXiv:2605.10973)."""

    anchor_rank: int = field(
        default=PAPER_RANK, metadata={"help": "k: rank of the anchored singular subspaces (paper: 768). Must be >= 1."}
    )
    anchor_lambda: float = field(
        default=1.0, metadata={"help": "lambda: weight of the anchor penalty (paper: 1.0; plain sum, not normalised)."}
    )
    anchor_targets: str = field(
        default="all-linear",
        metadata={
            "help": "Anchored matrices: 'all-linear' (every linear weight), a regex searched in parameter names "
            "(e.g. 'q_proj|v_proj'), or (Python API) a list of names."
        },
    )
    anchor_include_embeddings: bool = field(
        default=True, metadata={"help": "Also anchor the input embeddings and lm_head (paper: yes)."}
    )
    anchor_rank_rule: str | None = field(
        default=None,
        metadata={
            "help": "Per-matrix rank rule instead of anchor_rank: 'energy:F' (smallest k holding fraction F of "
            "||W_0||_F^2; energy:1 = full rank, energy:0 = nothing) or 'fisher:F' (fraction F of the Fisher-projected "
            "gradient energy; needs F_ood G, see docs/anchoring.md). F in [0, 1]."
        },
    )
    anchor_map: str | None = field(
        default=None,
        metadata={
            "help": "Per-matrix overrides: a YAML / JSON mapping (or a path to one) of name regex -> rank (int, 0 = "
            "not anchored, or a rule) or {rank: .., lambda: ..} (lambda absolute). The first matching entry wins."
        },
    )
    anchor_layers: str | None = field(
        default=None,
        metadata={
            "help": "Anchor only these layers: decoder layer ranges ('0-1,3'; embeddings and lm_head left out) or a "
            "regex searched in parameter names. Composes with anchor_targets."
        },
    )
    anchor_memory: int | None = field(
        default=None,
        metadata={
            "help": "Byte budget of the stored anchor: ranks chosen per matrix to maximise the protected spectral "
            "energy (or Fisher energy with a fisher rule), never over budget. Replaces anchor_rank."
        },
    )
    anchor_lambda_rest: float = field(
        default=0.0,
        metadata={"help": "L2 weight on the rest of W - W_0 (outside the protected part); > 0 stores W_0."},
    )
    anchor_kind: str = field(
        default="block",
        metadata={
            "help": "'block': ||U_k^T dW V_k||^2 (paper). 'subspace': ||U_k^T dW||^2 + ||dW V_k||^2 - "
            "||U_k^T dW V_k||^2 (bounds the rotation of the top-k subspaces; same memory).",
            "choices": ["block", "subspace"],
        },
    )

    def validate_anchor_options(self) -> None:
        """One-line ValueErrors for every anchor option, before any model is loaded."""
        check_anchor_numbers(self)
        from anchorft.rpsft.anchor_plan import validate_options  # lazy: loads torch

        validate_options(self)
        if not (isinstance(self.anchor_targets, (str, list, tuple)) and len(self.anchor_targets) > 0):
            raise ValueError(f"anchor_targets must be a non-empty string or list, got {self.anchor_targets!r}")

    def build_anchor(self, model, *, full_rank: bool = False, **kwargs):
        """The `SubspaceAnchor` of these options on `model`'s current weights (W_0), lambda as its base lambda.
        `full_rank` (a method with the table's `full_rank`, l2): every matrix at full rank, rules and budget off.
        `kwargs` go to `SubspaceAnchor.from_model` (svd, dtype, generator, progress, fisher)."""
        from anchorft.rpsft.anchor import SubspaceAnchor  # lazy: loads torch
        from anchorft.rpsft.anchor_plan import build_kwargs  # lazy: loads torch

        return SubspaceAnchor.from_model(model, **build_kwargs(self, self.anchor_lambda, full_rank), **kwargs)


def check_anchor_numbers(options) -> None:
    """anchor_rank an integer >= 1 and anchor_lambda a number >= 0 (any object with the two attributes): the checks
    that need no torch, made before it loads (`anchorft.rpsft.prechecks.check_values`) and when options are built."""
    rank, lam = options.anchor_rank, options.anchor_lambda
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"anchor_rank must be an integer >= 1, got {rank!r}")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
        raise ValueError(f"anchor_lambda must be >= 0, got {lam!r}")


def anchor_option_names() -> tuple[str, ...]:
    """The fields of `AnchorOptions`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(AnchorOptions))
