"""`anchorft analyze`: rotation, hidden-state drift, Fisher overlap and rank sensitivity of fine-tuned models.

`run_analysis(cfg)` validates every input first (checkpoints, architectures, rank, prompt files, results),
then computes, writes OUT/analysis.json, OUT/config.json and the PNGs, and returns the analysis dict.
The rotation part streams one matrix at a time from safetensors (memory bounded by the largest matrix);
drift and Fisher need forward / backward passes and load one model at a time.
"""

from __future__ import annotations

import re
import resource
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from anchorft import stop
from anchorft.analysis import plots
from anchorft.analysis.config import AnalysisConfig
from anchorft.analysis.drift import drift_metrics, prompt_hidden_means
from anchorft.analysis.fisher import fisher_overlap, fisher_projected_overlap
from anchorft.analysis.prompts import encode_batch, load_prompts
from anchorft.analysis.rank import load_results, rank_sensitivity
from anchorft.analysis.rotation import bases, rotation_stats
from anchorft.analysis.streaming import (
    TYPE_ORDER,
    CheckpointError,
    InMemoryWeights,
    WeightSource,
    check_compatible,
    layer_index,
    matrix_type,
    open_checkpoint,
)
from anchorft.dataclass_yaml import check_choices
from anchorft.eval.loading import load_causal_lm, load_eval_tokenizer
from anchorft.io import write_json
from anchorft.provenance import with_provenance

__all__ = ["AnalysisConfig", "run_analysis", "analyze_rotation", "summarize_rotation", "resolve_rank"]

_CURVE_KEYS = ("sv_ratio", "vec_angle_u_deg", "vec_angle_v_deg")


def resolve_rank(rank: int | None, shapes: dict[str, tuple[int, int]]) -> int:
    """The rank to use, checked against every matrix (ValueError naming the first one it exceeds)."""
    smallest = min(min(s) for s in shapes.values())
    if rank is None:
        return max(1, smallest // 4)
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    for name, (m, n) in shapes.items():
        if rank > min(m, n):
            raise ValueError(f"rank {rank} exceeds min(m, n) = {min(m, n)} of {name} ({m} x {n})")
    return rank


def _generator(seed: int, name: str) -> torch.Generator:
    """A generator per (seed, matrix): base and tuned get the same sketch in randomized SVD."""
    return torch.Generator().manual_seed(seed * 1_000_003 + sum(map(ord, name)) % 1_000_003)


def analyze_rotation(
    base: WeightSource,
    tuned: dict[str, WeightSource],
    names: list[str],
    k: int,
    svd: str = "exact",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    progress: bool = True,
    device: str = "cpu",
) -> dict[str, dict[str, dict]]:
    """{model: {matrix: rotation_stats}}. Matrix-major: one base matrix and one tuned matrix held at a time.

    The SVDs run on `device` (e.g. "cuda"); the weights are read on the CPU one matrix at a time.
    """
    out: dict[str, dict[str, dict]] = {mname: {} for mname in tuned}
    for name in tqdm(names, desc="rotation", leave=False, disable=not progress):
        stop.check_alone()  # a safe point per matrix (anchorft.stop)
        w0 = base.get(name).to(device)
        b0 = bases(w0, k, svd, dtype, _generator(seed, name))
        for mname, src in tuned.items():
            w = src.get(name).to(device)
            st = rotation_stats(w0, w, k, svd, dtype, _generator(seed, name), base_bases=b0)
            st.update(type=matrix_type(name), layer=layer_index(name), shape=list(w0.shape))
            out[mname][name] = st
            del w
        del w0, b0
    return out


def summarize_rotation(per_matrix: dict[str, dict], k: int) -> dict:
    """Per type (means), per (layer, type) grid of the mean U/V angle, curves per singular index, overall."""
    scalars = (
        "angle_u_mean_deg",
        "angle_u_max_deg",
        "angle_v_mean_deg",
        "angle_v_max_deg",
        "overlap_u",
        "overlap_v",
        "sv_rel_change",
        "weight_rel_change",
        "block_share_of_update",
    )
    by_type: dict[str, list[dict]] = defaultdict(list)
    cell: dict[tuple, list[float]] = defaultdict(list)
    for st in per_matrix.values():
        by_type[st["type"]].append(st)
        cell[(st["layer"], st["type"])].append((st["angle_u_mean_deg"] + st["angle_v_mean_deg"]) / 2)
    types = sorted(by_type, key=lambda t: (TYPE_ORDER.index(t) if t in TYPE_ORDER else 99, t))
    type_summary = {t: {s: sum(x[s] for x in by_type[t]) / len(by_type[t]) for s in scalars} for t in types}
    layers = sorted({st["layer"] for st in per_matrix.values() if st["layer"] is not None})
    if any(st["layer"] is None for st in per_matrix.values()):
        layers.append(None)  # the embeddings and the head, in a last row
    rows = ["emb/head" if li is None else str(li) for li in layers]
    grid_vals = [[_mean(cell.get((li, t))) for t in types] for li in layers]
    stats = list(per_matrix.values())
    curves = {
        "sv_rel_dev": [sum(abs(s["sv_ratio"][i] - 1) for s in stats) / len(stats) for i in range(k)],
        "vec_angle_deg": [sum(s["vec_angle_u_deg"][i] for s in stats) / len(stats) for i in range(k)],
    }
    overall = {s: sum(x[s] for x in stats) / len(stats) for s in scalars}
    return {
        "overall": overall,
        "by_type": type_summary,
        "grid": {"k": k, "rows": rows, "types": types, "values": grid_vals},
        "curves": curves,
    }


def _mean(xs: list[float] | None) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def run_analysis(cfg: AnalysisConfig, progress: bool = True) -> dict:
    """Validates the inputs, runs the analyses that `cfg` asks for, writes OUT/analysis.json and PNGs."""
    t_start = time.perf_counter()
    # ---- validation, before any work -------------------------------------------------------------
    if not cfg.tuned:
        raise ValueError("tuned: at least one --tuned NAME=DIR is needed")
    if "base" in cfg.tuned:
        raise ValueError("tuned: the name 'base' is reserved for the base checkpoint")
    check_choices(cfg)  # svd, svd_dtype
    for fname, low in (("fisher_samples", 1), ("fisher_random", 1), ("drift_prompts", 1), ("batch_size", 1)):
        if getattr(cfg, fname) < low:
            raise ValueError(f"{fname} must be >= {low}, got {getattr(cfg, fname)}")
    if cfg.max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {cfg.max_length}")
    base_cfg, base_src = open_checkpoint(cfg.base, "base")
    tuned_src: dict[str, WeightSource] = {}
    names: list[str] = []
    for mname, path in cfg.tuned.items():
        t_cfg, t_src = open_checkpoint(path, f"tuned {mname!r}")
        names = check_compatible(base_cfg, base_src, t_cfg, t_src, f"tuned {mname!r} ({path})")
        tuned_src[mname] = t_src
    if cfg.exclude:
        try:
            pattern = re.compile(cfg.exclude)
        except re.error as e:
            raise ValueError(f"exclude: not a regular expression ({e})") from None
        names = [n for n in names if not pattern.search(n)]
    if not names:
        raise CheckpointError(f"base checkpoint {cfg.base} has no 2-D weights left to analyse")
    shapes = {n: tuple(base_src.shape(n)) for n in names}
    k = resolve_rank(cfg.rank, shapes)
    fisher_ks = sorted({max(1, k // 4), max(1, k // 2), k} if cfg.fisher_ranks is None else set(cfg.fisher_ranks))
    if cfg.fisher_data is not None:
        for fk in fisher_ks:
            resolve_rank(fk, shapes)
    eval_sets = {}
    for p in cfg.prompts:
        stem = Path(p).stem
        if stem in eval_sets:
            raise ValueError(f"prompts: two evaluation sets are named {stem!r}")
        eval_sets[stem] = load_prompts(p, cfg.drift_prompts)
    fisher_items = load_prompts(cfg.fisher_data, cfg.fisher_samples) if cfg.fisher_data else None
    if cfg.fisher_ood_data and not cfg.fisher_data:
        raise ValueError("fisher_ood_data needs fisher_data (the in-domain data whose gradient F_ood projects)")
    ood_items = load_prompts(cfg.fisher_ood_data, cfg.fisher_samples) if cfg.fisher_ood_data else None
    results = load_results(cfg.compare) if cfg.compare else None
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", {**asdict(cfg), "resolved_rank": k, "fisher_ranks_resolved": fisher_ks}, indent=1)
    dtype = getattr(torch, cfg.svd_dtype)  # one of AnalysisConfig's choices, checked above
    analysis: dict = {
        "base": cfg.base,
        "tuned": cfg.tuned,
        "rank": k,
        "svd": cfg.svd,
        "svd_dtype": cfg.svd_dtype,
        "matrices": len(names),
        "largest_matrix": max(names, key=lambda n: shapes[n][0] * shapes[n][1]),
        "timings_s": {},
    }
    figures: list[str] = []
    # ---- rotation ---------------------------------------------------------------------------------
    t0 = time.perf_counter()
    if not cfg.streaming:  # the parameters of whole models loaded on the CPU instead (same numbers)
        base_src = InMemoryWeights.from_model(load_causal_lm(cfg.base))
        tuned_src = {m: InMemoryWeights.from_model(load_causal_lm(p)) for m, p in cfg.tuned.items()}
    per = analyze_rotation(base_src, tuned_src, names, k, cfg.svd, dtype, cfg.seed, progress, cfg.device)
    del base_src, tuned_src
    rot = {}
    for mname, pm in per.items():
        summ = summarize_rotation(pm, k)
        slim = {n: {key: v for key, v in st.items() if key not in _CURVE_KEYS} for n, st in pm.items()}
        rot[mname] = {**summ, "per_matrix": slim}
    analysis["rotation"] = rot
    analysis["timings_s"]["rotation"] = time.perf_counter() - t0
    analysis["peak_rss_mb_after_rotation"] = _peak_rss_mb()
    if cfg.plots:
        for mname in rot:
            figures.append(plots.rotation_heatmap(rot[mname]["grid"], mname, out / f"rotation_heatmap_{mname}.png"))
        figures.append(
            plots.rotation_comparison({m: r["by_type"] for m, r in rot.items()}, out / "rotation_by_type.png")
        )
        figures.append(
            plots.singular_value_change({m: r["curves"] for m, r in rot.items()}, out / "singular_values.png")
        )
    # ---- hidden-state drift -----------------------------------------------------------------------
    if eval_sets:
        t0 = time.perf_counter()
        tok = load_eval_tokenizer(cfg.base)
        model = load_causal_lm(cfg.base).to(cfg.device)
        base_h = {
            s: prompt_hidden_means(model, tok, items, cfg.batch_size, cfg.max_length, f"base/{s}")
            for s, items in eval_sets.items()
        }
        del model
        drift: dict[str, dict] = {s: {} for s in eval_sets}
        for mname, path in cfg.tuned.items():
            model = load_causal_lm(path).to(cfg.device)
            for s, items in eval_sets.items():
                h = prompt_hidden_means(model, tok, items, cfg.batch_size, cfg.max_length, f"{mname}/{s}")
                drift[s][mname] = drift_metrics(base_h[s], h)
            del model
        analysis["drift"] = {s: {"prompts": len(eval_sets[s]), "models": d} for s, d in drift.items()}
        analysis["timings_s"]["drift"] = time.perf_counter() - t0
        if cfg.plots:
            for s, d in drift.items():
                figures.append(plots.drift_plot(d, s, out / f"drift_{s}.png"))
    # ---- Fisher overlap ---------------------------------------------------------------------------
    if fisher_items:
        t0 = time.perf_counter()
        tok = load_eval_tokenizer(cfg.base)
        model = load_causal_lm(cfg.base).to(cfg.device)
        batches = [encode_batch(tok, [it], cfg.max_length, with_completion=True) for it in fisher_items]
        gen = torch.Generator().manual_seed(cfg.seed)
        fo = fisher_overlap(model, batches, names, fisher_ks, cfg.fisher_random, gen, cfg.svd, dtype, progress)
        analysis["fisher"] = {"samples": len(batches), "ranks": fisher_ks, **_summarize_fisher(fo, fisher_ks)}
        if ood_items:
            ood = [encode_batch(tok, [it], cfg.max_length, with_completion=True) for it in ood_items]
            gen = torch.Generator().manual_seed(cfg.seed)  # the same random blocks as the in-domain share
            fp = fisher_projected_overlap(
                model, batches, ood, names, fisher_ks, cfg.fisher_random, gen, cfg.svd, dtype, progress
            )
            analysis["fisher_projected"] = {
                "id_samples": len(batches),
                "ood_samples": len(ood),
                "ranks": fisher_ks,
                **_summarize_fisher(fp, fisher_ks),
            }
        del model
        analysis["timings_s"]["fisher"] = time.perf_counter() - t0
        if cfg.plots:
            figures.append(plots.fisher_plot(analysis["fisher"]["by_type"], out / "fisher_overlap.png"))
            if "fisher_projected" in analysis:
                fp_by_type = analysis["fisher_projected"]["by_type"]
                figures.append(plots.fisher_plot(fp_by_type, out / "fisher_projected_overlap.png"))
    # ---- rank sensitivity -------------------------------------------------------------------------
    if results is not None:
        full = max(min(s) for s in shapes.values())
        analysis["rank_sensitivity"] = rank_sensitivity(results, full)
        if cfg.plots and analysis["rank_sensitivity"]["points"]:
            figures.append(plots.rank_plot(analysis["rank_sensitivity"], out / "rank_sensitivity.png"))
    analysis["figures"] = [Path(f).name for f in figures]
    analysis["timings_s"]["total"] = time.perf_counter() - t_start
    analysis["peak_rss_mb"] = _peak_rss_mb()
    write_json(out / "analysis.json", with_provenance(analysis), indent=1)
    return analysis


def _summarize_fisher(fo: dict[str, dict], ks: list[int]) -> dict:
    """Per type: mean over matrices of each share; overall: energy-weighted share over all matrices."""
    by_type: dict[str, list[dict]] = defaultdict(list)
    for name, d in fo.items():
        by_type[matrix_type(name)].append(d)
    types = sorted(by_type, key=lambda t: (TYPE_ORDER.index(t) if t in TYPE_ORDER else 99, t))
    summary = {
        t: {
            key: {kk: sum(d[key][kk] for d in by_type[t]) / len(by_type[t]) for kk in ks}
            for key in ("share", "random_share", "expected_random")
        }
        for t in types
    }
    tot = sum(d["grad_energy"] for d in fo.values()) or 1e-300
    overall = {kk: sum(d["share"][kk] * d["grad_energy"] for d in fo.values()) / tot for kk in ks}
    return {"by_type": summary, "overall_energy_weighted": overall, "per_matrix": fo}
