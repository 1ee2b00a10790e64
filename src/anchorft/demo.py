"""`make demo`: the project's main job, end to end.

1. The weak-to-strong paper figure (d=1024, s=128; `anchorft w2s run --preset paper`).
2. The method comparison on the embedded testbed (`anchorft toy compare --preset demo`): pretrains the tiny model
   once (cached), fine-tunes it with SFT, L2 at three lambdas, the paper's RPSFT, the subspace kind and LoRA + anchor
   (two seeds each), evaluates ID and OOD; its report's first line puts this one base beside the verdict over six.

Each step goes through the same command code as the CLI, so the demo shows what a user would run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from anchorft.cli import main as cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anchorft.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    parser.add_argument("--skip-w2s", action="store_true", help="skip the weak-to-strong figure")
    parser.add_argument("--skip-toy", action="store_true", help="skip the testbed comparison")
    parser.add_argument("--toy-preset", default="demo", help="testbed preset: demo, smoke or default")
    args = parser.parse_args(argv)
    out = Path(args.out)

    t0 = time.perf_counter()
    done: list[str] = []
    if not args.skip_w2s:
        rc = cli(["w2s", "run", "--preset", "paper", "--out", str(out / "w2s-paper")])
        if rc:
            return rc
        done.append(f"weak-to-strong figure: {out / 'w2s-paper' / 'alignment.png'}  (metrics.json beside it)")
    if not args.skip_toy:
        _announce_toy(args.toy_preset)
        rc = cli(["toy", "compare", "--preset", args.toy_preset, "--out", str(out / "toy-compare")])
        if rc:
            return rc
        done.append(f"testbed comparison report: {out / 'toy-compare' / 'report.md'}  (tradeoff.png, results.json)")
    print(f"\nanchorft demo finished in {time.perf_counter() - t0:.0f} s")
    for line in done:
        print("  " + line)
    return 0


def _announce_toy(preset: str) -> None:
    """Say what the comparison will do and how long it took on the project's 2-core CPU machine."""
    from anchorft.studies.testbed.compare_config import load_config  # lazy: loads torch
    from anchorft.toy.pretrain import cache_root, cached_model  # lazy: loads torch

    cfg = load_config(preset)
    jobs = len(cfg.runs) * len(cfg.seeds)
    seeds = f"{len(cfg.seeds)} seed" + ("s" if len(cfg.seeds) > 1 else "")
    msg = f"testbed: {jobs} fine-tunes ({len(cfg.runs)} runs x {seeds})"
    if cached_model(cfg.pretrain) is None:
        msg += f"; first the testbed model is pretrained (once: cached under {cache_root()})"
    print(msg, flush=True)


if __name__ == "__main__":
    sys.exit(main())
