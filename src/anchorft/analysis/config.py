"""`AnalysisConfig`: the options of `anchorft analyze` (`run_analysis`), one field each.

Free of torch, so that the command builds its flags from these fields (help, default, choices) and `--help`
does not load torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AnalysisConfig", "AnalyzeArguments"]


@dataclass
class AnalysisConfig:
    base: str
    tuned: dict[str, str]
    out: str
    rank: int | None = field(default=None, metadata={"help": "top-k rank (None: a quarter of the smallest min(m, n))"})
    prompts: list[str] = field(default_factory=list, metadata={"help": "evaluation sets for drift (JSONL)"})
    fisher_data: str | None = field(default=None, metadata={"help": "in-domain data for Fisher overlap (JSONL)"})
    fisher_ood_data: str | None = field(
        default=None,
        metadata={"help": "out-of-domain data: also the share of F_ood G (the paper's quantity; needs fisher_data)"},
    )
    fisher_ranks: list[int] | None = field(default=None, metadata={"help": "ranks for Fisher (None: k/4, k/2, k)"})
    fisher_samples: int = field(default=32, metadata={"help": "per-example gradients (batch size 1) for the Fisher"})
    fisher_random: int = field(default=2, metadata={"help": "random orthonormal blocks per matrix"})
    drift_prompts: int = field(default=64, metadata={"help": "prompts per evaluation set (its first ones)"})
    batch_size: int = field(default=16, metadata={"help": "prompts per forward pass (drift)"})
    max_length: int = field(default=256, metadata={"help": "tokens per prompt"})
    svd: str = field(default="exact", metadata={"help": "SVD of each matrix", "choices": ("exact", "randomized")})
    svd_dtype: str = field(default="float64", metadata={"help": "SVD dtype", "choices": ("float32", "float64")})
    exclude: str | None = field(
        default=None, metadata={"help": 'skip matrices whose names match this regex (e.g. "embed_tokens|lm_head")'}
    )
    seed: int = field(
        default=0, metadata={"help": "seed of the randomized SVD sketches and the Fisher's random blocks"}
    )
    compare: str | None = field(
        default=None, metadata={"help": "a comparison folder: its results.json (rank plot), its models/ by default"}
    )
    streaming: bool = field(
        default=True,
        metadata={"help": "read one matrix at a time from safetensors (False: whole models; same numbers)"},
    )
    device: str = field(default="cpu", metadata={"help": "device for SVDs, forward and backward passes (e.g. cuda)"})
    plots: bool = field(default=True, metadata={"help": "write the PNGs"})


@dataclass(kw_only=True)
class AnalyzeArguments:
    """The flags of `anchorft analyze` beside `AnalysisConfig`'s: the models, the output folder, the prompt sets
    and how the command runs."""

    base: str | None = field(
        default=None,
        metadata={"help": "base (pretrained) checkpoint: a directory (config.json + safetensors) or a hub id"},
    )
    tuned: list[str] = field(
        default_factory=list, metadata={"help": "a fine-tuned checkpoint", "metavar": "NAME=DIR", "repeat": True}
    )
    out: str = field(metadata={"help": "output directory (analysis.json, config.json, PNGs)"})
    prompts: list[str] = field(
        default_factory=list, metadata={"help": "evaluation set for drift", "metavar": "FILE.jsonl", "repeat": True}
    )
    testbed: bool = field(
        default=False,
        metadata={
            "help": "add the testbed's per-skill ID/OOD eval sets for drift (and its ID train items as Fisher data)"
        },
    )
    threads: int | None = field(
        default=None, metadata={"help": "torch CPU threads (1 is much faster on a shared, busy machine)"}
    )
    in_memory: bool = field(default=False, metadata={"help": "load whole models instead of streaming (same numbers)"})
    no_plots: bool = field(default=False, metadata={"help": "no PNGs"})
    overwrite: bool = field(default=False, metadata={"help": "replace an output folder that holds another run"})
