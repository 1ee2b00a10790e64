"""The method comparison on the testbed: base, sft, dft, iw_sft, l2 and rpsft (rank / lambda sweeps).

Orchestration only: the configuration is `anchorft.studies.testbed.compare_config`, the results file
`anchorft.studies.testbed.results`, the loop the grid runner (`anchorft.studies.grid`).

Every fine-tune goes through `anchorft.rpsft.train.train` (the `anchorft train` code path) with a
prompt/completion `datasets.Dataset` of the hard math distribution; every model is evaluated with
`anchorft.toy.evaluate.evaluate_toy` on the same held-out items. Writes, under `out_dir`:
config.yaml, results.json, report.md, tradeoff.png, models/NAME/ (seed 0; other seeds in
models/NAME-seedS/) and runs/NAME-seedS/ (the trainer's own config, metrics.json, training.png, and
scored_items.json: the keys of the items each of its scores was computed on, per split and skill; the base's
in runs/base/).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from anchorft.errors import one_line
from anchorft.eval.loading import quiet_model_bars
from anchorft.io import write_json, write_text
from anchorft.rpsft.methods import METHODS, get_method
from anchorft.runs import run_claimed
from anchorft.studies.grid import Cell, Grid, RayCluster, check_workers, executor_for
from anchorft.studies.testbed.compare_config import (
    CompareConfig,
    RunSpec,
    comparison_sets,
    evaluate_comparison,
    expand_sweeps,
    load_config,
    per_base,
    plumbing_only,
)
from anchorft.studies.testbed.layout import base_folder, model_dir, run_dir
from anchorft.studies.testbed.report import write_report, write_tradeoff_plot
from anchorft.studies.testbed.results import RESULTS_FILE, CompareResults, load_results, save_results
from anchorft.threads import pinned_threads
from anchorft.toy import skills as sk
from anchorft.toy.pretrain import cached_model, pretrained_model

__all__ = ["finetune_dataset", "calibration_fisher", "run_compare", "compare_into"]


def finetune_dataset(n: int, rng: np.random.Generator, skill: str = "math_hard") -> datasets.Dataset:
    """The fine-tuning set: `n` prompt/completion pairs of the hard math distribution (train split)."""
    items = sk.sample_items(skill, n, "train", rng)
    return datasets.Dataset.from_list([{"prompt": it.prompt, "completion": it.answer} for it in items])


def calibration_fisher(cfg: CompareConfig, run: RunSpec, model, tokenizer) -> dict[str, torch.Tensor]:
    """{name: F_ood G} on `model` (the base) for a fisher:F run: G from `cfg.calibration_items` training-split
    items of the fine-tuning distribution, F_ood from as many training-split items spread over the OOD skills
    (never the evaluation or validation items); fixed generators, so every seed and process gets the same ranks."""
    from anchorft.rpsft.anchor import select_parameters
    from anchorft.rpsft.anchor_plan import select_layers
    from anchorft.rpsft.calibration import encode_example, fisher_gradient_product

    n = cfg.calibration_items
    rng = np.random.default_rng(cfg.eval_seed + 2)
    id_items = sk.sample_items(cfg.id_skill, n, "train", rng)
    per = -(-n // len(sk.OOD_SKILLS))
    ood_items = [it for s in sk.OOD_SKILLS for it in sk.sample_items(s, per, "train", rng)]
    ood_items = [ood_items[int(i)] for i in rng.permutation(len(ood_items))[:n]]

    def batches(items):  # one example per batch: F_ood needs per-example gradients
        return [encode_example(tokenizer, it.prompt, it.answer, 64) for it in items]

    targets = run.anchor_targets or cfg.anchor_targets
    emb = cfg.anchor_include_embeddings if run.anchor_include_embeddings is None else run.anchor_include_embeddings
    names = select_layers([n for n, _ in select_parameters(model, targets, emb)], run.anchor_layers)
    return fisher_gradient_product(model, batches(id_items), batches(ood_items), names, progress=False)


def _train_args(cfg: CompareConfig, run: RunSpec, seed: int, out: Path):
    from anchorft.rpsft.config import RPSFTConfig  # lazy: loads TRL

    def pick(name):
        v = getattr(run, name)
        return getattr(cfg, name) if v is None else v

    kw = dict(
        output_dir=str(out),
        method=run.method,
        learning_rate=pick("learning_rate"),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=1,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-7,
        seed=seed,
        data_seed=seed,
        logging_steps=max(1, cfg.max_steps // 10),
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        max_length=64,
        dataloader_num_workers=0,
        anchor_lambda=pick("anchor_lambda"),
        anchor_targets=pick("anchor_targets"),
        anchor_include_embeddings=pick("anchor_include_embeddings"),
    )
    method = get_method(run.method)
    if method.uses_rank:
        if run.anchor_rank:
            kw["anchor_rank"] = run.anchor_rank
        for name in ("anchor_rank_rule", "anchor_memory", "anchor_lambda_rest", "anchor_kind"):
            if getattr(run, name) is not None:
                kw[name] = getattr(run, name)
    if run.anchor_layers is not None:
        kw["anchor_layers"] = run.anchor_layers
    if method.peft == "lora":
        rank = run.lora_rank or cfg.lora_rank or max(1, cfg.pretrain.hidden_size // 4)
        kw.update(lora_rank=rank, lora_alpha=float(run.lora_alpha or 2 * rank))
        if run.anchor_rank:  # the adapter anchor (lora + anchor)
            kw.update(lora_anchor=True, anchor_rank=run.anchor_rank, anchor_kind=run.anchor_kind or "block")
    elif method.peft == "osf":
        kw["anchor_rank"] = run.anchor_rank  # OSF's effective_rank
    if method.needs_reference:
        kw["iw_ref_model"] = "copy"
    return RPSFTConfig(**kw)


def _finetune_and_evaluate(cfg: CompareConfig, run: RunSpec, seed: int, base_dir: Path, out: Path):
    """One job of the comparison: fine-tune `run` at `seed` from the base model, evaluate, save the model.

    Everything it uses is rebuilt from its arguments (same seed, same result, whichever process runs it; the grid's
    executor pins its threads). Returns (run name, seed, metrics)."""
    return _finetune_job(cfg, run, seed, base_dir, out)


def _finetune_cell(cfg: CompareConfig, base_dir: Path, out: Path, cell: Cell) -> dict:
    """The grid's cell function (top level: worker processes are spawned): the cell's run and seed, fine-tuned and
    evaluated; the metrics."""
    run = next(r for r in cfg.runs if r.name == cell.spec["run"]["name"])
    return _finetune_and_evaluate(cfg, run, cell.spec["seed"], base_dir, out)[2]


def _finetune_job(cfg: CompareConfig, run: RunSpec, seed: int, base_dir: Path, out: Path):
    from anchorft.eval.loading import load_causal_lm, load_tokenizer
    from anchorft.rpsft.train import train  # lazy: loads TRL

    tok = load_tokenizer(str(base_dir))
    data = finetune_dataset(cfg.finetune_items, np.random.default_rng(1000 + seed), cfg.id_skill)
    args = _train_args(cfg, run, seed, run_dir(out, run.name, seed))
    model = load_causal_lm(base_dir)
    needs_fisher = get_method(run.method).uses_rank and (run.anchor_rank_rule or "").startswith("fisher:")
    fisher = calibration_fisher(cfg, run, model, tok) if needs_fisher else None
    t0 = time.perf_counter()
    trainer = train(args, model, data, tokenizer=tok, anchor_fisher=fisher)
    seconds = time.perf_counter() - t0
    sets = comparison_sets(cfg)  # built once per worker process
    saved = model_dir(out, run.name, seed, cfg.seeds[0])
    metrics = _evaluate_and_save(cfg, trainer.model, tok, sets, Path(args.output_dir), saved)
    metrics.update(seed=seed, train_seconds=seconds)
    return run.name, seed, metrics


def evaluate_and_score(cfg: CompareConfig, model, tok, sets: tuple[dict, dict], run_dir: Path) -> dict:
    """`evaluate_comparison` of `model` on the (reported, validation) `sets`; writes run_dir/scored_items.json,
    {"reported": {skill: [item keys]}, "val": {skill: [item keys]}} (the items its scores were computed on) and
    "scores": {"reported": {skill: per-item scores}, "val": {...}} (`evaluate_prompts`' "per_item": greedy 0/1
    and, for the ID skill, correct samples of n; in the keys' order), the data a paired comparison resamples
    (`anchorft.studies.testbed.verdict`). The returned metrics carry no per-item scores."""
    metrics = evaluate_comparison(model, tok, cfg, *sets, per_item=True)
    scores = {"reported": metrics.pop("per_item")}
    if "val" in metrics:
        scores["val"] = metrics["val"].pop("per_item")
    keys = {split: {s: [it.key for it in items] for s, items in part.items()} for split, part in
            zip(("reported", "val"), sets)}  # fmt: skip
    write_json(run_dir / "scored_items.json", {**keys, "scores": scores}, indent=1)
    return metrics


def _evaluate_and_save(cfg: CompareConfig, model, tok, sets: tuple[dict, dict], run_dir: Path, save_dir: Path) -> dict:
    """`evaluate_and_score`, then the model and its tokenizer saved to `save_dir`."""
    metrics = evaluate_and_score(cfg, model, tok, sets, run_dir)
    with quiet_model_bars():  # the comparison's own bars stay alone
        model.save_pretrained(save_dir)
    tok.save_pretrained(save_dir)
    return metrics


def resolve_comparison(
    preset_or_config: str | dict | CompareConfig, methods: list[str] | None = None, sweep: list[str] | None = None
) -> CompareConfig:
    """The comparison's config with `methods` kept and `sweep` expanded, every run's fine-tuning arguments built
    (and so checked, as each fine-tune checks them) before anything runs: a bad value is a ValueError at once."""
    cfg = load_config(preset_or_config)
    if methods:
        if bad := [m for m in methods if m not in METHODS and m not in {r.name for r in cfg.runs}]:
            raise ValueError(f"methods: unknown {bad}; choose from {tuple(METHODS)} or run names")
        cfg.runs = [r for r in cfg.runs if r.method in methods or r.name in methods]
    cfg.runs = expand_sweeps(cfg.runs, list(sweep or []))
    cfg.validate()

    with tempfile.TemporaryDirectory(prefix="anchorft-check-") as tmp:
        for run in cfg.runs:
            try:
                _train_args(cfg, run, cfg.seeds[0], Path(tmp) / run.name)
            except ValueError as e:
                raise ValueError(f"runs[{run.name}]: {one_line(e)}") from e
    return cfg


def comparison_cells(cfg: CompareConfig) -> list[Cell]:
    """The comparison's cells, one per run x seed; with `dataclasses.asdict(cfg)` as the grid's context, their keys
    are the record's (a recorded study resumes while these stay: tests/studies/testbed/test_record_keys.py)."""
    return [Cell(f"{r.name}-seed{s}", {"run": dataclasses.asdict(r), "seed": s})
            for r, s in itertools.product(cfg.runs, cfg.seeds)]  # fmt: skip


def run_compare(
    preset_or_config: str | dict | CompareConfig = "default",
    out_dir: str | Path = "runs/toy-compare",
    methods: list[str] | None = None,
    sweep: list[str] | None = None,
    progress: bool = True,
    workers: int = 1,
    resume: bool = False,
    cluster: RayCluster | None = None,
) -> dict:
    """Pretrain (cached), fine-tune every run x seed through `anchorft.rpsft.train.train`, evaluate,
    write results.json / report.md / tradeoff.png / models/ under `out_dir`; returns the results.

    The fine-tunes are the cells of a grid (`anchorft.studies.grid`): `workers` > 1 runs that many at once in
    separate processes (spawned); with `cluster`, each is a Ray task on it (`anchorft.studies.grid.RayTasks`). Every
    fine-tune and evaluation runs on `cfg.threads` torch threads (default 1:
    the testbed's matrices are too small for two threads to halve a step, so two one-thread jobs beat one
    two-thread job), so the results do not depend on `workers` or the machine. With `resume`, the fine-tunes
    recorded in `out_dir`/cells.jsonl are kept, not run again: the same comparison, stopped part-way, picks up
    where it stopped.

    With `cfg.bases` (pretraining seeds), one whole comparison per base in OUT/base-seedB (`base_folder`), one base
    after the other; returns {"bases": {B: that comparison's results}}."""
    check_workers(workers)  # a bad value fails before anything runs
    cfg = resolve_comparison(preset_or_config, methods, sweep)
    if cfg.bases:
        kw = dict(progress=progress, workers=workers, resume=resume, cluster=cluster)
        return {"bases": {b: run_compare(one, base_folder(out_dir, b), **kw) for b, one in per_base(cfg)}}
    out = Path(out_dir)
    say = tqdm.write if progress else (lambda _msg: None)
    # one cell per run x seed, recorded in out/cells.jsonl as it finishes; `resume` keeps the recorded ones
    cells = comparison_cells(cfg)
    grid = Grid(out, context=dataclasses.asdict(cfg))
    done = grid.finished()
    if resume and (out / RESULTS_FILE).is_file() and all(c.key(grid.context) in done for c in cells):
        # every cell recorded (a finished base of a study, or one unpacked from its record: `toy unpack`): reused
        # without pretraining the base again
        say(f"toy compare: {out}: all {len(cells)} fine-tunes recorded, reused")
        results = load_results(out / RESULTS_FILE).to_dict()
        write_tradeoff_plot(results, out / "tradeoff.png")
        return results
    (out / "models").mkdir(parents=True, exist_ok=True)
    head = f"# anchorft toy compare --out {out} --preset <this file>\n"
    write_text(out / "config.yaml", head + yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))

    cached = cached_model(cfg.pretrain)
    say(
        f"toy compare: testbed model: reusing the cached {cached}"
        if cached is not None
        else f"toy compare: pretraining the testbed model ({cfg.pretrain.steps} steps; cached for later runs)"
    )
    base_dir = pretrained_model(cfg.pretrain, progress=progress)
    pretrain_metrics = json.loads((base_dir / "metrics.json").read_text())
    from anchorft.eval.loading import load_causal_lm, load_tokenizer

    tok = load_tokenizer(str(base_dir))
    eval_sets, val_sets = comparison_sets(cfg)
    base_model = load_causal_lm(base_dir)
    n_items = sum(len(v) for v in eval_sets.values())
    say(f"toy compare: evaluating the base model on {n_items} items, then {len(cfg.runs) * len(cfg.seeds)} fine-tunes")
    with pinned_threads(cfg.threads):
        base = _evaluate_and_save(
            cfg, base_model, tok, (eval_sets, val_sets), out / "runs" / "base", out / "models" / "base"
        )
    base["pretrain"] = {k: pretrain_metrics[k] for k in ("params", "greedy_accuracy", "train_seconds", "key")}
    del base_model

    results = CompareResults(
        base=base,
        settings={
            **{k: getattr(cfg.eval, k) for k in ("k", "n_samples", "temperature", "top_p")},
            "id_skill": cfg.id_skill,
            "id_items": len(eval_sets[cfg.id_skill]),
            "ood_items": {s: len(eval_sets[s]) for s in sk.OOD_SKILLS},
            "val_items": {s: len(v) for s, v in val_sets.items()},
            "seeds": cfg.seeds,
            "pretrained": str(base_dir),
            "pretrain_seed": cfg.pretrain.seed,
            "learning_rate": cfg.learning_rate,
            "max_steps": cfg.max_steps,
            **({"plumbing_only": why} if (why := plumbing_only(cfg)) else {}),
        },
    )
    specs = {r.name: r for r in cfg.runs}
    per_run: dict[str, dict[int, dict]] = {}

    def record(cell: Cell, metrics: dict) -> None:
        name, seed = cell.spec["run"]["name"], cell.spec["seed"]
        per_run.setdefault(name, {})[seed] = metrics
        seeds = [m for _, m in sorted(per_run[name].items())]  # seed order, whatever the finishing order
        run = specs[name]
        settings = {k: v for k, v in dataclasses.asdict(run).items() if v is not None and k != "name"}
        results.record(name, run.method, settings, seeds)
        save_results(results, out / RESULTS_FILE)
        tqdm.write(
            f"{name} seed {seed}: id_greedy {metrics['id_greedy']:.3f} ood_mean {metrics['ood_mean']:.3f} "
            f"({metrics['train_seconds']:.0f}s)"
        )

    job = functools.partial(_finetune_cell, cfg, base_dir, out)
    executor = executor_for(workers, cfg.threads, cluster)
    grid.run(cells, job, executor, resume=resume, progress=progress, desc="toy compare", on_result=record)
    # the report lists runs in the config's order
    results.methods = {r.name: results.methods[r.name] for r in cfg.runs if r.name in results.methods}
    save_results(results, out / RESULTS_FILE)
    write_report(results.to_dict(), out / "report.md")
    write_tradeoff_plot(results.to_dict(), out / "tradeoff.png")
    return results.to_dict()


def compare_into(
    cfg: CompareConfig,
    out: str | Path,
    methods: list[str] | None = None,
    sweep: list[str] = (),
    workers: int = 1,
    cluster: RayCluster | None = None,
    overwrite: bool = False,
) -> bool | None:
    """`anchorft toy compare`: `run_compare` in the folder `out`, claimed for the config, the methods kept and the
    sweeps (not the workers or the executor, which change where the cells run, not their results); every run's
    values checked first. A rerun resumes; a finished comparison is reused (None)."""
    sweep = list(sweep)
    resolve_comparison(cfg, methods, sweep)  # every run's values checked before the folder is claimed
    run = {"config": dataclasses.asdict(cfg), "methods": methods, "sweep": sweep}

    def compare(claim) -> bool:
        run_compare(cfg, out, methods=methods, sweep=sweep, workers=workers, resume=claim.resume, cluster=cluster)
        return True

    return run_claimed(out, "toy compare", run, compare, overwrite=overwrite)
