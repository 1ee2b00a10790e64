"""The drift alarm: per record, a cheap replay of the code that made it, compared with what the record stored.

A record (`anchorft.studies.records`) holds results that took minutes to hours; rerunning them in CI is out of reach.
What CI can afford is the start of each: the record stores, beside its results, a *replay* made by the same code
when the record was made, and `check` runs the replay again on the code of now:

- a testbed comparison: the first `PRETRAIN_STEPS` pretraining steps of the record's base config (its seed, its
  pinned thread count) with their losses and a checksum of the weights after them, then the first
  `FINETUNE_STEPS` fine-tuning steps of every run of the record (its settings, the first seed, on the comparison's
  pinned thread count) from that model, their losses and weights' checksum, one run per code path (method,
  anchor kind, adapter anchor) on the first `FINETUNE_ITEMS` items of its fine-tuning set;
- a weak-to-strong experiment: one seed of the record's preset at `W2S_STEPS` steps, each mode's final alignments;
- the verdict: each base's estimates (excess over the front, retention, ID gain, the knob picked on validation
  items) re-scored from the stored per-item grades, without the bootstrap.

The error model, which sets the tolerance of each comparison:

- Training replays are compared bit for bit on the CPU kind that made them. On one CPU kind, with the same torch
  build and the same thread count, torch's CPU kernels are deterministic (the reduction order is fixed by the
  thread split): two default pretrainings at two threads gave byte-identical weights (docs/toy.md), and the
  workers' test holds fine-tunes equal across processes. So any difference is a code change (data, model,
  optimiser, penalty, thread pinning), never noise. The thread count is part of the model: one and two threads give
  different sums, so the replay runs in a process set to one thread, and the code must pin the record's count
  itself (pretraining two, each fine-tune one) to agree. Each replay stores the machine kind it ran on
  (`machine_kind`: the CPU's model name, the SIMD level torch's kernels dispatch to, torch's version).
- On another CPU kind (another SIMD width or vendor: MKL and torch take other kernels) the last bits differ and
  grow through training. Measured between two kinds, the one that made the records (which they did not record)
  and an AMD EPYC with AVX-512, on the same code and torch 2.13.0+cpu (records/README.md): across 15 of the 16
  training replays the largest relative difference of a loss or an alignment was 1.2e-5 (the demo's pretraining
  loss at step 18; the W2S alignments 2.7e-8 to 2.6e-6). So across kinds numbers are compared within
  `CROSS_MACHINE_RTOL` (1e-4 relative, 8x the largest measured) and the weights' checksums, bytes, not at all.
  One replay amplifies rounding (w2s-trained-teacher: its weak teacher is trained 3200 SGD steps at step size 1,
  and the two kinds ended 17% apart): a replay whose measured difference between kinds exceeded the tolerance
  keeps that measurement (`across_kinds`) and is compared on its own kind only. `python -m
  anchorft.studies.records replay-again` makes the replays again on a new kind where the code of now agrees with
  the stored ones within that tolerance, and stores the measurement.
- The verdict's estimates are means of 0/1 grades and a linear interpolation of the front: float64 arithmetic
  whose summation order may differ with numpy's version by a few units in the last place (~1e-13 points), so they
  are compared within `VERDICT_TOLERANCE` (1e-9 points: nine orders under the 0.1 point the docs print), and the
  picked knob exactly.

A code change that moves a result fails `tests/studies/test_drift.py` (`make drift`) until the record is made again
(the run rerun, then `python -m anchorft.studies.records make ...`, which stores a new replay) and the docs
regenerated (`make docs-tables`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

__all__ = [
    "PRETRAIN_STEPS",
    "FINETUNE_STEPS",
    "W2S_STEPS",
    "VERDICT_TOLERANCE",
    "CROSS_MACHINE_RTOL",
    "machine_kind",
    "compare_replays",
    "largest_relative_difference",
    "weights_checksum",
    "toy_replay",
    "w2s_replay",
    "verdict_replay",
    "differences",
]

PRETRAIN_STEPS = 20
FINETUNE_STEPS = 3
FINETUNE_ITEMS = 256  # the replay's fine-tuning set (the record's first items, fewer: the steps draw 96)
W2S_STEPS = 200
VERDICT_TOLERANCE = 1e-9
CROSS_MACHINE_RTOL = 1e-4  # 8x the largest difference measured between two CPU kinds (module docstring)
NOT_COMPARED = ("machine", "checksum", "across_kinds")  # across kinds: bytes and bookkeeping, not numbers


def machine_kind() -> dict:
    """The kind of machine a training replay runs on, which sets its last bits: the CPU's model name (from
    /proc/cpuinfo; `platform.processor()` where there is none), the SIMD level torch's CPU kernels dispatch to
    (`torch.backends.cpu.get_cpu_capability()`) and torch's version."""
    import platform

    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "simd": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def weights_checksum(model) -> str:
    """SHA-256 (first 16 hex digits) of a model's parameters and buffers, by name, as float32 bytes."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().float().numpy().tobytes())
    return h.hexdigest()[:16]


def _one_run_per_code_path(runs: list) -> list:
    """The first run of each (method, anchor kind, adapter anchor) among `runs`: the runs that differ only in a
    number (lambda, lr) take the same code path, and each costs a trainer's setup (about 3 s)."""
    seen, out = set(), []
    for r in runs:
        path = (r.method, r.anchor_kind, bool(r.anchor_rank) and r.method == "lora")
        if path not in seen:
            seen.add(path)
            out.append(r)
    return out


def toy_replay(config: dict, workdir: str | Path | None = None) -> dict:
    """The replay of a testbed comparison of `config` (its config.yaml as a mapping): the first PRETRAIN_STEPS
    pretraining steps (losses, checksum) and the first FINETUNE_STEPS steps of each run from that model."""
    import torch  # lazy: loads torch

    from anchorft.eval.loading import load_causal_lm, load_tokenizer
    from anchorft.rpsft.train import train  # lazy: loads TRL
    from anchorft.studies.testbed import compare as cmp
    from anchorft.studies.testbed.compare_config import load_config
    from anchorft.threads import pinned_threads
    from anchorft.toy import pretrain as pt

    cfg = load_config(copy.deepcopy(config))
    cfg.bases = []
    pre = copy.deepcopy(cfg.pretrain)
    pre.steps, pre.eval_items = PRETRAIN_STEPS, 1
    out: dict = {"pretrain": {"steps": PRETRAIN_STEPS, "threads": pre.threads}, "finetune": {}}
    losses: list[float] = []
    with tempfile.TemporaryDirectory(prefix="anchorft-replay-", dir=workdir) as tmp:
        base_dir = Path(tmp) / "base"
        # the replay's process on one thread: the code must pin the record's count itself
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with mock.patch.object(pt, "write_loss_plot", lambda values, *a, **k: losses.extend(values)):
                pt.pretrain(pre, base_dir, progress=False)
        finally:
            torch.set_num_threads(before)
        out["pretrain"]["losses"] = losses
        out["pretrain"]["checksum"] = weights_checksum(load_causal_lm(base_dir))
        tok = load_tokenizer(str(base_dir))
        short = copy.deepcopy(cfg)
        short.max_steps = FINETUNE_STEPS
        seed = cfg.seeds[0]
        items = min(cfg.finetune_items, FINETUNE_ITEMS)  # the steps replayed draw 3 x 32 of them
        data = cmp.finetune_dataset(items, np.random.default_rng(1000 + seed), cfg.id_skill)
        for run in _one_run_per_code_path(cfg.runs):
            args = cmp._train_args(short, run, seed, Path(tmp) / "runs" / run.name)
            model = load_causal_lm(base_dir)
            with pinned_threads(cfg.threads):  # as the comparison's executor pins each fine-tune
                trainer = train(args, model, data, tokenizer=tok)
            steps = [h["loss"] for h in trainer.state.log_history if "loss" in h]
            out["finetune"][run.name] = {"losses": steps, "checksum": weights_checksum(trainer.model)}
        out["finetune_steps"], out["finetune_threads"], out["seed"] = FINETUNE_STEPS, cfg.threads, seed
    out["machine"] = machine_kind()
    return out


def w2s_replay(config: dict, threads: int) -> dict:
    """One seed of the W2S experiment of `config` (its resolved config as a mapping) at W2S_STEPS steps, on
    `threads` torch threads: each mode's final alignments."""
    from anchorft.dataclass_yaml import from_mapping
    from anchorft.studies.w2s.experiments import run_experiment
    from anchorft.threads import pinned_threads
    from anchorft.w2s.config import W2SConfig

    cfg = from_mapping(W2SConfig, {**config, "n_seeds": 1, "steps": W2S_STEPS})
    with tempfile.TemporaryDirectory(prefix="anchorft-replay-") as tmp, pinned_threads(threads):
        metrics = run_experiment(cfg, tmp)
    return {
        "steps": W2S_STEPS,
        "threads": threads,
        "final": {m: metrics[m]["final"] for m in cfg.modes if m in metrics},
        "machine": machine_kind(),
    }


def verdict_replay(study: str | Path, verdict: dict) -> dict:
    """Each base's estimates of `verdict` (its verdict.json) re-scored from the per-item grades of the study
    folder `study` (`anchorft toy unpack` of the record) by the verdict's method: {base folder name: {run or group:
    {"estimate", "retention", "gain"[, "picked"]}}}, the values on the data (no bootstrap: 2 replicates, unused)."""
    from anchorft.studies.testbed import verdict as vd

    front = verdict["front"]
    picks = verdict.get("picks") or {}
    method = verdict.get("method", "first")  # a verdict.json before methods were named is the first's
    out = {}
    for folder_name, base in zip(verdict["bases"], verdict["per_base"]):
        folder = Path(study) / Path(folder_name).name
        also = ["wise"] if (folder / "wise").is_dir() else []
        runs = [r for r in base if r not in picks]
        got = vd.base_verdict(folder, runs, front, n_boot=2, also=also, method=method) if runs else {}
        if picks:
            got.update(vd.base_picks(folder, picks, front, n_boot=2, also=also, method=method))
        keep = ("estimate", "retention", "gain", "picked")
        out[Path(folder_name).name] = {r: {k: v[k] for k in keep if k in v} for r, v in got.items()}
    return out


def differences(
    recorded, now, tolerance: float = 0.0, path: str = "", rtol: float = 0.0, skip: tuple[str, ...] = ()
) -> list[str]:
    """Where `now` differs from `recorded` (nested dicts, lists, numbers, strings): one line each, a number
    differing by more than `tolerance` + `rtol` x |recorded| (both 0: bit for bit), a key or an item missing or
    added; keys in `skip` are not compared, at any depth."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        lines = [f"{path}/{k}: missing now" for k in recorded if k not in now and k not in skip]
        lines += [f"{path}/{k}: not in the record" for k in now if k not in recorded and k not in skip]
        for k in recorded:
            if k in now and k not in skip:
                lines += differences(recorded[k], now[k], tolerance, f"{path}/{k}", rtol, skip)
        return lines
    if isinstance(recorded, list) and isinstance(now, list):
        if len(recorded) != len(now):
            return [f"{path}: {len(recorded)} values recorded, {len(now)} now"]
        lines = []
        for i, (a, b) in enumerate(zip(recorded, now)):
            lines += differences(a, b, tolerance, f"{path}[{i}]", rtol, skip)
        return lines[:3] + ([f"{path}: {len(lines) - 3} more"] if len(lines) > 3 else [])
    if isinstance(recorded, (int, float)) and isinstance(now, (int, float)) and not isinstance(recorded, bool):
        exact = tolerance == 0 and rtol == 0
        same = recorded == now if exact else abs(now - recorded) <= tolerance + rtol * abs(recorded)
        same = same or (math.isnan(recorded) and math.isnan(now))  # an undefined value (no such group) both times
        return [] if same else [f"{path}: recorded {recorded!r}, now {now!r}"]
    return [] if recorded == now else [f"{path}: recorded {json.dumps(recorded)}, now {json.dumps(now)}"]


def largest_relative_difference(recorded, now) -> float:
    """The largest |now - recorded| / |recorded| over the numbers both hold at the same place (0 where both are
    0 or both undefined; inf where only one is undefined or a recorded 0 moved)."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        return max((largest_relative_difference(recorded[k], now[k]) for k in recorded if k in now), default=0.0)
    if isinstance(recorded, list) and isinstance(now, list):
        return max((largest_relative_difference(a, b) for a, b in zip(recorded, now)), default=0.0)
    if isinstance(recorded, (int, float)) and isinstance(now, (int, float)) and not isinstance(recorded, bool):
        if math.isnan(recorded) or math.isnan(now):
            return 0.0 if math.isnan(recorded) and math.isnan(now) else math.inf
        if recorded == now:
            return 0.0
        return abs(now - recorded) / abs(recorded) if recorded else math.inf
    return 0.0


def compare_replays(recorded: dict, now: dict, here: dict | None = None) -> tuple[list[str], str]:
    """(differences, how they were compared) of a record's stored replay `recorded` and the replay of now `now`
    ({kind: replay}, the record's form), on the machine kind `here` (default: the one `now` says it ran on). A
    verdict's estimates: within VERDICT_TOLERANCE. A training replay made on this kind: bit for bit, checksums
    included. Made on another kind (or before replays said their kind): numbers within CROSS_MACHINE_RTOL,
    checksums not compared; not at all where the replay's measured difference between two kinds (`across_kinds`,
    stored by `records replay-again`) exceeded that tolerance: it amplifies rounding."""
    kind = next(iter(recorded))
    if kind == "verdict":
        return differences(recorded, now, VERDICT_TOLERANCE), f"within {VERDICT_TOLERANCE:g} points"
    stored = recorded[kind]
    here = here or now[kind].get("machine") or machine_kind()
    if stored.get("machine") == here:
        return differences(recorded, now, skip=("across_kinds",)), "bit for bit (made on this CPU kind)"
    made_on = stored.get("machine") or "a kind it does not record"
    measured = (stored.get("across_kinds") or {}).get("largest_relative_difference", 0.0)
    if measured > CROSS_MACHINE_RTOL:
        return [], f"not compared: made on {made_on}; between two kinds it moved {measured:.2g} relative"
    how = f"within {CROSS_MACHINE_RTOL:g} relative, checksums not compared (made on {made_on})"
    return differences(recorded, now, rtol=CROSS_MACHINE_RTOL, skip=NOT_COMPARED), how
