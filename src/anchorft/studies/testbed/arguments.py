"""The testbed commands' arguments (`anchorft toy pretrain | compare | report | interpolate | bench | verdict | pack |
unpack`):
one dataclass per subcommand, its fields the flags (`anchorft.dataclass_flags.subcommand`), its docstring the
description. Light on purpose: the parser is built, and a mistake reported, before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from anchorft.dataclass_flags import OVERWRITE, meta

__all__ = ["PretrainArguments", "CompareArguments", "ReportArguments", "InterpolateArguments", "BenchArguments"]
__all__ += ["VerdictArguments", "RLArguments", "PackArguments", "UnpackArguments"]


@dataclass(kw_only=True)
class PretrainArguments:
    """Pretrain the tiny model (cached by config hash) and copy it to --out."""

    out: str = field(**meta("output directory (model, tokenizer, metrics.json)"))
    preset: str = field(default="default", **meta("smoke | default | a YAML file (its pretrain: section)"))
    steps: int | None = field(default=None, **meta("override the number of pretraining steps"))
    seed: int | None = field(default=None, **meta("override the pretraining seed (corpus draws, tokenizer, init)"))
    no_cache: bool = field(default=False, **meta("pretrain again even when cached"))
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class CompareArguments:
    """Fine-tune the base with every method, evaluate, write the report."""

    out: str = field(**meta("output directory"))
    preset: str = field(default="default", **meta("smoke | default | a YAML file"))
    methods: list[str] | None = field(default=None, **meta("methods or run names to keep (default: all)"))
    sweep: list[str] = field(
        default_factory=list,
        **meta(
            "key=v1,v2,... (anchor_rank, anchor_lambda, anchor_targets, learning_rate, anchor_rank_rule, "
            "anchor_layers, anchor_memory, anchor_lambda_rest, anchor_kind); repeatable",
            repeat=True,
        ),
    )
    seeds: list[int] | None = field(default=None, **meta("the fine-tuning seeds (a list)", exclusive="seeds"))
    n_seeds: int | None = field(default=None, **meta("seeds 0 .. N-1", exclusive="seeds"))
    overwrite: bool = field(default=False, **meta("replace an output folder that holds another comparison"))
    workers: int | None = field(
        default=None,
        **meta(
            "fine-tunes run at once, one process each (default: --threads); each runs on the config's `threads` "
            "torch threads (default 1), so the results do not depend on it"
        ),
    )


@dataclass(kw_only=True)
class ReportArguments:
    """One report.md + tradeoff.png from several comparisons of the same base (a run found in several, at
    different seeds, is pooled over its seeds)."""

    sources: list[str] = field(**meta("comparison folders (results.json)", flag="--from"))
    out: str = field(**meta("output folder (report.md, tradeoff.png, results.json)"))
    front: list[str] | None = field(
        default=None,
        **meta("also front.md: every run against the interpolated front of these runs (and the base)", metavar="RUN"),
    )
    pick: list[str] = field(
        default_factory=list,
        **meta(
            "with --front: choose among these runs (an option's knob values) the one furthest above the front on the "
            "validation items, and report it on the held-out ones; repeatable",
            metavar="GROUP=RUN,RUN",
            repeat=True,
        ),
    )
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class InterpolateArguments:
    """WiSE-FT weight interpolation (Wortsman et al. 2022): W0 + alpha (W_ft - W0) from the saved models of a
    finished `toy compare`, every seed, scored on its held-out and validation items (merge with it: toy report
    --from COMPARISON OUT)."""

    compare: str = field(**meta("a finished comparison folder (results.json, models/)"))
    runs: list[str] = field(**meta("its runs to interpolate (e.g. sft l2)"))
    alphas: str = field(default="0.25,0.5,0.75", **meta("alpha grid in (0, 1], comma-separated"))
    out: str = field(**meta("output folder (results.json, report.md, tradeoff.png)"))
    overwrite: bool = field(default=False, **OVERWRITE)
    workers: int | None = field(
        default=None,
        **meta(
            "interpolated models evaluated at once, one process each (default 1); each runs on the comparison's "
            "`threads` torch threads, so the results do not depend on it"
        ),
    )


@dataclass(kw_only=True)
class BenchArguments:
    """Write OUT/SKILL.jsonl: items of the testbed's evaluation split (never trained on) in the paper's benchmark
    format (prompt messages, reward_model.ground_truth), short enough for the testbed model's 128-token context:
    `anchorft eval --bench` runs on the testbed model with them (docs/eval.md)."""

    out: str = field(**meta("output folder (one SKILL.jsonl per skill)"))
    skills: list[str] | None = field(default=None, **meta("math skills (default: all of them)"))
    items: int = field(default=50, **meta("items per skill"))
    seed: int = field(default=0, **meta("which items are drawn"))
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class PackArguments:
    """A study folder's record, small enough to keep in a repository: its grades and small files, without the
    models, one JSON per base folder (`anchorft.studies.testbed.record`); `toy unpack` writes it back, after which
    `toy verdict` and `toy report` read it and a resumed `toy compare` skips what it holds."""

    source: str = field(
        **meta("a study or comparison folder (WiSE-FT, which needs its models, run first)", flag="--from")
    )
    out: str = field(**meta("folder for the records (base-seedB.json per base, study.json)"))
    bases: list[int] | None = field(default=None, **meta("pack only these bases (default: every base folder)"))


@dataclass(kw_only=True)
class UnpackArguments:
    """Write the records of `toy pack` back into a study folder (byte for byte; a file there with other content
    is refused)."""

    source: str = field(**meta("a folder of records written by toy pack", flag="--from"))
    out: str = field(**meta("the study folder to write"))


@dataclass(kw_only=True)
class VerdictArguments:
    """Each run's excess ID gain over the front of others, with paired bootstrap intervals per base and a
    Hartung-Knapp pooled interval over bases; or (--power) a pilot's variance components and the effect each design
    detects."""

    sources: list[str] = field(
        **meta(
            "comparison folders (results.json and runs/*/scored_items.json), or studies over several bases (their "
            "base-seedB folders)",
            flag="--from",
        )
    )
    out: str = field(**meta("output folder (verdict.json and verdict.md, or power.json)"))
    also: list[str] = field(
        default_factory=list,
        **meta(
            "folders inside each comparison whose runs are judged too, e.g. its WiSE-FT interpolation (toy "
            "interpolate --out COMPARISON/wise)",
            flag="--with",
            metavar="SUBDIR",
        ),
    )
    runs: list[str] | None = field(default=None, **meta("the runs judged"))
    pick: list[str] = field(
        default_factory=list,
        **meta(
            "an option judged with its knob picked on each base's validation items (the run of the largest excess "
            "over the front there), scored on the reported items; repeatable",
            metavar="GROUP=RUN,RUN",
            repeat=True,
        ),
    )
    front: list[str] | None = field(default=None, **meta("the runs whose upper hull (with the base) is the front"))
    split: str = field(
        default="reported",
        **meta(
            "the items scored: the reported ones, or the validation ones (for picking knobs before looking)",
            choices=("reported", "val"),
        ),
    )
    boot: int = field(default=2000, **meta("bootstrap replicates per base"))
    seed: int = field(default=0, **meta("the bootstrap's random seed"))
    level: float = field(default=0.95, **meta("interval level"))
    method: str = field(
        default="hull-bc",
        **meta(
            "hull-bc: the front's concave upper hull, bias-corrected bootstrap intervals, knobs picked again in every "
            "replicate; first: the first verdict's (Pareto points joined by segments, percentile intervals, one pick)",
            choices=("hull-bc", "first"),
        ),
    )
    confirm: str | None = field(
        default=None, **meta("the confirmatory row (a judged run or --pick group), judged alone", metavar="ROW")
    )
    sesoi: float | None = field(
        default=None, **meta("the smallest effect of interest, in points, for the confirmatory row", metavar="POINTS")
    )
    power: str | None = field(
        default=None, **meta("the power calculation of a pilot instead", metavar="RUN=REFERENCE")
    )
    bases: list[int] = field(default_factory=lambda: [4, 6, 8], **meta("--power: numbers of bases to size"))
    seeds: list[int] = field(default_factory=lambda: [3, 5], **meta("--power: fine-tuning seeds per base"))
    items: int | None = field(default=None, **meta("--power: ID items per model (default: the pilot's)"))
    overwrite: bool = field(default=False, **OVERWRITE)

    def __post_init__(self) -> None:
        if self.boot < 2:
            raise ValueError(f"--boot: need >= 2 replicates, got {self.boot}")
        if not 0 < self.level < 1:
            raise ValueError(f"--level: must be in (0, 1), got {self.level}")
        if self.power is None and not ((self.runs or self.pick) and self.front):
            raise ValueError("--runs (or --pick) and --front are needed (or --power RUN=REFERENCE)")
        if self.items is not None and self.items < 1 or min(self.bases) < 2 or min(self.seeds) < 1:
            raise ValueError("--items must be >= 1, --bases >= 2 and --seeds >= 1")
        if self.power is not None and "=" not in self.power:
            raise ValueError(f"--power: expected RUN=REFERENCE, got {self.power!r}")
        if self.sesoi is not None and not self.sesoi > 0:
            raise ValueError(f"--sesoi: must be > 0 points, got {self.sesoi}")


@dataclass(kw_only=True)
class RLArguments:
    """DAPO from the fine-tuned models of `anchorft toy compare`, evaluated before and after RL (the settings:
    `rl_stage.RLStageSettings`' fields)."""

    compare: str = field(**meta("the comparison's output directory (results.json, models/)"))
    out: str | None = field(default=None, **meta("output directory (default: COMPARE/rl)"))
    methods: list[str] | None = field(
        default=None,
        **meta("run names, RUN-seedS for fine-tuning seed S of RUN (default: sft and the paper-rank rpsft runs)"),
    )
    threads: int | None = field(default=None, **meta("torch CPU threads (default: as `anchorft toy --threads`)"))
    overwrite: bool = field(default=False, **OVERWRITE)
