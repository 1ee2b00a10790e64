"""`anchorft w2s`: the weak-to-strong simulator (run, sweep, theory). See docs/w2s.md."""

from __future__ import annotations

import argparse
import json
import sys

from anchorft.commands.flags import both_spellings
from anchorft.errors import report


def _threads(n: int) -> None:
    import torch

    if n > 0:
        torch.set_num_threads(n)


def _run(args: argparse.Namespace) -> int:
    from anchorft.w2s.config import load_config
    from anchorft.w2s.experiments import run_experiment

    overrides = list(args.overrides)
    if args.seeds is not None:
        overrides.append(f"n_seeds={args.seeds}")
    if args.steps is not None:
        overrides.append(f"steps={args.steps}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    try:
        config = load_config(args.preset, overrides)
    except ValueError as e:
        return report("anchorft w2s run", e)
    if config.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("anchorft w2s run: device=cuda requested but CUDA is not available", file=sys.stderr)
            return 2
    _threads(args.threads)
    from anchorft.runs import claim_output, existing_files, finish, reused

    claim = claim_output(args.out, "w2s run", config.to_dict(), overwrite=args.overwrite)
    if claim.complete:
        print(reused(claim))
        return 0
    header = " ".join(["anchorft w2s run", "--preset", args.preset, "--out", args.out, *overrides])
    metrics = run_experiment(config, args.out, progress=not args.quiet, header=header)
    finish(claim)
    for mode in config.modes:
        if mode in metrics:
            i, f = metrics[mode]["init"], metrics[mode]["final"]
            print(
                f"{mode:>10}: target {i['target_alignment']:.3f} -> {f['target_alignment']:.3f}   "
                f"non-target (own theta) {i['nontarget_alignment']:.3f} -> {f['nontarget_alignment']:.3f}   "
                f"non-target (theta_kappa) {i['nontarget_target_alignment']:.3f} -> "
                f"{f['nontarget_target_alignment']:.3f}   [{metrics[mode]['wall_s']:.1f} s]"
            )
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
    from anchorft.w2s.theory import theory_report

    try:
        report = theory_report(args.link, args.transform, args.clip, args.d, args.s)
    except ValueError as e:
        return report("anchorft w2s theory", e)
    print(json.dumps(report, indent=1))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from anchorft.w2s.sweeps import run_sweep

    _threads(args.threads)
    from anchorft.runs import claim_output, existing_files, finish, reused

    run = {"kind": args.kind, "quick": args.quick, "overrides": list(args.overrides)}
    claim = claim_output(args.out, "w2s sweep", run, overwrite=args.overwrite)
    if claim.complete:
        print(reused(claim))
        return 0
    try:
        result = run_sweep(
            args.kind, args.out, quick=args.quick, overrides=list(args.overrides), progress=not args.quiet
        )
    except ValueError as e:
        return report("anchorft w2s sweep", e)
    finish(claim)
    keep = ("kind", "quick", "fit", "theory", "fits", "theories", "summary", "phase")
    print(json.dumps({k: result[k] for k in keep if k in result}, indent=1))
    print(f"wrote {existing_files(args.out, 'sweep.json', args.kind + '.png')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="anchorft w2s", description="weak-to-strong simulator (docs/w2s.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run W2S and SFT (and SFT + anchor) from a preset")
    r.add_argument("--preset", default="paper", help="name in configs/w2s/ or a YAML path (default: paper)")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--seeds", type=int, default=None, help="number of seeds (batched)")
    r.add_argument("--steps", type=int, default=None, help="SGD steps per mode")
    r.add_argument("--device", default=None, help="cpu or cuda")
    r.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: small matmuls; 0 = torch default)"
    )
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    r.add_argument("overrides", nargs="*", help="config overrides key=value")
    r.set_defaults(func=_run)
    s = sub.add_parser("sweep", help="scaling sweeps: s-scaling, d-scaling, chi, overlap, rpsft")
    s.add_argument("--kind", required=True, help="s-scaling | d-scaling | chi | overlap | rpsft")
    s.add_argument("--out", required=True)
    s.add_argument("--quick", action="store_true", help="tiny grid (under a minute)")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--quiet", action="store_true")
    s.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    s.add_argument("overrides", nargs="*", help="overrides of the sweep's base config, key=value")
    s.set_defaults(func=_sweep)
    t = sub.add_parser("theory", help="exponents and predicted sample complexities as JSON")
    t.add_argument("--link", default="he4")
    t.add_argument("--transform", default="zexp", help="zexp or identity")
    t.add_argument("--clip", type=float, default=2.0, help="clip before the transform (<= 0: none)")
    t.add_argument("--d", type=int, default=1024)
    t.add_argument("--s", type=int, default=128)
    t.set_defaults(func=_theory)
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
