"""The RL column of the testbed comparison: DAPO from each fine-tuned model, then the same evaluation.

Runs after `anchorft toy compare --out COMPARE_DIR`: DAPO (`anchorft.rpsft.rl.run_rl`) from each chosen
COMPARE_DIR/models/NAME on training-split prompts of the testbed's ID math skills, each model evaluated before
and after RL with `evaluate_toy` on the comparison's own held-out items and sampling stream. docs/toy-rl.md
gives the defaults, the reward and the files written under COMPARE_DIR/rl/.

The question it answers (the paper's claim): does the RPSFT-initialised model end higher
after RL, in ID and OOD, than the SFT-initialised one?
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from anchorft.eval.answers import last_boxed
from anchorft.io import pyplot, save_figure, write_json, write_text
from anchorft.provenance import with_provenance
from anchorft.studies.grid import Cell, Grid, RayCluster, executor_for
from anchorft.studies.testbed.compare_config import CompareConfig, comparison_eval_sets, load_config, paper_rank
from anchorft.studies.testbed.layout import parse_model_name
from anchorft.studies.testbed.report import _pct  # the testbed tables' one percentage format
from anchorft.studies.testbed.results import load_results
from anchorft.studies.testbed.rl_stage_config import RLStageSettings
from anchorft.toy import skills as sk
from anchorft.toy.evaluate import evaluate_toy, greedy_accuracy

__all__ = ["RLStageSettings", "compare_entry", "default_methods", "rl_prompts", "run_rl_stage"]


def default_methods(results: dict, cfg: CompareConfig) -> list[str]:
    """``sft`` and every rpsft run at the paper's rank (scaled to the testbed's hidden size)."""
    k = paper_rank(cfg.pretrain.hidden_size)
    rpsft = [
        n
        for n, m in results["methods"].items()
        if m.get("method") == "rpsft" and m.get("settings", {}).get("anchor_rank") == k
    ]
    if "sft" not in results["methods"] or not rpsft:
        raise ValueError(
            f"methods: the comparison needs 'sft' and an rpsft run at the paper rank k={k} for the default; "
            f"pass methods from {sorted(results['methods'])}"
        )
    return ["sft", *rpsft]


def compare_entry(results: dict, name: str, first_seed: int) -> dict | None:
    """The comparison's metrics of the model COMPARE_DIR/models/NAME, or None if it has none.

    The comparison saves a run's first fine-tuning seed as models/RUN and seed S as models/RUN-seedS
    (`anchorft.studies.testbed.compare`); the entry is that seed's row of ``per_seed`` (``base``: the base row)."""
    if name == "base":
        return results["base"]
    run, seed = parse_model_name(name, first_seed, set(results["methods"]))
    row = results["methods"].get(run)
    if row is None:
        return None
    rows = row.get("per_seed") or [{**row, "seed": first_seed}]
    return next((e for e in rows if e.get("seed") == seed), None)


def rl_prompts(skills: Sequence[str], n: int, rng: np.random.Generator) -> list[dict]:
    """`n` training-split prompts {"prompt", "answer"} over `skills` (round robin); answer = the
    content of the gold \\boxed{} (graded by math-verify in `boxed_math_reward`)."""
    per = [sk.sample_items(s, -(-n // len(skills)), "train", rng) for s in skills]
    items = [it for group in zip(*per) for it in group][:n]
    return [{"prompt": it.prompt, "answer": last_boxed(it.answer)} for it in items]


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def run_rl_stage(
    compare_dir: str | Path,
    out_dir: str | Path | None = None,
    methods: Sequence[str] | None = None,
    settings: RLStageSettings | None = None,
    progress: bool = True,
    resume: bool = False,
    cluster: RayCluster | None = None,
) -> dict:
    """DAPO from each chosen model of a finished comparison, evaluated before and after with the
    comparison's own evaluation; writes results.json, report.md, reward_curve.png under
    `out_dir` (default COMPARE_DIR/rl) and returns the results. Each model is a cell of the grid runner
    (`anchorft.studies.grid`), in this process or, with `cluster`, a Ray task on it; `resume` keeps the cells
    recorded in OUT/cells.jsonl."""

    settings = settings or RLStageSettings()
    settings.validate()
    cdir = Path(compare_dir)
    for f in ("results.json", "config.yaml"):
        if not (cdir / f).is_file():
            raise ValueError(f"compare_dir: {cdir / f} missing (run `anchorft toy compare --out {cdir}` first)")
    compare_results = load_results(cdir).to_dict()
    cfg = load_config(str(cdir / "config.yaml"))
    methods = list(methods) if methods else default_methods(compare_results, cfg)
    first_seed = cfg.seeds[0]
    for name in methods:
        if compare_entry(compare_results, name, first_seed) is None:
            raise ValueError(
                f"methods: {name!r} not in {cdir / 'results.json'}; have {sorted(compare_results['methods'])} "
                f"(seed S of a run: RUN-seedS)"
            )
        if not (cdir / "models" / name / "config.json").is_file():
            raise ValueError(f"methods: no model at {cdir / 'models' / name}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods: duplicates in {methods}")
    skills = tuple(settings.prompt_skills) or (cfg.id_skill,)
    out = Path(out_dir) if out_dir is not None else cdir / "rl"
    out.mkdir(parents=True, exist_ok=True)

    prompts = rl_prompts(skills, settings.n_prompts, np.random.default_rng(settings.prompt_seed))
    eval_sets = comparison_eval_sets(cfg)  # exactly the comparison's held-out items
    skill_sets = {
        s: sk.sample_items(s, settings.skill_eval_items, "eval", np.random.default_rng(cfg.eval_seed + 1), unique=True)
        for s in skills
    } if settings.skill_eval_items else {}  # fmt: skip

    results: dict = {
        "compare_dir": str(cdir),
        "settings": {**dataclasses.asdict(settings), "prompt_skills": list(skills),
                     "dapo": settings.rl_settings().dapo_settings()},
        "eval": {"id_skill": cfg.id_skill, "eval_seed": cfg.eval_seed, **dataclasses.asdict(cfg.eval),
                 "id_items": len(eval_sets[cfg.id_skill]), "ood_items": {s: len(eval_sets[s]) for s in sk.OOD_SKILLS}},
        "methods": {},
    }  # fmt: skip

    def record(cell: Cell, row: dict) -> None:
        name = cell.name
        row = {**row, "in_compare": {k: compare_entry(compare_results, name, first_seed).get(k)
                                     for k in ("id_greedy", "id_avg@k", "ood_mean")}}  # fmt: skip
        results["methods"][name] = row
        write_json(out / "results.json", results, indent=2)
        tqdm.write(
            f"{name}: reward {row['reward_first_quarter']:.3f} -> {row['reward_last_quarter']:.3f}; id_greedy "
            f"{row['before']['id_greedy']:.3f} -> {row['after']['id_greedy']:.3f}; ood_mean "
            f"{row['before']['ood_mean']:.3f} -> {row['after']['ood_mean']:.3f}"
        )

    # one grid cell per model (recorded in OUT/cells.jsonl; `resume` keeps the recorded ones), on the command's
    # thread count
    cells = [Cell(name, {"model": str(cdir / "models" / name)}) for name in methods]
    context = {"compare": str(cdir.resolve()), "settings": results["settings"], "eval": results["eval"]}
    job = functools.partial(_rl_cell, cfg, settings, prompts, eval_sets, skill_sets, str(out))
    executor = executor_for(1, torch.get_num_threads(), cluster)
    Grid(out, context).run(cells, job, executor, resume=resume, progress=progress, desc="toy rl", on_result=record)
    results["methods"] = {n: results["methods"][n] for n in methods}
    write_json(out / "results.json", with_provenance(results), indent=2)
    write_rl_report(results, out / "report.md")
    write_reward_plot(results, out / "reward_curve.png")
    return results


def _rl_cell(cfg, settings: RLStageSettings, prompts, eval_sets: dict, skill_sets: dict, out: str, cell) -> dict:
    """One model of the RL stage: evaluated, trained with DAPO, evaluated again; its row of results.json."""
    from anchorft.eval.loading import load_causal_lm, load_tokenizer
    from anchorft.rpsft.rl import run_rl  # lazy: loads TRL

    model_dir = Path(cell.spec["model"])
    tok = load_tokenizer(model_dir)
    before = _evaluate(cfg, eval_sets, skill_sets, load_causal_lm(model_dir), tok)
    m = run_rl(str(model_dir), prompts, Path(out) / cell.name, settings.rl_settings(), tokenizer=tok)
    after = _evaluate(cfg, eval_sets, skill_sets, m["model"], tok)
    curve = [float(x) for x in m["correctness"]]
    q = max(1, len(curve) // 4)
    return {
        "before": before,
        "after": after,
        "reward_curve": curve,
        "reward_first_quarter": float(np.mean(curve[:q])) if curve else None,
        "reward_last_quarter": float(np.mean(curve[-q:])) if curve else None,
    }


def _evaluate(cfg, eval_sets: dict, skill_sets: dict, model, tok) -> dict:
    """The comparison's evaluation of `model` (its items, settings and generator seed), plus greedy accuracy on
    the RL prompts' skills."""
    model.eval()
    gen = torch.Generator().manual_seed(cfg.eval_seed)
    res = evaluate_toy(model, tok, eval_sets, cfg.eval, gen, id_skill=cfg.id_skill)
    res["rl_skills_greedy"] = {
        s: greedy_accuracy(model, tok, items, 256, cfg.eval.max_new_tokens) for s, items in skill_sets.items()
    }
    return res


def _arrow(before: float, after: float) -> str:
    return f"{_pct(before)} -> {_pct(after)} ({100 * (after - before):+.1f})"


def write_rl_report(results: dict, path: Path) -> None:
    """Markdown table: per method ID (greedy, Avg@k) and OOD mean before -> after RL, with the change."""
    ev = results["eval"]
    n_id, n_ood = ev["id_items"], sum(ev["ood_items"].values())
    skills = results["settings"]["prompt_skills"]
    lines = [
        "# RL column of the testbed comparison (DAPO after fine-tuning)",
        "",
        f"Comparison: `{results['compare_dir']}`. RL prompts: training split of {', '.join(skills)}; "
        f"DAPO {results['settings']['steps']} steps, lr {results['settings']['learning_rate']:g}, "
        f"{results['settings']['prompts_per_step']} prompts x {results['settings']['num_generations']} "
        f"generations a step. Evaluation: the comparison's own items (ID = {ev['id_skill']}, {n_id} items, "
        f"n = {ev['n_samples']}, k = {ev['k']}; OOD = 6 skills, {n_ood} items). Values in %, change in points.",
        "",
        "| method | reward first -> last quarter | ID greedy before -> after RL | ID avg@k before -> after RL "
        "| OOD mean before -> after RL | " + " | ".join(f"{s} greedy before -> after" for s in skills) + " |",
        "|---" * (5 + len(skills)) + "|",
    ]
    for name, m in results["methods"].items():
        b, a = m["before"], m["after"]
        cells = [
            name,
            f"{_pct(m['reward_first_quarter'])} -> {_pct(m['reward_last_quarter'])}",
            _arrow(b["id_greedy"], a["id_greedy"]),
            _arrow(b["id_avg@k"], a["id_avg@k"]),
            _arrow(b["ood_mean"], a["ood_mean"]),
            *[
                _arrow(b["rl_skills_greedy"][s], a["rl_skills_greedy"][s])
                for s in skills
                if s in b["rl_skills_greedy"]
            ],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    names = list(results["methods"])
    if "sft" in names and len(names) > 1:
        s = results["methods"]["sft"]["after"]
        lines += [
            "",
            "After RL, against SFT -> RL (difference in points; 2 SE = two binomial standard errors of the"
            " difference):",
            "",
        ]
        for name in names:
            if name == "sft":
                continue
            r = results["methods"][name]["after"]
            for key, n, label in (("id_greedy", n_id, "ID greedy"), ("ood_mean", n_ood, "OOD mean")):
                d = r[key] - s[key]
                se2 = 2 * math.sqrt(_se(r[key], n) ** 2 + _se(s[key], n) ** 2)
                verdict = "higher" if d > se2 else "lower" if d < -se2 else "within noise"
                lines.append(f"- {name} vs sft, {label}: {100 * d:+.1f} (2 SE {100 * se2:.1f}): {verdict}")
    write_text(path, "\n".join(lines) + "\n")


def write_reward_plot(results: dict, path: Path) -> None:
    """Per-step mean correctness of the sampled responses, raw (faint) and a 10-step moving mean."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, m in results["methods"].items():
        r = np.asarray(m["reward_curve"], dtype=float)
        if r.size == 0:
            continue
        steps = np.arange(1, r.size + 1)
        (line,) = ax.plot(steps, r, alpha=0.25)
        w = min(10, r.size)
        smooth = np.convolve(r, np.ones(w) / w, mode="valid")
        ax.plot(steps[w - 1 :], smooth, color=line.get_color(), label=f"{name} ({w}-step mean)")
    ax.set_xlabel("DAPO step")
    ax.set_ylabel("mean reward (correct fraction)")
    ax.set_title("RL after fine-tuning: reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
