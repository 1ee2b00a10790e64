"""Flag spellings of the commands (`--snake_case` and `--kebab-case` both), `anchorft train`'s aliases and short help.

TrlParser (HfArgumentParser) already accepts every field as `--snake_case` and `--kebab-case`. Here:
`--out` is the project's name for TRL's `--output_dir`, `--dataset_name` (TRL's own script flag) is
`--dataset`, and `--help` lists the project's flags first; `--help-all` prints TRL's full help. Also the flags
several commands share: a dataclass's fields as flags (`add_field_flags`), a function's keyword defaults
(`keyword_defaults`), NAME=DIR pairs (`parse_named`:
`analyze --tuned`, `eval suite --models`) and the generation and grading flags of `eval` and `eval suite`
(`add_sampling_flags`, `pass_k`); the studies' executor (`add_executor_flags`, `cluster_from`); the TRL fields outside
a run's hash (`NOT_HASHED`).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable

from anchorft.errors import did_you_mean

__all__ = [
    "add_field_flags",
    "add_sampling_flags",
    "add_timeout_flag",
    "both_spellings",
    "field_values",
    "keyword_defaults",
    "normalize_train_argv",
    "parse_named",
    "pass_k",
    "pop_flag",
    "short_or_all_help",
]
__all__ += ["short_help", "field_help", "trl_sections", "FlagParser", "add_executor_flags", "cluster_from"]


class FlagParser(argparse.ArgumentParser):
    """The commands' parser: no prefix matching (a misspelt flag is an error, never another flag) and a
    did-you-mean on an unknown flag; subcommand parsers are FlagParsers too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message = prefix + did_you_mean(self, message[len(prefix) :].split())
        super().error(message)


ALIASES = {
    "--out": "--output_dir",
    "--dataset_name": "--dataset",
    "--dataset-name": "--dataset",
    "--eval_dataset_name": "--eval_dataset",
    "--eval-dataset-name": "--eval_dataset",
}
# one output flag everywhere: --out, and TRL's --output_dir (either spelling) for the same option
OUTPUT_SPELLINGS = {"--out": ("--output_dir", "--output-dir"), "--output_dir": ("--out",)}
# TRL / transformers fields that name where output goes or how it is shown, not what is computed: left out of the
# hash of a run's marker (`anchorft rl`; `anchorft train` also leaves out resume_from_checkpoint)
NOT_HASHED = (
    "output_dir",
    "logging_dir",
    "run_name",
    "disable_tqdm",
    "report_to",
    "dataloader_num_workers",
    "hub_token",
)
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


def parse_named(specs: list[str], flag: str) -> dict[str, str]:
    """NAME=DIR pairs of a repeatable flag (`--tuned`, `--models`) in order; a malformed or repeated name is a
    ValueError naming the flag."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{flag} must be NAME=DIR, got {spec!r}")
        if name in out:
            raise ValueError(f"{flag}: the name {name!r} is given twice")
        out[name] = path
    return out


def pop_flag(argv: list[str], *names: str) -> tuple[list[str], bool]:
    """Remove the boolean flag `names` (any spelling given) from argv; whether it was there."""
    kept = [a for a in argv if a not in names]
    return kept, len(kept) != len(argv)


def short_or_all_help(argv: list[str], short: Callable[[], str]) -> list[str] | None:
    """-h / --help: print `short()` and return None (the command exits 0); otherwise argv, with --help-all
    (--help_all) turned into --help for the full argument parser."""
    if "-h" in argv or "--help" in argv:
        print(short())
        return None
    argv, help_all = pop_flag(argv, "--help-all", "--help_all")
    return [*argv, "--help"] if help_all else argv


def field_help(f: dataclasses.Field, default: bool = True, alias: str = "") -> str:
    """One field of a short help: `--name` (its alias, its default) and its help's first sentence, cut at a word
    (" ..." marks a cut; `--help-all` prints it whole), wrapped to 112 columns."""
    import re
    import textwrap

    value = f" (default {f.default!r})" if default else ""
    text = " ".join(f.metadata.get("help", "").split())
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)[0]  # a sentence ends before a capital, not at "e.g. x"
    first = textwrap.shorten(first, width=220, placeholder=" ...")
    body = textwrap.fill(first, width=112, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return f"  --{f.name}{alias}{value}\n{body}"


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
    from trl import SFTConfig

    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments

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


def both_spellings(parser) -> None:
    """Let every `--snake_case` option of `parser` (and of its subcommands) also be given as `--kebab-case`,
    and the reverse, and `--out` as `--output_dir` / `--output-dir` (and the reverse): one flag style across
    commands, whichever a user types."""
    for action in list(parser._actions):
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                both_spellings(sub)
            continue
        for opt in list(action.option_strings):
            if not opt.startswith("--") or len(opt) < 4:
                continue
            body = opt[2:]
            others = ["--" + body.replace("_", "-"), "--" + body.replace("-", "_"), *OUTPUT_SPELLINGS.get(opt, ())]
            for other in others:
                if other != opt and other not in parser._option_string_actions:
                    action.option_strings.append(other)
                    parser._option_string_actions[other] = action


def add_field_flags(
    p: argparse.ArgumentParser,
    cls: type,
    names: tuple[str, ...] | None = None,
    *,
    aliases: dict[str, tuple[str, ...]] | None = None,
    defaults: dict | None = None,
) -> None:
    """One `--name` flag per field of the dataclass `cls` (`names`: only these) with the field's type, default
    (`defaults` may replace it, e.g. with None for "the recipe's"), choices and help; no default is restated. A bool
    is `--name` (default False) or `--no_name` (default True); a tuple or list field takes several values;
    `aliases`: more spellings of a field's flag. `both_spellings` adds the --kebab-case ones."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names or tuple(fields):
        f, typ = fields[name], hints[name]
        if typing.get_origin(typ) in (typing.Union, types.UnionType):  # X | None
            typ = next(a for a in typing.get_args(typ) if a is not type(None))
        default = (defaults or {}).get(name, f.default)
        kw: dict = {"dest": name, "help": f"{f.metadata.get('help', '')} (default {default!r})"}
        flags = [f"--{name}", *(aliases or {}).get(name, ())]
        if typ is bool:
            flags[0] = f"--no_{name}" if default else flags[0]
            kw.update(action="store_false" if default else "store_true")
            kw["help"] = ("turns off: " if default else "") + kw["help"]
        elif typing.get_origin(typ) in (tuple, list):
            kw.update(type=typing.get_args(typ)[0], nargs="+", default=default)
        else:
            kw.update(type=typ, default=default, choices=f.metadata.get("choices"))
        p.add_argument(*flags, **kw)


def field_values(args: argparse.Namespace, cls: type, **override) -> dict:
    """The parsed flags named as fields of the dataclass `cls` (`add_field_flags`' or a command's own), `override`
    on top: the keyword arguments of `cls`."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)} | override


def keyword_defaults(fn: Callable) -> dict:
    """{parameter: default} of the parameters of `fn` that have one: a command's flags take a library function's
    defaults from here instead of restating them."""
    params = inspect.signature(fn).parameters.items()
    return {k: p.default for k, p in params if p.default is not inspect.Parameter.empty}


def add_sampling_flags(
    p: argparse.ArgumentParser,
    *,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int,
) -> None:
    """The generation and grading flags of `anchorft eval` and `anchorft eval suite` (defaults given by each):
    samples, k, sampling, token limit, seed, item limit, backend, batch size, bad lines, math-verify timeout."""
    p.add_argument("--n", type=int, default=n, help="samples per item (default %(default)s)")
    p.add_argument("--k", type=int, default=None, help="k of Avg@k / Pass@k (<= n; default: n)")
    p.add_argument("--temperature", type=float, default=temperature, help="sampling temperature (default %(default)s)")
    p.add_argument("--top_p", type=float, default=top_p, help="nucleus sampling (default %(default)s)")
    p.add_argument("--max_new_tokens", type=int, default=max_new_tokens, help="per response (default %(default)s)")
    p.add_argument("--seed", type=int, default=seed, help="sampling seed (default %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="first N items of each file (lm-eval: per task)")
    p.add_argument("--backend", choices=["auto", "hf", "vllm"], default="auto", help="auto: vLLM if installed + GPU")
    p.add_argument("--batch_size", type=int, default=batch_size, help="rows per batch (default %(default)s)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines instead of failing")
    add_timeout_flag(p)


def add_timeout_flag(p: argparse.ArgumentParser) -> None:
    """--timeout: math-verify's time per check, MathChecker's default."""
    from anchorft.eval.answers import MathChecker

    default = keyword_defaults(MathChecker)["timeout_s"]
    p.add_argument("--timeout", type=float, default=default, help="math-verify timeout per check, seconds")


def pass_k(args: argparse.Namespace) -> int:
    """k of Avg@k / Pass@k: --k, or --n when not given."""
    return args.n if args.k is None else args.k


def add_executor_flags(p: argparse.ArgumentParser) -> None:
    """--executor, --address and --retries of a study command (`anchorft.studies.grid`)."""
    p.add_argument(
        "--executor", choices=("local", "ray"), default="local",
        help="where the cells run: local (this machine's processes) or ray (each cell a Ray task on a cluster; "
        "pip install 'anchorft[ray]'); the record, and so resuming, is the same for both",
    )  # fmt: skip
    p.add_argument(
        "--address", default=None,
        help="with --executor ray: the cluster's head (HOST:PORT), auto (the cluster this machine joined), or none "
        "given: a Ray instance started on this machine for the study",
    )  # fmt: skip
    p.add_argument(
        "--retries", type=int, default=None,
        help="with --executor ray: times a cell lost with its worker or node runs again (default 3)",
    )  # fmt: skip


def cluster_from(args: argparse.Namespace, gpus: float = 0.0, **ray_only):
    """The `RayCluster` of --executor ray, each cell holding `gpus` GPUs (None for local); ValueError for
    --address, --retries or a flag of `ray_only` ({flag: value, None when not given}) without it, a negative
    --retries or `gpus`, or Ray not installed."""
    from anchorft.studies.grid import RayCluster

    if args.executor != "ray":
        flags = {"--address": args.address, "--retries": args.retries, **ray_only}
        given = [f for f, v in flags.items() if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)}: only with --executor ray")
        return None
    if args.retries is not None and args.retries < 0:
        raise ValueError(f"--retries: must be >= 0, got {args.retries}")
    return RayCluster(args.address, 3 if args.retries is None else args.retries, gpus)
