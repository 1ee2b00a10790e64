"""Two `anchorft toy pretrain` processes at once against one alone: the total pretraining throughput's ratio.

    .venv/bin/python benchmarks/bench_concurrent_pretrain.py [--steps 200] [--policy on|off|both] [--repeats 3]

Each process is the command as a user runs it (`python -m anchorft.cli toy pretrain --no-cache`), the default
testbed (1.08M parameters) for --steps steps, no evaluation during training. Throughput is read from each run's
metrics.json (steps / train_seconds, the training loop alone: imports and the final evaluation excluded); the
ratio is the two concurrent runs' summed steps/s over the lone run's (1.0: sharing the machine costs nothing in
total; 0.5: two runs together do half the work of one). --policy off runs with ANCHORFT_THREAD_POLICY=off
(torch's and OpenMP's defaults: the command before its thread policy); both: off, then on, and then the policy's
two targets: a run alone with the policy against one without it (the policy's cost alone), and each of two runs
at once with the policy against half a lone run without it (its share). With --repeats N each measurement is
repeated N times and the ratios are printed as median [min, max]. Run it alone on the machine: other jobs change
the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PRESET = "preset: default\npretrain: {{steps: {steps}, eval_every: 0, eval_items: 8}}\n"


def _launch(out: Path, preset: Path, policy: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")}
    env["ANCHORFT_THREAD_POLICY"] = policy
    cmd = [sys.executable, "-m", "anchorft.cli", "toy", "pretrain", "--preset", str(preset), "--no-cache"]
    return subprocess.Popen([*cmd, "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _steps_per_second(procs: list[tuple[subprocess.Popen, Path]]) -> list[float]:
    rates = []
    for p, out in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"toy pretrain failed ({out}):\n{err.decode()[-2000:]}")
        m = json.loads((out / "metrics.json").read_text())
        rates.append(1.0 / m["seconds_per_step"])
    return rates


def measure(steps: int, policy: str, tmp: Path, pair: bool = True) -> dict:
    preset = tmp / "bench.yaml"
    preset.write_text(PRESET.format(steps=steps))
    alone = _steps_per_second([(_launch(tmp / f"{policy}-alone", preset, policy), tmp / f"{policy}-alone")])[0]
    if not pair:
        return {"policy": policy, "alone": alone}
    outs = [tmp / f"{policy}-pair{i}" for i in range(2)]
    rates = _steps_per_second([(_launch(o, preset, policy), o) for o in outs])
    return {"policy": policy, "alone": alone, "pair": rates, "ratio": sum(rates) / alone}


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="pretraining steps per process (default 200)")
    ap.add_argument("--policy", choices=("on", "off", "both"), default="on", help="the thread policy (default on)")
    ap.add_argument("--repeats", type=int, default=1, help="measurements of each policy (default 1)")
    ap.add_argument(
        "--no-pair-off",
        action="store_true",
        help="without the policy, time the lone run only (two runs at once without it take minutes: 0.16 of one)",
    )
    args = ap.parse_args()
    print(f"cores: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")
    runs: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        for policy in ("off", "on") if args.policy == "both" else (args.policy,):
            with tempfile.TemporaryDirectory() as tmp:
                r = measure(args.steps, policy, Path(tmp), pair=not (args.no_pair_off and policy == "off"))
            runs.setdefault(policy, []).append(r)
            line = f"[{rep + 1}/{args.repeats}] thread policy {policy}: alone {r['alone']:.2f} steps/s"
            if "pair" in r:
                line += f"; two at once {r['pair'][0]:.2f} + {r['pair'][1]:.2f} = {sum(r['pair']):.2f} steps/s"
                line += f"; ratio {r['ratio']:.2f}"
            print(line, flush=True)
    for policy, rs in runs.items():
        if all("pair" in r for r in rs):
            print(f"thread policy {policy}: two at once over one alone, {_spread([r['ratio'] for r in rs])}")
    if len(runs) == 2:
        pairs = list(zip(runs["off"], runs["on"]))
        print(f"a run alone, policy on over off: {_spread([on['alone'] / off['alone'] for off, on in pairs])}")
        shares = [min(on["pair"]) / (off["alone"] / 2) for off, on in pairs]
        print(f"the slower of two runs at once with the policy, over half a lone run without it: {_spread(shares)}")
        total = [sum(on["pair"]) / off["alone"] for off, on in pairs]
        print(f"two runs with the policy over one without it: {_spread(total)}")


if __name__ == "__main__":
    main()
