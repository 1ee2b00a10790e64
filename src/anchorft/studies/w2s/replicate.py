"""`anchorft w2s replicate CLAIM --seeds A-B`: a documented weak-to-strong claim re-run at its documented size on a
block of seeds the user names, its statistic printed beside the documented one, and whether it holds by the
claim's own rule, written here before any replication ran (docs/w2s.md, "Replication").

A claim is a row of `CLAIMS`: the sentence it replicates and where the docs say it, the preset and overrides of its
documented run (the documented size), the seeds its settings were chosen on and those it was reported on, the
documented numbers, and the rule ("holds if ..."): a pure function of the run's metrics.json. The seeds of the block
replace the preset's (`seed` = the block's first, `n_seeds` = its length): the simulator's seeds are consecutive.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anchorft.w2s.config import load_config

__all__ = ["Claim", "CLAIMS", "parse_seed_block", "measure", "replicate", "report_lines"]


@dataclass(frozen=True)
class Claim:
    """One documented claim: what is re-run (`preset` + `overrides`, the documented size), what is measured
    (`statistics`: metrics.json -> named numbers, per seed where the claim is per seed) and the rule (`holds`:
    statistics -> bool, stated in words in `rule`)."""

    name: str
    statement: str
    where: str
    preset: str
    overrides: tuple[str, ...]
    chosen_on: str
    reported_on: str
    documented: dict[str, Any]
    rule: str
    statistics: Callable[[dict], dict[str, Any]]
    holds: Callable[[dict], bool]


def _finals(metrics: dict, mode: str, key: str) -> list[float]:
    return [float(v) for v in metrics[mode]["final_per_seed"][key]]


def _paper_stats(m: dict) -> dict[str, Any]:
    target, theta2 = _finals(m, "w2s", "target_alignment"), _finals(m, "w2s", "nontarget_alignment")
    return {
        "target_init": float(m["w2s"]["init"]["target_alignment"]),
        "target_final": sum(target) / len(target),
        "target_final_per_seed": target,
        "theta2_init": float(m["w2s"]["init"]["nontarget_alignment"]),
        "theta2_final": sum(theta2) / len(theta2),
        "theta2_final_per_seed": theta2,
    }


def _sft_turn_stats(m: dict) -> dict[str, Any]:
    turn, target = _finals(m, "sft", "nontarget_target_alignment"), _finals(m, "sft", "target_alignment")
    return {
        "nontarget_theta1_init": float(m["sft"]["init"]["nontarget_target_alignment"]),
        "nontarget_theta1_final": sum(turn) / len(turn),
        "nontarget_theta1_final_per_seed": turn,
        "target_init": float(m["sft"]["init"]["target_alignment"]),
        "target_final_per_seed": target,
    }


def _gain_stats(m: dict) -> dict[str, Any]:
    iso = m["risks"]["isotropic"]
    target = _finals(m, "w2s", "target_alignment")
    return {
        "risk_weak": float(iso["risk"]["weak"]),
        "risk_w2s_link": float(iso["risk"]["w2s@link"]),
        "gain": float(iso["gain_over_weak"]["w2s@link"]),
        "gain_se": float(iso["gain_over_weak_se"]["w2s@link"]),
        "target_final_per_seed": target,
    }


CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in (
        Claim(
            name="paper",
            statement="W2S learns the target (Theorem 1) and keeps the non-target feature theta_2 (paper preset)",
            where="README.md (key results), docs/results/w2s-paper.md",
            preset="paper",
            overrides=("modes=w2s",),
            chosen_on="seeds 0-2 (the preset's steps and step sizes were set on them)",
            reported_on="seeds 0-2",
            documented={"target_final": 0.966, "theta2_final": 0.858, "theta2_init": 0.900},
            rule="holds if every seed's final W2S target alignment is >= 0.9 and every seed keeps theta_2 "
            "(final non-target alignment >= 0.8, from 0.9)",
            statistics=_paper_stats,
            holds=lambda s: min(s["target_final_per_seed"]) >= 0.9 and min(s["theta2_final_per_seed"]) >= 0.8,
        ),
        Claim(
            name="paper-sft-turn",
            statement="under SFT the non-target neurons turn toward theta_1 while the target neurons stay at their "
            "initial alignment (Theorem 2's direction, paper preset)",
            where="docs/w2s.md (In short, Theorem 2), docs/results/w2s-paper.md",
            preset="paper",
            overrides=("modes=sft",),
            chosen_on="seeds 0-2 (eta_sft tuned until SFT lost >= 0.3 of theta_2 under the squared loss)",
            reported_on="seeds 0-2",
            documented={"nontarget_theta1_init": 0.270, "nontarget_theta1_final": 0.444, "target_final": 0.075},
            rule="holds if in every seed the non-target neurons' alignment with theta_1 rises by >= 0.05 and the "
            "target alignment stays below 0.2",
            statistics=_sft_turn_stats,
            holds=lambda s: (
                min(s["nontarget_theta1_final_per_seed"]) >= s["nontarget_theta1_init"] + 0.05
                and max(s["target_final_per_seed"]) < 0.2
            ),
        ),
        Claim(
            name="gain",
            statement="the student beats its (planted) teacher: W2S read through the link has a lower isotropic "
            "risk than the weak model (gain preset)",
            where="docs/w2s.md (The gain preset)",
            preset="gain",
            overrides=("modes=w2s",),
            chosen_on="seeds 0-2 (30 runs: weak alignment, loss, eta_w2s, steps)",
            reported_on="seeds 100-104",
            documented={"gain": 0.226, "gain_se": 0.026, "risk_weak": 0.440, "risk_w2s_link": 0.214},
            rule="holds if the paired gain over the teacher exceeds 3 standard errors (the larger of the per-sample "
            "and the between-seed one) and every seed's W2S target alignment is >= 0.9",
            statistics=_gain_stats,
            holds=lambda s: s["gain"] > 3.0 * s["gain_se"] and min(s["target_final_per_seed"]) >= 0.9,
        ),
    )
}


def parse_seed_block(spec: str | list[str]) -> list[int]:
    """`A-B` (inclusive), `A` or a list of consecutive seeds (`A A+1 ...`) -> the block's seeds, consecutive and
    non-negative (the simulator draws seeds seed, seed+1, ...)."""
    parts = [spec] if isinstance(spec, str) else list(spec)
    seeds: list[int] = []
    for p in parts:
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", p.strip())
        if m is None:
            raise ValueError(f"--seeds: a block A-B (e.g. 1000-1009) or consecutive seeds, got {p!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--seeds: {p!r} ends before it starts")
        seeds.extend(range(lo, hi + 1))
    if not seeds or seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        raise ValueError(
            f"--seeds: the seeds must be consecutive (the simulator runs seed, seed+1, ...), got {spec!r}"
        )
    return seeds


def claim_overrides(claim: Claim, seeds: list[int], extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The run's overrides: the claim's, the block's seeds, then `extra` (e.g. a device)."""
    return [*claim.overrides, f"seed={seeds[0]}", f"n_seeds={len(seeds)}", *extra]


def measure(claim: Claim, metrics: dict, seeds: list[int]) -> dict[str, Any]:
    """The replication's result from a finished run's metrics: the claim, the block, the statistics, the rule and
    whether it holds."""
    stats = claim.statistics(metrics)
    return {
        "claim": claim.name,
        "statement": claim.statement,
        "where": claim.where,
        "preset": claim.preset,
        "overrides": list(claim.overrides),
        "chosen_on": claim.chosen_on,
        "reported_on": claim.reported_on,
        "documented": claim.documented,
        "seeds": seeds,
        "statistics": stats,
        "rule": claim.rule,
        "holds": bool(claim.holds(stats)),
    }


def replicate(
    name: str, seeds: list[int], out_dir: str | os.PathLike, extra: list[str] | tuple[str, ...] = (), progress=True
) -> dict:
    """Run claim `name` on `seeds` into DIR/run (`run_experiment`: config.yaml, metrics.json, alignment.png) and
    write DIR/replication.json (`measure`)."""
    from anchorft.io import write_json
    from anchorft.studies.w2s.experiments import run_experiment  # lazy: loads torch

    claim = CLAIMS[name]
    config = load_config(claim.preset, claim_overrides(claim, seeds, extra))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = f"anchorft w2s replicate {name} --seeds {seeds[0]}-{seeds[-1]} --out {out_dir}"
    metrics = run_experiment(config, out / "run", progress=progress, header=header)
    if metrics.get("diverged") is not None:
        raise RuntimeError(f"replicate {name}: the run diverged ({metrics['diverged']}); nothing to measure")
    result = measure(claim, metrics, seeds)
    write_json(out / "replication.json", result)
    return result


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def report_lines(result: dict) -> list[str]:
    """The replication as lines: each statistic beside the documented one, the rule, the outcome."""
    seeds = result["seeds"]
    lines = [
        f"claim {result['claim']}: {result['statement']}",
        f"  documented ({result['reported_on']}; settings chosen on {result['chosen_on']}): "
        + ", ".join(f"{k} {_fmt(v)}" for k, v in result["documented"].items()),
        f"  measured (seeds {seeds[0]}-{seeds[-1]}): "
        + ", ".join(f"{k} {_fmt(v)}" for k, v in result["statistics"].items()),
        f"  rule: {result['rule']}",
        f"  {'HOLDS' if result['holds'] else 'DOES NOT HOLD'} on seeds {seeds[0]}-{seeds[-1]}",
    ]
    return lines
