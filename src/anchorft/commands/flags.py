"""The flags several commands share, over `anchorft.dataclass_flags` (a dataclass's fields as flags).

`anchorft train` and `anchorft rl`: TrlParser (HfArgumentParser) already accepts every field as `--snake_case`
and `--kebab-case`; here `--out` is the project's name for TRL's `--output_dir`, `--dataset_name` (TRL's own
script flag) is `--dataset` (`normalize_train_argv`), `--help` lists the project's flags first and `--help-all`
prints TRL's full help (`short_or_all_help`, `short_help`, `trl_sections`); the TRL fields outside a run's hash
(`NOT_HASHED`). The studies' executor (`add_executor_flags`, `cluster_from`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable

from anchorft.dataclass_flags import add_field_flags, field_help, field_values, pop_flag
from anchorft.studies.grid import ExecutorArguments, RayCluster
from anchorft.studies.ray_probe import probe

__all__ = ["normalize_train_argv", "short_or_all_help", "short_help", "trl_sections", "COMMON_TRL"]
__all__ += ["add_executor_flags", "cluster_from"]


ALIASES = {
    "--out": "--output_dir",
    "--dataset_name": "--dataset",
    "--dataset-name": "--dataset",
    "--eval_dataset_name": "--eval_dataset",
    "--eval-dataset-name": "--eval_dataset",
}
# TRL / transformers fields a fine-tune usually sets, shown in the short help after the project's own
COMMON_TRL = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "lr_scheduler_type",
    "warmup_steps",
    "save_steps",
    "save_total_limit",
    "resume_from_checkpoint",
    "seed",
    "bf16",
)


def normalize_train_argv(argv: list[str], aliases: dict[str, str] = ALIASES) -> list[str]:
    """Rewrite `aliases` (`anchorft train`'s: ALIASES), also in `--flag=value` form, to the names TrlParser knows."""
    out = []
    for a in argv:
        name, eq, value = a.partition("=")
        if name in aliases:
            a = aliases[name] + eq + value
        out.append(a)
    return out


def short_or_all_help(argv: list[str], short: Callable[[], str]) -> list[str] | None:
    """-h / --help: print `short()` and return None (the command exits 0); otherwise argv, with --help-all
    (--help_all) turned into --help for the full argument parser."""
    if "-h" in argv or "--help" in argv:
        print(short())
        return None
    argv, help_all = pop_flag(argv, "--help-all", "--help_all")
    return [*argv, "--help"] if help_all else argv


def trl_sections(title: str, config: type, trl_config: type, order: Callable, common: tuple[str, ...]) -> list[str]:
    """The last sections of a short help: the fields `config` adds to its TRL base `trl_config` (sorted by
    `order`) under `title`, then the `common` TRL / transformers ones with their defaults, then `--help-all`."""
    inherited = {f.name for f in dataclasses.fields(trl_config)}
    all_fields = {f.name: f for f in dataclasses.fields(config)}
    own = sorted((f for f in all_fields.values() if f.name not in inherited), key=order)
    lines = ["", title, *(field_help(f) for f in own), "", "common TRL / transformers fields:"]
    lines += [f"  --{n} (default {all_fields[n].default!r})" for n in common if n in all_fields]
    return [*lines, "", "--help-all lists every TRL / transformers field."]


def short_help() -> str:
    """The project's flags, then the TRL fields a fine-tune usually sets; `--help-all` for the rest."""
    from trl import SFTConfig  # lazy: loads TRL

    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch

    lines = [
        "usage: anchorft train --config RECIPE.yaml [--field value ...]",
        "       anchorft train --model_name_or_path PATH --dataset DATA --out DIR [--method rpsft ...]",
        "       anchorft train --config RECIPE.yaml --dry-run     (two steps on a tiny stand-in model)",
        "       anchorft train --estimate --model_config CONFIG.json [--anchor_rank 768]",
        "",
        "Fields are accepted as --snake_case or --kebab-case; a YAML --config sets the same fields.",
        "",
        "run:",
        "  --config FILE           YAML recipe (configs/rpsft/...; `preset:` parents are merged)",
        "  --out, --output_dir DIR output folder (checked first; a run marker records the config)",
        "  --overwrite             replace an output folder that holds another run",
        "  --dry-run               two steps on a tiny model built from the recipe's config.json",
        "  --estimate              anchor memory and FLOPs from a config.json, no weights",
        "  --debug                 show the traceback of an error",
        "",
        "data and model:",
    ]
    for f in dataclasses.fields(ScriptArguments):
        lines.append(field_help(f, default=False, alias=", --dataset_name" if f.name == "dataset" else ""))
    method_first = lambda f: f.name != "method"  # noqa: E731
    lines += trl_sections("method and anchor (RPSFTConfig):", RPSFTConfig, SFTConfig, method_first, COMMON_TRL)
    return "\n".join(lines)


def add_executor_flags(p: argparse.ArgumentParser) -> None:
    """--executor, --address and --retries of a study command (`anchorft.studies.grid.ExecutorArguments`)."""
    add_field_flags(p, ExecutorArguments)


def cluster_from(
    args: argparse.Namespace, gpus: float = 0.0, local_only: dict | None = None, **ray_only
) -> RayCluster | None:
    """The `RayCluster` of the parsed executor flags (`ExecutorArguments.cluster`), or None for local. A cluster is
    probed first (`anchorft.studies.ray_probe.probe`: bounded, before the run's folder is claimed; a UsageError in
    one line when it cannot be reached), and the line naming it printed on stderr."""
    cluster = ExecutorArguments(**field_values(args, ExecutorArguments)).cluster(gpus, local_only, **ray_only)
    if cluster is None:
        return None
    info = probe(cluster.address)
    print(info.describe(), file=sys.stderr, flush=True)
    return dataclasses.replace(cluster, local=info.local)
