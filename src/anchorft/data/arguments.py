"""The data commands' arguments (`anchorft data openr1-math | dapo-math | benchmarks`): one dataclass per
subcommand, its fields the flags (`anchorft.dataclass_flags.subcommand`), its docstring the description; the
defaults are the preparing functions' own (`keyword_defaults`), not restated."""

from __future__ import annotations

from dataclasses import dataclass, field

from anchorft.data import dapo, openr1, release
from anchorft.data.benchmarks import OPTIONAL, RELEASE_COMMIT, RELEASE_REPO
from anchorft.dataclass_flags import OVERWRITE, keyword_defaults, meta

__all__ = ["OpenR1Arguments", "DapoArguments", "BenchmarksArguments"]

OD = keyword_defaults(openr1.prepare_openr1_math)  # the release sampler's split and format are the same
DD = keyword_defaults(dapo.prepare_dapo_math)


LIMIT = meta("read only the first N source rows")


@dataclass(kw_only=True)
class OpenR1Arguments:
    __doc__ = (
        f"--sampler release (default): every row of {release.RELEASE_HUB_NAME} (or --source in its schema), converted "
        f"as the paper's release converts it. --sampler verified: a seeded subset of --size rows of {openr1.HUB_NAME} "
        "whose trace's last \\boxed{} verifies (math-verify) against `answer`. Both write DIR/train.jsonl, "
        "config.json, metrics.json, lengths.png."
    )

    out: str = field(**meta("output folder"))
    sampler: str = field(default="release", **meta("", choices=("release", "verified")))
    source: str | None = field(
        default=None,
        **meta(
            f"hub dataset name or local .jsonl/.parquet/folder (default: {release.RELEASE_HUB_NAME} for the release "
            f"sampler, {openr1.HUB_NAME} for the verified one)"
        ),
    )
    subset: str = field(default=OD["subset"], **meta("hub config name"))
    split: str = field(default=OD["split"], **meta(""))
    size: int = field(default=OD["size"], **meta("verified sampler: examples to keep (paper: about 4k)"))
    seed: int = field(default=OD["seed"], **meta("verified sampler: order in which rows are visited"))
    limit: int | None = field(default=None, **LIMIT)
    fmt: str = field(default=OD["fmt"], **meta("", flag="--format", choices=openr1.FORMATS))
    no_progress: bool = field(default=False, **meta(""))
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class DapoArguments:
    """Write DIR/train.jsonl (the paper's benchmark format: prompt messages, reward_model.ground_truth),
    config.json, metrics.json; duplicated problems are dropped and counted."""

    out: str = field(**meta("output folder"))
    source: str = field(default=DD["source"], **meta("hub dataset name or local .jsonl/.parquet/folder"))
    split: str = field(default=DD["split"], **meta(""))
    limit: int | None = field(default=None, **LIMIT)
    prompt_style: str = field(
        default=DD["prompt_style"],
        **meta(
            "boxed: the boxed system prompt + the bare problem; original: the row's messages",
            choices=("boxed", "original"),
        ),
    )
    dedupe: bool = field(default=DD["dedupe"], **meta("keep duplicated problems", flag="--keep-duplicates"))
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class BenchmarksArguments:
    __doc__ = (
        f"Fetch evaluation/data/ of github.com/{RELEASE_REPO} at commit {RELEASE_COMMIT[:12]} (or copy it from "
        "--from), checking every file's SHA-256 against the pinned one; a mismatch is refused. GPQA only with "
        "--include gpqa (its authors ask that its items not be redistributed in plain text)."
    )

    out: str | None = field(
        default=None, **meta("output folder (default: $ANCHORFT_BENCHMARKS, else the user's data folder)")
    )
    source: str | None = field(
        default=None,
        **meta("copy a folder on disk (evaluation/data/ or a clone)", flag="--from", metavar="DIR"),
    )
    include: list[str] = field(default_factory=list, **meta("optional sets, by name", choices=sorted(OPTIONAL)))
    overwrite: bool = field(default=False, **meta("replace files whose SHA-256 differs"))
