"""`anchorft w2s`: the weak-to-strong simulator (run, sweep, theory). See docs/w2s.md."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.dataclass_flags import FlagParser, both_spellings
from anchorft.errors import UsageError
from anchorft.runs import existing_files


def _threads(n: int) -> None:
    import torch

    if n > 0:
        torch.set_num_threads(n)


def _run(args: argparse.Namespace) -> int:
    from anchorft.studies.w2s.experiments import experiment_into, summary_lines  # lazy: torch
    from anchorft.w2s.config import load_config
    from anchorft.w2s.dynamics import NumericalFailure

    flags = {"n_seeds": args.n_seeds, "steps": args.steps, "device": args.device}
    overrides = [*args.overrides, *(f"{k}={v}" for k, v in flags.items() if v is not None)]
    config = load_config(args.preset, overrides)  # a user error here and below: one line, by anchorft.cli
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
    from anchorft.w2s.config import W2SConfig
    from anchorft.w2s.theory import preset_theory_report, theory_report, theory_text

    keys = ("link", "transform", "clip", "d", "s")
    given = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.preset is not None:
        extra = [f"{k}={v}" for k, v in given.items()]
        result = preset_theory_report(args.preset, [*args.overrides, *extra], n_seeds=args.n_seeds)
    else:
        if args.overrides:
            raise ValueError("key=value overrides need --preset")
        config = dataclasses.replace(W2SConfig(), **given)
        result = theory_report(*(getattr(config, k) for k in keys))
    print(json.dumps(result, indent=1) if args.json else theory_text(result))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from anchorft.studies.w2s.sweeps import sweep_into, sweep_summary  # lazy: torch

    _threads(args.threads)
    result = sweep_into(args.kind, args.out, args.quick, args.overrides, args.spec, args.workers, cluster_from(args),
                        args.overwrite, progress=not args.quiet)  # fmt: skip
    if result is not None:
        print(sweep_summary(result, args.out, args.kind))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft w2s", description="weak-to-strong simulator (docs/w2s.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run W2S and SFT (and SFT + anchor) from a preset")
    r.add_argument("--preset", default="paper", help="name in configs/w2s/ or a YAML path (default: paper)")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--n-seeds", dest="n_seeds", type=int, default=None, help="number of seeds (batched)")
    r.add_argument("--seeds", nargs="+", default=None, help=argparse.SUPPRESS)  # a list elsewhere: refused
    r.add_argument("--steps", type=int, default=None, help="SGD steps per mode")
    r.add_argument("--device", default=None, help="cpu or cuda")
    r.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: small matmuls; 0 = torch default)"
    )
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    r.add_argument(
        "--ode",
        action="store_true",
        help="also solve the mean-field ODE: dashed on alignment.png, `ode` in metrics.json",
    )
    r.add_argument("overrides", nargs="*", help="config overrides key=value")
    r.set_defaults(func=_run)
    s = sub.add_parser("sweep", help="sweeps: s-scaling, d-scaling, d-scaling-w2s, chi, overlap, rpsft, mechanisms")
    s.add_argument(
        "--kind",
        required=True,
        help="s-scaling | d-scaling | d-scaling-w2s | chi | overlap | rpsft | ablation | race | weak-quality",
    )
    s.add_argument("--out", required=True)
    s.add_argument("--quick", action="store_true", help="the sweep file's quick variant (a small grid)")
    s.add_argument("--spec", default=None, help="a sweep YAML file instead of configs/w2s/sweep-<kind>.yaml")
    s.add_argument("--threads", type=int, default=1, help="torch CPU threads per point (0 = torch default)")
    s.add_argument(
        "--workers", type=int, default=1, help="points measured at once, each in its own process (default 1)"
    )
    s.add_argument("--quiet", action="store_true")
    s.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    s.add_argument("overrides", nargs="*", help="overrides of the sweep's config (every point), key=value")
    add_executor_flags(s)
    s.set_defaults(func=_sweep)
    t = sub.add_parser("theory", help="exponents, predicted sample complexities, the labels' Hermite coefficients")
    t.add_argument("--preset", default=None, help="a preset: its link, T, clip, d, s and its measured labels")
    t.add_argument("--n-seeds", dest="n_seeds", type=int, default=None,
                   help="seeds for the measured coefficients (with --preset)")  # fmt: skip
    t.add_argument("--seeds", nargs="+", default=None, help=argparse.SUPPRESS)  # a list elsewhere: refused
    t.add_argument("--json", action="store_true", help="machine output (JSON)")
    t.add_argument("overrides", nargs="*", help="overrides of the preset, key=value")
    # W2SConfig's fields (its defaults without --preset; with one, overrides of the preset)
    t.add_argument("--link", help="the target task's link, e.g. he4 (default: W2SConfig's)")
    t.add_argument("--transform", help="the label transform: zexp or identity (default: W2SConfig's)")
    t.add_argument("--clip", type=float, help="clip before the transform, <= 0: none (default: W2SConfig's)")
    t.add_argument("--d", type=int, help="ambient dimension (default: W2SConfig's)")
    t.add_argument("--s", type=int, help="dimension of each pretrained subspace (default: W2SConfig's)")
    t.set_defaults(func=_theory)
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "seeds", None) is not None:  # the count's old spelling; --seeds is a list of seeds elsewhere
        n = args.seeds[0] if len(args.seeds) == 1 else "N"
        raise UsageError(
            f"--seeds: in anchorft the seeds are a list (`toy compare --seeds 0 1 2`); the number of seeds here is "
            f"--n-seeds (--n-seeds {n}; the seeds are seed, seed+1, ...)"
        )
    return int(args.func(args))
