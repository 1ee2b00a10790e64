"""One experiment: build the problem, run each mode (W2S, SFT, SFT + anchor) batched over seeds, write
DIR/config.yaml, DIR/metrics.json and DIR/alignment.png. `run_experiment` is the library entry point."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from anchorft.provenance import write_metrics
from anchorft.w2s.config import W2SConfig, config_hash, save_config
from anchorft.w2s.dynamics import RunResult, train, train_weak
from anchorft.w2s.labels import label_report, unit_weak_in_subspace
from anchorft.w2s.plots import plot_alignment
from anchorft.w2s.problem import Problem, build_problem
from anchorft.w2s.risk import risk_report

__all__ = ["run_experiment", "run_modes", "summarise", "prepare_weak", "ode_metrics"]

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


def run_experiment(
    config: W2SConfig,
    out_dir: str | os.PathLike | None,
    progress: bool = True,
    header: str | None = None,
    ode: bool = False,
) -> dict:
    """Run every mode of `config` and return the metrics dict (the content of metrics.json).

    With `ode`, metrics["ode"][mode] holds the mean-field prediction (`anchorft.w2s.meanfield.predict`) on the
    same logged steps for W2S (at lambda = 1) and SFT: curves, per-seed predicted escape samples (target
    alignment 0.5) beside the measured ones (`escape_samples_measured`, interpolated in log samples between
    logged steps), drawn dashed on alignment.png.

    With `out_dir`, writes config.yaml (first line `header`), metrics.json and alignment.png there, and the run
    marker of `anchorft w2s run` (a folder holding another run is refused, as the command refuses it). If a mode
    diverges (non-finite loss or weights) the later modes are skipped; metrics["diverged"] names the mode and the
    step, and the metrics logged so far are kept and written.
    """
    config.validate()
    out = Path(out_dir) if out_dir is not None else None
    claim = None
    if out is not None:
        from anchorft.runs import claim_output

        # the run marker `anchorft w2s run` writes (docs/runs.md): a library run's folder is a run folder too
        claim = claim_output(out, "w2s run", {**config.to_dict(), "ode": ode}, rerun_finished=True)
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
    info = prepare_weak(config, problem, progress=progress)
    if info is not None:
        metrics["weak"] = info
    with torch.no_grad():
        modes, weights = run_modes(config, problem, progress)
        metrics.update(modes)
        if metrics["diverged"] is None:
            metrics["risks"] = risk_report(config, problem, weights)
    if ode:
        metrics["ode"] = ode_metrics(config, problem, metrics)
    metrics["wall_s"] = time.perf_counter() - t0
    if out is not None:
        write_metrics(out / "metrics.json", metrics, indent=1)
        plot_alignment(metrics, out / "alignment.png", title=f"d={config.d}, s={config.s}, {config.n_seeds} seeds")
    if claim is not None:
        from anchorft.runs import finish

        finish(claim)
    return metrics


def ode_metrics(config: W2SConfig, problem, metrics: dict, threshold: float = 0.5) -> dict:
    """The `ode` entry of metrics.json: per mode the mean-field curves on the logged steps, the predicted and
    measured escape samples per seed and `escape_ratio` (predicted / measured per seed, their mean with a 95 %
    Student-t interval: `stats.ratio_summary`); modes the theory does not cover get a `skipped` reason."""
    from anchorft.w2s.meanfield import crossing_time, predict
    from anchorft.w2s.stats import ratio_summary

    out: dict[str, Any] = {}
    for mode in config.modes:
        if mode not in metrics:
            continue
        if mode not in ("w2s", "sft") or (mode == "w2s" and config.lambda_kappa != 1.0):
            out[mode] = {"skipped": "the mean-field theory covers W2S at lambda_kappa = 1 and SFT"}
            continue
        t1 = time.perf_counter()
        pred = predict(config, problem, mode, metrics[mode]["steps"], threshold=threshold)
        steps = metrics[mode]["steps"]
        hits = [crossing_time(steps, curve, threshold) for curve in zip(*metrics[mode]["target_alignment_seeds"])]
        pred["escape_samples_measured"] = [None if hit is None else hit * config.batch_size for hit in hits]
        pred["escape_ratio"] = ratio_summary(pred["escape_samples_per_seed"], pred["escape_samples_measured"])
        pred["wall_s"] = time.perf_counter() - t1
        out[mode] = pred
    return out
