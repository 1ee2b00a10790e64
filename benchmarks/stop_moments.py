"""SIGTERM at five moments of five commands: the time from the signal to the exit, the exit status, the run's
marker, and what the rerun repeats. Prints a table (markdown); run by hand on an idle machine (about 10 minutes):

    python benchmarks/stop_moments.py [--only NAME ...] [--json OUT]

Moments: `startup` (0.3 s after the launch: the imports), `prepare` (data preparation or model building:
the command's first progress line or file), `step` (a training or simulation step running; a study's two workers
mid-cell), `save` (a report or checkpoint being written: `anchorft.io.write_json` held for 3 s in the child, the
signal sent inside it), `done` (the run marked complete, the process still exiting: the exit code must be 0 by
`anchorft.cli.console`'s rule). After each stop the same command runs again: "rerun" says whether it completed,
and "repeated" what it ran again of what was finished (studies: cells; training: saved steps). `toy pretrain` and
`w2s run` start over by design.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the child: the command, with write_json held (and announced) when ANCHORFT_HOLD_SAVE is set
CHILD = """
import os, sys, time
if os.environ.get("ANCHORFT_HOLD_SAVE"):
    import anchorft.io as io
    real = io.write_json
    def held(*a, **k):
        print("HOLDING-SAVE", file=sys.stderr, flush=True)
        time.sleep(3)
        return real(*a, **k)
    io.write_json = held
    for name, mod in list(sys.modules.items()):
        if name.startswith("anchorft") and getattr(mod, "write_json", None) is real:
            mod.write_json = held
from anchorft.cli import console
sys.exit(console())
"""

PRESET = """pretrain: {hidden_size: 32, num_layers: 2, num_heads: 2, intermediate_size: 64, steps: 60, batch_size: 20,
  eval_items: 10}
runs:
  - {name: sft, method: sft}
  - {name: l2, method: l2}
  - {name: rpsft-k2, method: rpsft, anchor_rank: 2}
  - {name: rpsft-k6, method: rpsft, anchor_rank: 6}
seeds: [0]
finetune_items: 64
max_steps: 300
batch_size: 16
eval: {n_samples: 2, k: 2, id_items: 12, ood_items: 8, max_new_tokens: 12}
"""


def commands(work: Path) -> dict[str, dict]:
    preset = work / "long-smoke.yaml"
    preset.write_text(PRESET)
    data = work / "train.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a} + {a} =", "completion": f" {2 * a}"}) + "\n" for a in range(64))
    )
    model = work / "tiny-model"
    return {
        "toy compare --workers 2": {
            "argv": ["toy", "compare", "--preset", str(preset), "--workers", "2", "--out", "OUT"],
            "prepare": r"toy pretrain",
            "step": r"toy compare:",
            "record": "cells.jsonl",
        },
        "toy compare --executor ray": {
            "argv": ["toy", "compare", "--preset", str(preset), "--executor", "ray", "--out", "OUT"],
            "prepare": r"toy pretrain",
            "step": r"toy compare:",
            "record": "cells.jsonl",
        },
        "w2s run --preset paper": {
            "argv": ["w2s", "run", "--preset", "paper", "--steps", "3000", "--out", "OUT"],
            "prepare": None,  # no line before the first step's bar: the run's marker says "running" (folder claimed)
            "step": r"(w2s|sft): +\d",
        },
        "toy pretrain": {
            "argv": ["toy", "pretrain", "--preset", "smoke", "--steps", "600", "--no-cache", "--out", "OUT"],
            "prepare": r"toy pretrain",
            "step": r"toy pretrain:.*\b[1-9]\d*/600",
        },
        "anchorft train (1 process)": {
            "argv": [
                "train",
                "--model_name_or_path",
                str(model),
                "--dataset_name",
                str(data),
                "--output_dir",
                "OUT",
                "--method",
                "rpsft",
                "--anchor_rank",
                "4",
                "--max_steps",
                "400",
                "--save_steps",
                "50",
                "--per_device_train_batch_size",
                "4",
                "--max_length",
                "32",
                "--report_to",
                "none",
                "--logging_steps",
                "10",
                "--learning_rate",
                "1e-3",
            ],  # fmt: skip
            "prepare": r"anchor|Map|Tokeniz",
            "step": r"\bstep 60/400  loss",  # its step line (stdout): after checkpoint-50, mid-run
            "ckpt": True,
        },
    }


def _tiny_model(path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import CORPUS, save_tiny_model

    save_tiny_model(path, CORPUS)


def _marker(out: Path) -> str | None:
    try:
        return json.loads((out / "anchorft-run.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def _finished_cells(out: Path, record: str | None) -> list[str]:
    if not record or not (out / record).is_file():
        return []
    lines = [json.loads(x) for x in (out / record).read_text().splitlines() if x.strip()]
    return [x["name"] for x in lines if "result" in x]


def _checkpoints(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit())


def one(name: str, spec: dict, moment: str, work: Path, env: dict) -> dict:
    out = work / re.sub(r"\W+", "-", f"{name}-{moment}")
    shutil.rmtree(out, ignore_errors=True)
    argv = [a.replace("OUT", str(out)) for a in spec["argv"]]
    child_env = {**env, **({"ANCHORFT_HOLD_SAVE": "1"} if moment == "save" else {})}
    if moment == "prepare":  # an empty cache: the comparison pretrains its base first (a cached one is read at once)
        child_env["ANCHORFT_CACHE"] = str(work / f"cache-{out.name}")
    # stdout and stderr read as one stream: the trainer's step lines go to stdout, the bars to stderr
    p = subprocess.Popen([sys.executable, "-c", CHILD, *argv], env=child_env, cwd=work, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(iter(lambda: p.stdout.read(32), "")), daemon=True).start()
    t_launch = time.monotonic()

    def wait_for(cond, limit=600.0) -> bool:
        while not cond():
            if p.poll() is not None or time.monotonic() - t_launch > limit:
                return False
            time.sleep(0.05)
        return True

    text = lambda: "".join(err)  # noqa: E731
    if moment == "startup":
        ok = wait_for(lambda: time.monotonic() - t_launch > 0.3)
    elif moment == "prepare" and spec["prepare"] is None:
        ok = wait_for(lambda: _marker(out) == "running")
    elif moment == "prepare":
        ok = wait_for(lambda: re.search(spec["prepare"], text()) is not None)
    elif moment == "step":
        ok = wait_for(lambda: re.search(spec["step"], text()) is not None)
        if ok and spec.get("record"):
            time.sleep(1.5)  # both workers mid-cell
    elif moment == "save":
        ok = wait_for(lambda: "HOLDING-SAVE" in text())
    else:  # done: the marker says complete, the process may still be exiting
        ok = wait_for(lambda: _marker(out) == "complete", limit=900)
    before_cells, before_ckpt = _finished_cells(out, spec.get("record")), _checkpoints(out)
    t0 = time.monotonic()
    if p.poll() is None:
        os.kill(p.pid, signal.SIGTERM)
    try:
        rc = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
    took = time.monotonic() - t0
    stopped_cells, stopped_ckpt = _finished_cells(out, spec.get("record")), _checkpoints(out)
    row = {"command": name, "moment": moment, "reached": ok, "exit": rc, "seconds": round(took, 1),
           "marker": _marker(out), "tmp_left": sorted(str(x.relative_to(work)) for x in work.rglob("*.tmp*")),
           "cells_kept": len(stopped_cells), "checkpoint": stopped_ckpt[-1] if stopped_ckpt else None}  # fmt: skip
    del before_cells, before_ckpt
    # the rerun: completes, and repeats nothing finished
    rerun_env = {k: v for k, v in child_env.items() if k != "ANCHORFT_HOLD_SAVE"}  # the same cache
    r = subprocess.run([sys.executable, "-c", CHILD, *argv], env=rerun_env, cwd=work, capture_output=True, text=True)
    after = _finished_cells(out, spec.get("record"))
    row["rerun"] = r.returncode
    row["rerun_marker"] = _marker(out)
    if spec.get("record"):
        row["repeated"] = len(after) - len(set(after))  # a cell recorded twice ran twice
    if spec.get("ckpt"):
        resumed = re.search(r"resuming from \S*checkpoint-(\d+)", r.stdout + r.stderr)
        row["resumed_from"] = int(resumed.group(1)) if resumed else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="command names (substrings) to run")
    ap.add_argument("--moments", nargs="*", default=["startup", "prepare", "step", "save", "done"])
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stop-moments-"))
    env = {**os.environ, "ANCHORFT_CACHE": str(work / "cache"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT / "src")}  # fmt: skip
    _tiny_model(work / "tiny-model")
    rows = []
    for name, spec in commands(work).items():
        if args.only and not any(o in name for o in args.only):
            continue
        for moment in args.moments:
            row = one(name, spec, moment, work, env)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| command | moment | exit | s to exit | marker | kept | rerun | repeated |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        kept = r["cells_kept"] if r["command"].startswith("toy compare") else r.get("checkpoint")
        rep = r.get("repeated", r.get("resumed_from", "-"))
        print(f"| {r['command']} | {r['moment']}{'' if r['reached'] else ' (not reached)'} | {r['exit']} | "
              f"{r['seconds']} | {r['marker']} | {kept} | {r['rerun']} {r['rerun_marker']} | {rep} |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
