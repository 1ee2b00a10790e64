"""One experiment: build the problem, run each mode (W2S, SFT, SFT + anchor) batched over seeds, write
DIR/config.yaml, DIR/metrics.json and DIR/alignment.png. `run_experiment` is the library entry point."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from anchorft.io import write_json
from anchorft.w2s.config import W2SConfig, config_hash, save_config
from anchorft.w2s.dynamics import RunResult, train, train_weak
from anchorft.w2s.plots import plot_alignment
from anchorft.w2s.problem import build_problem

__all__ = ["run_experiment", "summarise"]

SUMMARY_KEYS = ("target_alignment", "nontarget_alignment", "nontarget_target_alignment")


def summarise(result: RunResult, wall_s: float) -> dict:
    """The metrics.json entry of one mode: logged lists, plus `init` and `final` scalars of the summary keys."""
    log = dict(result.log)
    log["init"] = {k: log[k][0] for k in SUMMARY_KEYS}
    log["final"] = {k: log[k][-1] for k in SUMMARY_KEYS}
    log["final_per_seed"] = {k: log[f"{k}_seeds"][-1] for k in SUMMARY_KEYS}
    log["diverged_at"] = result.diverged_at
    log["wall_s"] = wall_s
    log.update(result.extra)
    return log


def run_experiment(
    config: W2SConfig, out_dir: str | os.PathLike | None, progress: bool = True, header: str | None = None
) -> dict:
    """Run every mode of `config` and return the metrics dict (the content of metrics.json).

    With `out_dir`, writes config.yaml (first line `header`), metrics.json and alignment.png there. If a mode
    diverges (non-finite loss or weights) the later modes are skipped; metrics["diverged"] names the mode and the
    step, and the metrics logged so far are kept and written.
    """
    config.validate()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        save_config(config, out / "config.yaml", header)
    t0 = time.perf_counter()
    problem = build_problem(config)
    metrics: dict[str, Any] = {
        "config_hash": config_hash(config),
        "seeds": problem.seeds,
        "device": str(problem.w0.device),
        "torch_threads": torch.get_num_threads(),
        "diverged": None,
    }
    if config.weak == "scratch":
        problem.weak_u, info = train_weak(config, problem, progress=progress)
        metrics["weak"] = info
    with torch.no_grad():
        for mode in config.modes:
            t1 = time.perf_counter()
            res = train(config, problem, mode, progress=progress)
            metrics[mode] = summarise(res, time.perf_counter() - t1)
            if res.diverged_at is not None:
                metrics["diverged"] = {"mode": mode, "step": res.diverged_at}
                break
    metrics["wall_s"] = time.perf_counter() - t0
    if out is not None:
        write_json(out / "metrics.json", metrics, indent=1)
        plot_alignment(metrics, out / "alignment.png", title=f"d={config.d}, s={config.s}, {config.n_seeds} seeds")
    return metrics
