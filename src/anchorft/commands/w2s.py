"""`anchorft w2s`: the weak-to-strong simulator (run, sweep, theory, replicate). See docs/w2s.md."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.dataclass_flags import FlagParser, both_spellings, subcommand
from anchorft.dataclass_yaml import resolve_presets
from anchorft.errors import UsageError
from anchorft.resources import configs_dir
from anchorft.runs import check_output_dir, existing_files
from anchorft.studies.w2s.arguments import ReplicateArguments, RunArguments, SweepArguments, TheoryArguments
from anchorft.studies.w2s.replicate import CLAIMS, claim_overrides, parse_seed_block, replicate, report_lines
from anchorft.w2s.config import W2SConfig, load_config  # no torch: a config is checked before torch loads
from anchorft.w2s.names import TRANSFORM_NAMES, activation_terms


def _threads(n: int) -> None:
    import torch  # lazy: loads torch

    if n > 0:
        torch.set_num_threads(n)


def _early(args: argparse.Namespace) -> None:
    """What a w2s command can check before torch loads (seconds): the preset found and read (`load_config`'s
    reading, with its did-you-mean), the output folder, --workers."""
    if getattr(args, "preset", None) is not None:
        resolve_presets({"preset": args.preset}, configs_dir("w2s"), "w2s config")
    if getattr(args, "out", None) is not None:
        check_output_dir(args.out)
    if getattr(args, "workers", 1) < 1:
        raise ValueError(f"--workers: must be >= 1, got {args.workers}")


def _run(args: argparse.Namespace) -> int:
    flags = {"n_seeds": args.n_seeds, "steps": args.steps, "device": args.device}
    overrides = [*args.overrides, *(f"{k}={v}" for k, v in flags.items() if v is not None)]
    config = load_config(args.preset, overrides)  # a user error here and below: one line, by anchorft.cli
    from anchorft.studies.w2s.experiments import experiment_into, summary_lines  # lazy: torch
    from anchorft.w2s.dynamics import NumericalFailure  # lazy: loads torch

    _threads(args.threads)
    header = " ".join(["anchorft w2s run", "--preset", args.preset, "--out", args.out, *overrides])
    header += " --ode" if args.ode else ""
    try:
        metrics = experiment_into(config, args.out, args.ode, header, not args.quiet, args.overwrite)
    except NumericalFailure as e:  # not the user's input (exit 2): the simulator's numbers left the model
        print(f"anchorft w2s run: {e}", file=sys.stderr)
        return 1
    if metrics is None:
        return 0
    print("\n".join(summary_lines(metrics, config.modes)))
    print(f"wrote {existing_files(args.out, 'config.yaml', 'metrics.json', 'alignment.png')}")
    if metrics["diverged"] is not None:
        dv = metrics["diverged"]
        print(
            f"anchorft w2s run: non-finite loss or weights in mode {dv['mode']} at step {dv['step']}; "
            "stopped, metrics logged so far were kept",
            file=sys.stderr,
        )
        return 1
    return 0


def _theory(args: argparse.Namespace) -> int:
    keys = ("link", "transform", "clip", "d", "s")
    given = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.preset is not None:
        extra = [f"{k}={v}" for k, v in given.items()]
        load_config(args.preset, [*args.overrides, *extra])  # a bad value: one line, before torch loads
    elif args.overrides:
        raise ValueError("key=value overrides need --preset")
    else:
        config = dataclasses.replace(W2SConfig(), **given)
        activation_terms(config.link)  # an unknown link or transform: one line, before torch loads
        if config.transform not in TRANSFORM_NAMES:
            raise ValueError(f"--transform: unknown {config.transform!r}; choose from {list(TRANSFORM_NAMES)}")
    from anchorft.w2s.theory import preset_theory_report, theory_report, theory_text  # lazy: loads torch

    if args.preset is not None:
        result = preset_theory_report(args.preset, [*args.overrides, *extra], n_seeds=args.n_seeds)
    else:
        result = theory_report(*(getattr(config, k) for k in keys))
    print(json.dumps(result, indent=1) if args.json else theory_text(result))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    cluster = cluster_from(args, local_only={"--workers": args.workers if args.workers != 1 else None})
    from anchorft.studies.w2s.sweeps import sweep_into, sweep_summary  # lazy: torch

    _threads(args.threads)
    result = sweep_into(args.kind, args.out, args.quick, args.overrides, args.spec, args.workers, cluster,
                        args.overwrite, progress=not args.quiet)  # fmt: skip
    if result is not None:
        print(sweep_summary(result, args.out, args.kind))
    return 0


def _replicate(args: argparse.Namespace) -> int:
    if args.claim not in CLAIMS:
        raise UsageError(f"replicate: unknown claim {args.claim!r}; choose from {list(CLAIMS)}")
    seeds = parse_seed_block(args.seeds)
    extra = [f"device={args.device}"] if args.device is not None else []
    claim = CLAIMS[args.claim]
    load_config(claim.preset, claim_overrides(claim, seeds, extra))  # a bad value: one line, before torch loads
    _threads(args.threads)
    result = replicate(args.claim, seeds, args.out, extra, progress=not args.quiet)
    print(json.dumps(result, indent=1) if args.json else "\n".join(report_lines(result)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft w2s", description="weak-to-strong simulator (docs/w2s.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    subcommand(sub, "run", RunArguments).set_defaults(func=_run)
    add_executor_flags(sweep := subcommand(sub, "sweep", SweepArguments))
    sweep.set_defaults(func=_sweep)
    subcommand(sub, "theory", TheoryArguments).set_defaults(func=_theory)
    subcommand(sub, "replicate", ReplicateArguments).set_defaults(func=_replicate)
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if (
        args.cmd != "replicate" and getattr(args, "seeds", None) is not None
    ):  # the count's old spelling; --seeds is a list of seeds elsewhere
        n = args.seeds[0] if len(args.seeds) == 1 else "N"
        raise UsageError(
            f"--seeds: in anchorft the seeds are a list (`toy compare --seeds 0 1 2`); the number of seeds here is "
            f"--n-seeds (--n-seeds {n}; the seeds are seed, seed+1, ...)"
        )
    _early(args)
    return int(args.func(args))
