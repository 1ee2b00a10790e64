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
from types import SimpleNamespace

from anchorft.dataclass_flags import add_field_flags, field_help, field_values, pop_flag
from anchorft.rpsft.prechecks import MISSING, UNKNOWN, method_rows, source_fields
from anchorft.rpsft.trl_fields import trl_table
from anchorft.studies.grid import ExecutorArguments, RayCluster
from anchorft.studies.ray_probe import probe

__all__ = ["normalize_train_argv", "short_or_all_help", "short_help", "trl_sections", "source_sections", "as_field"]
__all__ += ["COMMON_TRL"]
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


def source_sections(title: str, config: dict, trl_class: str, order: Callable, common: tuple[str, ...]) -> list[str]:
    """`trl_sections` without importing TRL: `config`'s fields read from its source (`prechecks.source_fields`), its
    TRL base `trl_class`'s from the shipped table (`anchorft.rpsft.trl_fields`). None when either is missing (the
    caller then imports the classes)."""
    inherited = trl_table().get(trl_class)
    if not inherited:
        return None
    own = sorted((f for f in config.values() if f.name not in inherited and f.init), key=order)
    lines = ["", title, *(field_help(as_field(f)) for f in own), "", "common TRL / transformers fields:"]
    for n in common:
        f = config.get(n)
        default = f.default if f is not None and f.default not in (MISSING, UNKNOWN) else inherited[n]["default"]
        lines.append(f"  --{n} (default {default!r})")
    return [*lines, "", "--help-all lists every TRL / transformers field."]


def as_field(f) -> SimpleNamespace:
    """A field read from source (`prechecks.SourceField`) as `field_help` reads a dataclass field (`method`'s help,
    built from the methods table in RPSFTConfig, from the table's rows)."""
    text = f.help
    if f.name == "method" and not text:
        rows = ", ".join(f"'{name}' ({what})" for name, _, what in method_rows())
        text = f"Fine-tuning method (anchorft.rpsft.methods): {rows}."
    return SimpleNamespace(name=f.name, default=f.default, metadata={"help": text})


def _source(module: str, *names: str) -> list[dict] | None:
    """The fields of the classes `names` of `module`, read from their source; None unless each is found."""
    read = [source_fields(module, n) for n in names]
    return None if any(r is None for r in read) else read


def short_help() -> str:
    """The project's flags, then the TRL fields a fine-tune usually sets; `--help-all` for the rest. Read from the
    configs' source and the shipped TRL table (a fraction of a second), else from the imported classes."""
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
        "  --estimate              anchor memory and FLOPs from a config.json, no weights (--estimate --help: its",
        "                          flags, e.g. --stage, --gpus, --seq_len, --per_device)",
        "  --debug                 show the traceback of an error",
        "",
        "data and model:",
    ]
    method_first = lambda f: f.name != "method"  # noqa: E731
    title = "method and anchor (RPSFTConfig):"
    read = _source("anchorft.rpsft.config", "ScriptArguments", "RPSFTConfig")
    sections = source_sections(title, read[1], "SFTConfig", method_first, COMMON_TRL) if read else None
    if sections is not None:
        for f in read[0].values():
            alias = ", --dataset_name" if f.name == "dataset" else ""
            lines.append(field_help(as_field(f), default=False, alias=alias))
        return "\n".join([*lines, *sections])
    from trl import SFTConfig  # lazy: loads TRL

    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments  # lazy: loads torch

    for f in dataclasses.fields(ScriptArguments):
        lines.append(field_help(f, default=False, alias=", --dataset_name" if f.name == "dataset" else ""))
    lines += trl_sections(title, RPSFTConfig, SFTConfig, method_first, COMMON_TRL)
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
