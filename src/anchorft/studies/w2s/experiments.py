"""One experiment: build the problem, run each mode (W2S, SFT, SFT + anchor) batched over seeds, write
DIR/config.yaml, DIR/metrics.json and DIR/alignment.png. `run_experiment` is the library entry point."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from anchorft.provenance import write_metrics
from anchorft.runs import RunClaim, run_claimed
from anchorft.studies.w2s.plots import plot_alignment
from anchorft.w2s.config import W2SConfig, config_hash, save_config
from anchorft.w2s.modes import prepare_weak, run_modes
from anchorft.w2s.problem import build_problem
from anchorft.w2s.risk import risk_report
from anchorft.w2s.stats import ratio_summary

__all__ = ["run_experiment", "run_config", "ode_metrics", "summary_lines", "experiment_into"]


def run_config(config: W2SConfig, ode: bool = False) -> dict:
    """What defines a run of `anchorft w2s run` (its marker's hash): the resolved config and whether the mean-field
    prediction is computed; the command and the library entry claim folders with it, so that both name one run."""
    return {**config.to_dict(), "ode": ode}


def run_experiment(
    config: W2SConfig,
    out_dir: str | os.PathLike | None,
    progress: bool = True,
    header: str | None = None,
    ode: bool = False,
    claim: RunClaim | None = None,
) -> dict:
    """Run every mode of `config` and return the metrics dict (the content of metrics.json).

    With `ode`, `metrics["ode"][mode]` holds the mean-field prediction (`anchorft.w2s.meanfield.predict`) on the
    same logged steps for W2S (at lambda = 1) and SFT: curves, per-seed predicted escape samples (target
    alignment 0.5) beside the measured ones (`escape_samples_measured`, interpolated in log samples between
    logged steps), drawn dashed on alignment.png.

    With `out_dir`, writes config.yaml (first line `header`), metrics.json and alignment.png there, inside the
    folder's claim as `anchorft w2s run` (docs/runs.md): the command claims it and passes its `claim` (the folder is
    claimed once); without one, this entry claims it itself (a folder holding another run is refused, as the command
    refuses it; the same run finished is run again). If a mode
    diverges (non-finite loss or weights) the later modes are skipped; `metrics["diverged"]` names the mode and the
    step, and the metrics logged so far are kept and written.
    """
    config.validate()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and claim is None:  # a library run's folder is a run folder too

        def work(claim: RunClaim) -> dict:
            return run_experiment(config, out, progress, header, ode, claim)

        return run_claimed(out, "w2s run", run_config(config, ode), work, rerun_finished=True)
    if out is not None:
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
    return metrics


def ode_metrics(config: W2SConfig, problem, metrics: dict, threshold: float = 0.5) -> dict:
    """The `ode` entry of metrics.json: per mode the mean-field curves on the logged steps, the predicted and
    measured escape samples per seed and `escape_ratio` (predicted / measured per seed, their mean with a 95 %
    Student-t interval: `stats.ratio_summary`); modes the theory does not cover get a `skipped` reason."""
    from anchorft.w2s.meanfield import crossing_time, predict  # lazy: loads scipy

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


def summary_lines(metrics: dict, modes: list[str]) -> list[str]:
    """An experiment's metrics as the lines `anchorft w2s run` prints: each mode's alignments from start to end,
    and the mean-field escape times (`--ode`)."""
    lines = []
    for mode in modes:
        if mode in metrics:
            i, f = metrics[mode]["init"], metrics[mode]["final"]
            lines.append(
                f"{mode:>10}: target {i['target_alignment']:.3f} -> {f['target_alignment']:.3f}   "
                f"non-target (own theta) {i['nontarget_alignment']:.3f} -> {f['nontarget_alignment']:.3f}   "
                f"non-target (theta_kappa) {i['nontarget_target_alignment']:.3f} -> "
                f"{f['nontarget_target_alignment']:.3f}   [{metrics[mode]['wall_s']:.1f} s]"
            )
    for mode, e in metrics.get("ode", {}).items():
        if "escape_samples_per_seed" in e:
            lines.append(
                f"{mode:>10}: escape (target 0.5) samples per seed: mean-field {e['escape_samples_per_seed']}, "
                f"measured {e['escape_samples_measured']}"
            )
    return lines


def experiment_into(
    config: W2SConfig,
    out: str | os.PathLike,
    ode: bool = False,
    header: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict | None:
    """`anchorft w2s run`: `run_experiment` in the folder `out`, claimed for the config (the same run finished:
    reused, None; another: refused unless `overwrite`). Checked first: the mean-field ODE supports the config
    (`ode`), CUDA is there for a cuda device."""
    if ode:
        from anchorft.w2s.meanfield import check_supported  # lazy: loads scipy

        try:
            check_supported(config)
        except ValueError as e:
            raise ValueError(f"--ode: {e}") from None
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device=cuda requested but CUDA is not available")

    def work(claim: RunClaim) -> dict:  # the experiment inside the folder's one claim
        return run_experiment(config, out, progress=progress, header=header, ode=ode, claim=claim)

    return run_claimed(out, "w2s run", run_config(config, ode), work, overwrite=overwrite)
