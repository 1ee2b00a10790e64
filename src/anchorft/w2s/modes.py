"""Running the modes of a weak-to-strong config on one problem (the simulator's library entry): the weak model set
up (`prepare_weak`), every mode trained in order (`run_modes`), each summarised into its metrics.json entry
(`summarise`). The studies (`anchorft.studies.w2s`: the experiment folder, sweeps, mechanisms) build on it."""

from __future__ import annotations

import time
from typing import Any

import torch

from anchorft.w2s.config import W2SConfig
from anchorft.w2s.dynamics import RunResult, train, train_weak
from anchorft.w2s.labels import label_report, unit_weak_in_subspace
from anchorft.w2s.problem import Problem

__all__ = ["SUMMARY_KEYS", "summarise", "prepare_weak", "run_modes"]

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


def prepare_weak(config: W2SConfig, problem: Problem, progress: bool = False) -> dict | None:
    """Set the weak model of `problem` in place: trained from scratch (`weak: trained`, in `weak_space`, each seed
    stopped at `weak_stop` alignment when > 0), then, with `weak_norm: unit`, moved to unit norm inside V_kappa
    at the same alignment. Returns the training info."""
    info = None
    if config.weak in ("trained", "scratch"):
        stop = config.weak_stop if config.weak_stop > 0 else None
        problem.weak_u, info = train_weak(config, problem, progress=progress, stop_at=stop)
    if config.weak_norm == "unit":
        problem.weak_u = unit_weak_in_subspace(problem.weak_u, problem.thetas[:, 0], problem.bases[:, 0])
    return info


def run_modes(config: W2SConfig, problem: Problem, progress: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """Train every mode of `config` on `problem` (in order; a mode that diverges is the last): the metrics.json
    entries of the modes (with their `labels`) and `diverged` (None, or the mode and the step), and the final first
    layers by mode."""
    metrics: dict[str, Any] = {"diverged": None}
    weights = {}
    for mode in config.modes:
        t1 = time.perf_counter()
        res = train(config, problem, mode, progress=progress)
        metrics[mode] = summarise(res, time.perf_counter() - t1)
        center = res.extra.get("label_center")
        center_t = None if center is None else torch.tensor(center, dtype=problem.w0.dtype, device=problem.w0.device)
        metrics[mode]["labels"] = label_report(config, problem, mode, center_t)
        weights[mode] = res.weights
        if res.diverged_at is not None:
            metrics["diverged"] = {"mode": mode, "step": res.diverged_at}
            break
    return metrics, weights
