"""The simulator commands' arguments (`anchorft w2s run | sweep | theory | replicate`): one dataclass per
subcommand, its fields the flags (`anchorft.dataclass_flags.subcommand`), its docstring the description. Light on
purpose: the parser is built, and a mistake reported, before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from anchorft.dataclass_flags import OVERWRITE, meta

__all__ = ["RunArguments", "SweepArguments", "TheoryArguments", "ReplicateArguments"]


SEEDS = meta("", hidden=True)  # the count's old spelling; a list of seeds elsewhere: refused with a hint


@dataclass(kw_only=True)
class RunArguments:
    """Run W2S and SFT (and SFT + anchor) from a preset."""

    preset: str = field(default="paper", **meta("name in configs/w2s/ or a YAML path"))
    out: str = field(**meta("output directory"))
    n_seeds: int | None = field(default=None, **meta("number of seeds (batched)"))
    seeds: list[str] | None = field(default=None, **SEEDS)
    steps: int | None = field(default=None, **meta("SGD steps per mode"))
    device: str | None = field(default=None, **meta("cpu or cuda"))
    threads: int = field(default=1, **meta("torch CPU threads (default 1: small matmuls; 0 = torch default)"))
    quiet: bool = field(default=False, **meta("no progress bar"))
    overwrite: bool = field(default=False, **OVERWRITE)
    ode: bool = field(default=False, **meta("also solve the mean-field ODE: dashed on alignment.png, `ode` in "
                                              "metrics.json"))  # fmt: skip
    overrides: list[str] = field(default_factory=list, **meta("config overrides key=value", positional=True))


@dataclass(kw_only=True)
class SweepArguments:
    """Sweeps: s-scaling, d-scaling, d-scaling-w2s, chi, overlap, rpsft, mechanisms."""

    kind: str = field(
        **meta("s-scaling | d-scaling | d-scaling-w2s | chi | overlap | rpsft | ablation | race | weak-quality")
    )
    out: str = field(**meta("output directory"))
    quick: bool = field(default=False, **meta("the sweep file's quick variant (a small grid)"))
    spec: str | None = field(default=None, **meta("a sweep YAML file instead of configs/w2s/sweep-<kind>.yaml"))
    threads: int = field(default=1, **meta("torch CPU threads per point (0 = torch default)"))
    workers: int = field(default=1, **meta("points measured at once, each in its own process"))
    quiet: bool = field(default=False, **meta("no progress bar"))
    overwrite: bool = field(default=False, **OVERWRITE)
    overrides: list[str] = field(
        default_factory=list, **meta("overrides of the sweep's config (every point), key=value", positional=True)
    )


@dataclass(kw_only=True)
class TheoryArguments:
    """Exponents, predicted sample complexities, the labels' Hermite coefficients. W2SConfig's fields (link,
    transform, clip, d, s) are its defaults without --preset; with one, overrides of the preset."""

    preset: str | None = field(default=None, **meta("a preset: its link, T, clip, d, s and its measured labels"))
    n_seeds: int | None = field(default=None, **meta("seeds for the measured coefficients (with --preset)"))
    seeds: list[str] | None = field(default=None, **SEEDS)
    json: bool = field(default=False, **meta("machine output (JSON)"))
    overrides: list[str] = field(default_factory=list, **meta("overrides of the preset, key=value", positional=True))
    link: str | None = field(default=None, **meta("the target task's link, e.g. he4 (default: W2SConfig's)"))
    transform: str | None = field(default=None, **meta("the label transform: zexp or identity (default: "
                                                        "W2SConfig's)"))  # fmt: skip
    clip: float | None = field(default=None, **meta("clip before the transform, <= 0: none (default: W2SConfig's)"))
    d: int | None = field(default=None, **meta("ambient dimension (default: W2SConfig's)"))
    s: int | None = field(default=None, **meta("dimension of each pretrained subspace (default: W2SConfig's)"))


@dataclass(kw_only=True)
class ReplicateArguments:
    """Re-run a documented claim at its documented size on a block of seeds and judge it by the claim's rule
    (docs/w2s.md, "Replication"): paper, paper-sft-turn, gain."""

    claim: str = field(**meta("the claim: paper | paper-sft-turn | gain", positional=True))
    seeds: list[str] = field(**meta("the block of seeds: A-B (inclusive), e.g. 1000-1009"))
    out: str = field(**meta("output directory (run/ and replication.json)"))
    device: str | None = field(default=None, **meta("cpu or cuda"))
    threads: int = field(default=1, **meta("torch CPU threads (default 1; 0 = torch default)"))
    quiet: bool = field(default=False, **meta("no progress bar"))
    json: bool = field(default=False, **meta("print replication.json instead of the lines"))
