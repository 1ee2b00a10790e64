"""WiSE-FT weight interpolation on the testbed (`anchorft toy interpolate`).

Wortsman et al., "Robust fine-tuning of zero-shot models" (WiSE-FT, CVPR 2022): for a base model W_0 and a
fine-tuned one W_ft, the models

    W(alpha) = W_0 + alpha (W_ft - W_0),     alpha in [0, 1]

trace a whole trade-off front from one fine-tune (alpha = 0 is the base, 1 the fine-tune), on every parameter.
`run_interpolate` scores W(alpha) from the saved models of a finished comparison on its own held-out and
validation items (`evaluate_comparison`) and writes runs named `RUN-wiseALPHA` (`settings.wise_from` /
`wise_alpha`) for `anchorft toy report --from`; docs/alternatives.md describes the command and its outputs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from anchorft.dataclass_yaml import read_yaml_mapping
from anchorft.eval.loading import load_causal_lm, load_tokenizer
from anchorft.runs import run_claimed
from anchorft.studies.grid import Cell, Grid, RayCluster, check_workers, executor_for
from anchorft.studies.testbed.layout import model_dir, run_dir
from anchorft.studies.testbed.report import write_report, write_tradeoff_plot
from anchorft.studies.testbed.results import CompareResults, load_results, save_results

__all__ = ["interpolate_weights", "run_interpolate", "parse_alphas", "wise_name", "interpolate_into"]


def interpolate_weights(
    w0: dict[str, torch.Tensor], w_ft: dict[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """W_0 + alpha (W_ft - W_0) for every tensor (WiSE-FT); the two state dicts must hold the same names and
    shapes (ValueError otherwise). Integer buffers are taken from W_ft unchanged."""
    if set(w0) != set(w_ft):
        raise ValueError(f"interpolate: the models differ in their tensors ({sorted(set(w0) ^ set(w_ft))[:3]} ...)")
    out = {}
    for k, a in w0.items():
        b = w_ft[k]
        if a.shape != b.shape:
            raise ValueError(f"interpolate: {k} has shape {tuple(a.shape)} and {tuple(b.shape)}")
        # torch.lerp: a + alpha (b - a), computed as b - (1 - alpha)(b - a) for alpha >= 0.5, so alpha = 1 is W_ft
        out[k] = torch.lerp(a, b.to(a.dtype), alpha) if a.is_floating_point() else b.clone()
    return out


def parse_alphas(text: str | list) -> list[float]:
    """'0.25,0.5,0.75' (or a list) -> sorted floats in (0, 1]; ValueError otherwise."""
    vals = text if isinstance(text, list) else [v for v in str(text).split(",") if v]
    try:
        alphas = sorted({float(v) for v in vals})
    except ValueError:
        raise ValueError(f"--alphas: expected numbers like 0.25,0.5,0.75, got {text!r}") from None
    if not alphas or any(not 0 < a <= 1 for a in alphas):
        raise ValueError(f"--alphas: each alpha must be in (0, 1], got {alphas}")
    return alphas


def wise_name(run: str, alpha: float) -> str:
    return f"{run}-wise{alpha:g}"


def run_interpolate(
    compare_dir: str | Path,
    runs: list[str],
    alphas: list[float],
    out_dir: str | Path,
    progress: bool = True,
    resume: bool = False,
    cluster: RayCluster | None = None,
    workers: int = 1,
) -> dict:
    """Evaluate W_0 + alpha (W_ft - W_0) for each run of the comparison in `compare_dir`, each of its seeds (its
    saved models) and each alpha; write results.json, report.md and tradeoff.png (with the curves) to `out_dir`.
    Each (run, seed, alpha) is a cell of the grid runner (`anchorft.studies.grid`, recorded in OUT/cells.jsonl;
    `resume` keeps the recorded ones), in this process (`workers` 1), in `workers` spawned processes, or, with
    `cluster`, as Ray tasks on it; each cell on the comparison's `threads`, so the results do not depend on where."""
    check_workers(workers)  # a bad value fails before anything is read
    from anchorft.studies.testbed.compare_config import load_config  # lazy: loads transformers

    src = Path(compare_dir)
    results = load_results(src).to_dict()
    if missing := [r for r in runs if r not in results["methods"]]:
        raise ValueError(f"--runs: {missing} not in {src} (have {sorted(results['methods'])})")
    saved = _saved_config(src)
    cfg = load_config(saved)
    seeds = [int(s) for s in results["settings"]["seeds"]]
    cells = []
    for run in runs:
        for m in results["methods"][run]["per_seed"]:
            path = model_dir(src, run, m["seed"], seeds[0])
            if not (path / "config.json").is_file():
                raise ValueError(f"{path}: no saved model (the comparison keeps every evaluated model in models/)")
            cells += [Cell(f"{wise_name(run, a)}-seed{m['seed']}", {"run": run, "model": str(path),
                                                                      "seed": m["seed"], "alpha": a})
                      for a in alphas]  # fmt: skip
    out = CompareResults(base=results["base"], settings=results["settings"])
    dst = Path(out_dir)
    grid = Grid(dst, context={"compare": str(src.resolve()), "config": saved, "base": results["base"]})
    job = functools.partial(_interpolated_cell, cfg, str(src / "models" / "base"), str(dst))
    got = grid.run(
        cells,
        job,
        executor_for(workers, cfg.threads, cluster),
        resume=resume,
        progress=progress,
        desc="toy interpolate",
    )
    for run in runs:
        source = results["methods"][run]
        for alpha in alphas:
            name = wise_name(run, alpha)
            per = sorted((got[c.name] for c in cells if c.spec["run"] == run and c.spec["alpha"] == alpha),
                         key=lambda m: m["seed"])  # fmt: skip
            settings = {**source.get("settings", {}), "wise_from": run, "wise_alpha": alpha}
            out.record(name, source["method"], settings, per)
    save_results(out, dst / "results.json")
    write_report(out.to_dict(), dst / "report.md")
    # the plot shows the sources too, so that each curve runs base -> alphas -> the fine-tune
    shown = {**out.to_dict(), "methods": {**{r: results["methods"][r] for r in runs}, **out.methods}}
    write_tradeoff_plot(shown, dst / "tradeoff.png")
    return out.to_dict()


def _interpolated_cell(cfg, base_dir: str, out: str, cell) -> dict:
    """One cell: the base and the cell's fine-tuned model mixed at the cell's alpha, evaluated as the comparison
    evaluates (its items and settings), its per-item grades in OUT/runs/RUN-wiseA-seedS/scored_items.json as a
    comparison's fine-tune writes them (so that `toy verdict` judges it)."""
    from anchorft.studies.testbed.compare import evaluate_and_score  # lazy: loads transformers
    from anchorft.studies.testbed.compare_config import comparison_sets  # lazy: loads transformers

    tok = load_tokenizer(base_dir)
    model = load_causal_lm(base_dir)
    w0 = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ft = load_causal_lm(cell.spec["model"]).state_dict()
    model.load_state_dict(interpolate_weights(w0, ft, cell.spec["alpha"]))
    sets = comparison_sets(cfg)  # built once per worker process
    name, seed = wise_name(cell.spec["run"], cell.spec["alpha"]), cell.spec["seed"]
    folder = run_dir(out, name, seed)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = evaluate_and_score(cfg, model, tok, sets, folder)
    metrics.update(seed=cell.spec["seed"], train_seconds=0.0)
    return metrics


def _saved_config(compare_dir: Path) -> dict:
    """The comparison's resolved configuration (its config.yaml) as a mapping, without the runs (not needed)."""
    path = compare_dir / "config.yaml"
    if not path.is_file():
        raise ValueError(f"{path} not found: not a `toy compare` folder")
    data = read_yaml_mapping(path, "toy compare config")
    data["runs"] = [{"name": "unused", "method": "sft"}]
    return json.loads(json.dumps(data))


def interpolate_into(
    compare: str | Path,
    runs: list[str],
    alphas: str | list,
    out: str | Path,
    overwrite: bool = False,
    cluster: RayCluster | None = None,
    workers: int = 1,
) -> dict | None:
    """`anchorft toy interpolate`: `run_interpolate` in the folder `out`, claimed for (the comparison, the runs, the
    alpha grid; not the workers, which change where the cells run, not their results); a rerun resumes it, a
    finished one is reused (None)."""
    grid = parse_alphas(alphas)
    spec = {"compare": str(Path(compare).resolve()), "runs": runs, "alphas": grid}
    return run_claimed(
        out, "toy interpolate", spec,
        lambda claim: run_interpolate(compare, runs, grid, out, resume=claim.resume, cluster=cluster, workers=workers),
        overwrite=overwrite,
    )  # fmt: skip
