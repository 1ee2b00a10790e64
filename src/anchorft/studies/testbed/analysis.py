"""The testbed's prompt sets (`anchorft.toy`) as JSONL files, for `anchorft analyze --testbed`.

The evaluation sets are the comparison's own: `anchorft.studies.testbed.compare_config.comparison_eval_sets` of the
comparison's `config.yaml` (its id_skill, eval_seed, id_items, ood_items), so the drift is measured on
exactly the items that comparison scored, item by item. Without a comparison, the same function on the
default comparison config with `n_items` items per set and eval_seed = `seed`. The Fisher data are
training-split items (prompt + completion) of the fine-tuning skill (`id_skill`). Files are written to
a directory so that the analysis reads them like any user's JSONL.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import numpy as np

from anchorft.analysis.config import AnalysisConfig
from anchorft.dataclass_flags import parse_named
from anchorft.io import write_jsonl
from anchorft.preflight import resolve_model_folder
from anchorft.runs import run_claimed
from anchorft.studies.testbed.layout import first_seed_models
from anchorft.toy import skills as sk

__all__ = ["testbed_eval_sets", "testbed_prompt_files", "testbed_ood_fisher_file", "analyze_into", "analysis_summary"]


def _rows(items) -> list[dict]:
    return [{"prompt": it.prompt, "completion": it.answer, "skill": it.skill, "key": it.key} for it in items]


def testbed_eval_sets(n_items: int = 64, seed: int = 0, compare_dir: str | os.PathLike | None = None):
    """(comparison config, {skill: items}): the evaluation sets of the comparison in `compare_dir`.

    Without `compare_dir` (or without its config.yaml): the default comparison config with `n_items`
    items per set and eval_seed = `seed`."""
    try:
        # lazy: loads torch
        from anchorft.studies.testbed.compare_config import CompareConfig, comparison_eval_sets, load_config
        from anchorft.toy.evaluate import EvalSettings  # lazy: loads torch
    except ImportError as e:  # the testbed is optional for the analysis
        raise ValueError(f"--testbed: the testbed (anchorft.toy) is not available: {e}") from None
    cfg_path = Path(compare_dir) / "config.yaml" if compare_dir is not None else None
    if cfg_path is not None and cfg_path.is_file():
        cfg = load_config(str(cfg_path))
    else:
        cfg = CompareConfig(eval=EvalSettings(id_items=n_items, ood_items=n_items), eval_seed=seed)
    return cfg, comparison_eval_sets(cfg)


def testbed_prompt_files(
    out_dir: str | os.PathLike, n_items: int = 64, seed: int = 0, compare_dir: str | os.PathLike | None = None
) -> tuple[list[str], str]:
    """Writes id_<id_skill>.jsonl and ood_<skill>.jsonl (the comparison's evaluation sets) and
    fisher_<id_skill>.jsonl (`n_items` train-split items drawn with numpy's generator seeded by `seed`).

    Returns (evaluation-set files, Fisher data file)."""
    cfg, sets = testbed_eval_sets(n_items, seed, compare_dir)
    out = Path(out_dir)
    files = []
    for skill, items in sets.items():
        path = out / f"{'id' if skill == cfg.id_skill else 'ood'}_{skill}.jsonl"
        write_jsonl(path, _rows(items))
        files.append(str(path))
    train = sk.sample_items(cfg.id_skill, n_items, "train", np.random.default_rng(seed))
    fisher = out / f"fisher_{cfg.id_skill}.jsonl"
    write_jsonl(fisher, _rows(train))
    return files, str(fisher)


def testbed_ood_fisher_file(
    out_dir: str | os.PathLike, n_items: int = 64, seed: int = 0, compare_dir: str | os.PathLike | None = None
) -> str:
    """Writes fisher_ood.jsonl: `n_items` train-split items (prompt + answer) spread evenly over the comparison's
    OOD skills, drawn with numpy's generator seeded by `seed` + 1: the OOD loss whose empirical Fisher projects
    the in-domain gradient (`anchorft.analysis.fisher.fisher_projected_overlap`)."""
    cfg, sets = testbed_eval_sets(n_items, seed, compare_dir)
    ood_skills = [s for s in sets if s != cfg.id_skill]
    rng = np.random.default_rng(seed + 1)
    per = -(-n_items // len(ood_skills))
    items = [it for s in ood_skills for it in sk.sample_items(s, per, "train", rng)]
    order = rng.permutation(len(items))[:n_items]
    path = Path(out_dir) / "fisher_ood.jsonl"
    write_jsonl(path, _rows([items[int(i)] for i in order]))
    return str(path)


def _models(spec: dict) -> tuple[str | None, dict[str, str]]:
    """(base, {name: tuned}) named by `anchorft analyze`'s flags: --base and --tuned NAME=DIR, else a comparison's
    (--compare DIR: DIR/models/base and the first seed of each run, in results.json's order)."""
    tuned = parse_named(spec["tuned"], "--tuned")
    base, compare = spec["base"], spec["compare"]
    if compare and (base is None or not tuned):
        models = Path(compare) / "models"
        if base is None and (models / "base").is_dir():
            base = str(models / "base")
        if not tuned and models.is_dir():
            found = {n: str(d) for n, d in first_seed_models(compare).items()}
            results = Path(compare) / "results.json"
            order = list(json.loads(results.read_text()).get("methods", {})) if results.is_file() else []
            tuned = {n: found[n] for n in order if n in found} | {n: p for n, p in found.items() if n not in order}
    return base, tuned


def analyze_into(out: str | os.PathLike, spec: dict, overwrite: bool = False) -> dict | None:
    """`anchorft analyze`: `run_analysis` in the folder `out`, claimed for the command's settings `spec` (its flags,
    AnalysisConfig's fields among them); the models resolved (`_models`, a hub id to its cached snapshot) and, with
    `testbed`, the testbed's prompt sets and Fisher data written into the folder."""
    from anchorft.analysis import run as analysis_run  # lazy: loads torch; module.function: a test may stand in

    def work(claim) -> dict:
        base, tuned = _models(spec)
        if base is None:
            raise ValueError("--base is required (or --compare DIR with DIR/models/base)")
        base = resolve_model_folder(base, "--base")  # a folder, or a hub id's snapshot in the hub cache
        tuned = {n: resolve_model_folder(d, f"--tuned {n}") for n, d in tuned.items()}
        values = dict(spec)
        prompts = list(spec["prompts"])
        if spec["testbed"]:
            folder = Path(out) / "testbed_prompts"
            tb_sets, tb_fisher = testbed_prompt_files(folder, seed=spec["seed"], compare_dir=spec["compare"])
            prompts += tb_sets
            if values["fisher_data"] is None:
                values["fisher_data"] = tb_fisher
            if values["fisher_ood_data"] is None:
                values["fisher_ood_data"] = testbed_ood_fisher_file(
                    folder, seed=spec["seed"], compare_dir=spec["compare"]
                )
        names = {f.name for f in fields(AnalysisConfig)} - {"base", "tuned", "prompts", "streaming", "plots", "out"}
        cfg = {k: values[k] for k in names if k in values}
        return analysis_run.run_analysis(AnalysisConfig(
            **cfg, out=str(out), base=base, tuned=tuned, prompts=prompts, streaming=not spec["in_memory"],
            plots=not spec["no_plots"],
        ))  # fmt: skip

    return run_claimed(out, "analyze", spec, work, overwrite=overwrite)


def analysis_summary(res: dict, out: Path) -> list[str]:
    """A few lines a person reads: per model the top-k subspaces' mean turn and the weights' change (means over
    matrices); the numbers in full are in analysis.json."""
    lines = [f"top-{res['rank']} subspaces of each matrix against the base (means over matrices):"]
    width = max((len(m) for m in res["rotation"]), default=0)
    for m, r in res["rotation"].items():
        o = r["overall"]
        turn = (o["angle_u_mean_deg"] + o["angle_v_mean_deg"]) / 2
        lines.append(
            f"  {m:<{width}}  turned {turn:5.2f} deg (max {max(o['angle_u_max_deg'], o['angle_v_max_deg']):.2f}), "
            f"weights changed {100 * o['weight_rel_change']:.2f} %, "
            f"{100 * o['block_share_of_update']:.0f} % of the update inside the block"
        )
    parts = [p for p in ("drift", "fisher", "rank_sensitivity") if p in res]
    lines.append(f"also: {', '.join(parts) or 'rotation only'}; {len(res['figures'])} figures")
    lines.append(f"wrote {out / 'analysis.json'} (every number) and the figures in {out}")
    return lines
