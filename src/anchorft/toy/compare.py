"""The method comparison on the testbed: base, sft, dft, iw_sft, l2 and rpsft (rank / lambda sweeps).

Every fine-tune goes through `anchorft.rpsft.train.train` (the `anchorft train` code path) with a
prompt/completion `datasets.Dataset` of the hard math distribution; every model is evaluated with
`anchorft.toy.evaluate.evaluate_toy` on the same held-out items. Writes, under `out_dir`:
config.yaml, results.json, report.md, tradeoff.png, models/NAME/ (seed 0; other seeds in
models/NAME-seedS/) and runs/NAME-seedS/ (the trainer's own config, metrics.json, training.png).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
import yaml
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

from anchorft.dataclass_yaml import read_yaml_mapping, update
from anchorft.io import write_json
from anchorft.rpsft.methods import METHODS, RUN_KEYS, get_method
from anchorft.toy import skills as sk
from anchorft.toy.evaluate import EvalSettings, build_eval_sets, evaluate_toy
from anchorft.toy.pretrain import PretrainConfig, pretrained_model
from anchorft.toy.report import mean_over_seeds, write_report, write_tradeoff_plot

__all__ = ["CompareConfig", "RunSpec", "PRESETS", "load_config", "expand_sweeps", "finetune_dataset", "run_compare"]


@dataclass
class RunSpec:
    """One fine-tuning run: a method and its settings (None: the CompareConfig's default)."""

    name: str
    method: str
    anchor_rank: int | None = None
    anchor_lambda: float | None = None
    anchor_targets: str | None = None
    anchor_include_embeddings: bool | None = None
    learning_rate: float | None = None


@dataclass
class CompareConfig:
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    runs: list[RunSpec] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    id_skill: str = "math_word"  # the fine-tuning and ID evaluation distribution (see skills.ID_SKILLS)
    finetune_items: int = 2000  # size of the fine-tuning set (train split of id_skill)
    learning_rate: float = 5e-4
    max_steps: int = 200
    batch_size: int = 32
    warmup_ratio: float = 0.03
    anchor_lambda: float = 1.0
    anchor_targets: str = "all-linear"
    anchor_include_embeddings: bool = True
    eval: EvalSettings = field(default_factory=EvalSettings)
    eval_seed: int = 12345  # the held-out items and the sampling generator of the evaluation

    def validate(self) -> None:
        self.pretrain.validate()
        self.eval.validate()
        if not self.runs:
            raise ValueError("runs: need at least one fine-tuning run")
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names) or "base" in names:
            raise ValueError(f"runs: names must be unique and not 'base', got {names}")
        for r in self.runs:
            if r.method not in METHODS:
                raise ValueError(f"runs[{r.name}].method: must be one of {tuple(METHODS)}, got {r.method!r}")
            if get_method(r.method).uses_rank and not r.anchor_rank:
                raise ValueError(f"runs[{r.name}].anchor_rank: {r.method} needs a rank")
        if self.id_skill not in sk.ID_SKILLS:
            raise ValueError(f"id_skill: must be one of {sk.ID_SKILLS}, got {self.id_skill!r}")
        if not self.seeds:
            raise ValueError("seeds: need at least one seed")
        for name in ("finetune_items", "max_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")


def comparison_eval_sets(cfg: CompareConfig) -> dict:
    """The held-out items a comparison scores every model on (fixed by `cfg.eval_seed`)."""
    sets = build_eval_sets([cfg.id_skill, *sk.OOD_SKILLS], cfg.eval.id_items, np.random.default_rng(cfg.eval_seed))
    for s in sk.OOD_SKILLS:
        sets[s] = sets[s][: cfg.eval.ood_items]
    return sets


def paper_rank(hidden_size: int) -> int:
    """The paper's best rank (768 of Llama-3.1-8B's hidden size 4096) scaled to `hidden_size`."""
    return max(1, round(768 / 4096 * hidden_size))


def _default_runs(ranks: list[int], l2_lambda: float | None = None) -> list[RunSpec]:
    runs = [RunSpec("sft", "sft"), RunSpec("dft", "dft"), RunSpec("iw_sft", "iw_sft")]
    runs.append(RunSpec("l2", "l2", anchor_lambda=l2_lambda))
    runs += [RunSpec(f"rpsft-k{k}", "rpsft", anchor_rank=k) for k in ranks]
    return runs


def _width_runs(hidden_size: int) -> list[RunSpec]:
    # l2 at lambda 0.01: its sum runs over every direction of every matrix, and at lambda 1 it does not move;
    # rpsft at the paper's lambda 1 and rank (768/4096 of the width: 24 at 128) and a third of it.
    k = paper_rank(hidden_size)
    return _default_runs([max(1, k // 3), k], l2_lambda=0.01)


PRESET_DIR = Path(__file__).resolve().parents[3] / "configs" / "toy"
# the presets are the YAML files of configs/toy/, loaded by name (`smoke`, `default`, `sweep`, ...) or by path
PRESETS = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))


def _to_plain(cfg: CompareConfig) -> dict:
    return dataclasses.asdict(cfg)


def _preset_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    if (PRESET_DIR / f"{name}.yaml").is_file():
        return PRESET_DIR / f"{name}.yaml"
    raise ValueError(f"preset: {name!r} is neither a preset {list(PRESETS)} nor a YAML file")


def _merged_mapping(spec: dict, chain: tuple[str, ...] = ()) -> tuple[dict, bool]:
    """(the mapping of `spec` over its `preset:` base, recursively; whether any level set `runs`)."""
    spec = dict(spec)
    base_name = spec.pop("preset", None)
    merged: dict = {}
    has_runs = False
    if base_name is not None:
        path = _preset_path(str(base_name))
        if str(path.resolve()) in chain:
            raise ValueError(f"preset: {base_name!r} names itself through {list(chain)}")
        merged, has_runs = _merged_mapping(read_yaml_mapping(path, "preset"), chain + (str(path.resolve()),))
    for key, value in spec.items():  # nested sections (pretrain, eval) merge key by key
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged, has_runs or "runs" in spec


def load_config(spec: str | dict | CompareConfig) -> CompareConfig:
    """A CompareConfig from a preset name (configs/toy/NAME.yaml), a YAML path, a dict, or itself.

    A mapping may name a base preset with `preset: NAME`; its own keys override the base's (nested sections key
    by key) and are coerced to the fields' types (`anchorft.dataclass_yaml`; unknown keys are a ValueError with
    the closest known ones). Without `runs` anywhere in the chain, the runs follow the width: sft, dft, iw_sft,
    l2 (lambda 0.01) and rpsft at the paper's rank scaled to `pretrain.hidden_size` and at a third of it."""
    if isinstance(spec, CompareConfig):
        return copy.deepcopy(spec)
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise ValueError(f"preset: expected a name, a YAML path or a dict, got {type(spec).__name__}")
    merged, has_runs = _merged_mapping(spec)
    cfg = update(CompareConfig(), merged, "toy compare config")
    if not has_runs:  # the rank sweep follows the width
        cfg.runs = _width_runs(cfg.pretrain.hidden_size)
    return cfg


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def expand_sweeps(runs: list[RunSpec], sweeps: list[str]) -> list[RunSpec]:
    """Expand runs by `key=v1,v2,...` sweeps (product over sweeps).

    A key applies to the runs whose method lists it in the methods table's `sweep_keys` (anchor_* keys to
    the anchored methods l2 and rpsft, anchor_rank to rpsft only, learning_rate to every method). A run
    that a sweep applies to becomes one run per value, named NAME-key=value.
    """
    parsed = []
    for s in sweeps:
        key, sep, vals = s.partition("=")
        if not sep or not vals:
            raise ValueError(f"sweep: expected key=v1,v2,..., got {s!r}")
        if key not in RUN_KEYS:
            raise ValueError(f"sweep: unknown key {key!r}; choose from {RUN_KEYS}")
        parsed.append((key, [_parse_value(v) for v in vals.split(",")]))
    out = list(runs)
    for key, values in parsed:
        new = []
        for r in out:
            if key not in get_method(r.method).sweep_keys:
                new.append(r)
                continue
            short = {"anchor_lambda": "lam", "learning_rate": "lr", "anchor_targets": "tgt"}.get(key, "emb")
            for v in values:
                base = r.name.split("-k")[0] if key == "anchor_rank" else r.name
                name = f"{base}-k{v}" if key == "anchor_rank" else f"{base}-{short}{v}"
                new.append(dataclasses.replace(r, name=name, **{key: v}))
        # keep the first of duplicate names (e.g. a rank sweep over several rpsft runs)
        seen, out = set(), []
        for r in new:
            if r.name not in seen:
                seen.add(r.name)
                out.append(r)
    return out


def finetune_dataset(n: int, rng: np.random.Generator, skill: str = "math_hard") -> datasets.Dataset:
    """The fine-tuning set: `n` prompt/completion pairs of the hard math distribution (train split)."""
    items = sk.sample_items(skill, n, "train", rng)
    return datasets.Dataset.from_list([{"prompt": it.prompt, "completion": it.answer} for it in items])


def _train_args(cfg: CompareConfig, run: RunSpec, seed: int, out: Path):
    from anchorft.rpsft.config import RPSFTConfig

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
        kw["anchor_rank"] = run.anchor_rank
    if method.needs_reference:
        kw["iw_ref_model"] = "copy"
    return RPSFTConfig(**kw)


def _finetune_and_evaluate(cfg: CompareConfig, run: RunSpec, seed: int, base_dir: Path, out: Path, threads: int):
    """One job of the comparison: fine-tune `run` at `seed` from the base model, evaluate, save the model.

    A top-level function so that a worker process can run it; everything it uses is rebuilt from its
    arguments (same seed, same result, whichever process runs it). Returns (run name, seed, metrics)."""
    from anchorft.rpsft.data import load_tokenizer
    from anchorft.rpsft.train import train

    if threads:
        torch.set_num_threads(threads)
    tok = load_tokenizer(str(base_dir))
    data = finetune_dataset(cfg.finetune_items, np.random.default_rng(1000 + seed), cfg.id_skill)
    args = _train_args(cfg, run, seed, out / "runs" / f"{run.name}-seed{seed}")
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    t0 = time.perf_counter()
    trainer = train(args, model, data, tokenizer=tok)
    seconds = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(cfg.eval_seed)
    metrics = evaluate_toy(trainer.model, tok, comparison_eval_sets(cfg), cfg.eval, gen, id_skill=cfg.id_skill)
    metrics.update(seed=seed, train_seconds=seconds)
    name = run.name if seed == cfg.seeds[0] else f"{run.name}-seed{seed}"
    trainer.model.save_pretrained(out / "models" / name)
    tok.save_pretrained(out / "models" / name)
    return run.name, seed, metrics


def _finished(out: Path, cfg: CompareConfig) -> dict[str, dict[int, dict]]:
    """{run name: {seed: metrics}} of the fine-tunes a stopped comparison in `out` finished (model saved)."""
    path = out / "results.json"
    if not path.is_file():
        return {}
    done: dict[str, dict[int, dict]] = {}
    for name, row in json.loads(path.read_text()).get("methods", {}).items():
        for m in row.get("per_seed", []):
            model = name if m["seed"] == cfg.seeds[0] else f"{name}-seed{m['seed']}"
            if name in {r.name for r in cfg.runs} and (out / "models" / model / "config.json").is_file():
                done.setdefault(name, {})[m["seed"]] = m
    return done


def run_compare(
    preset_or_config: str | dict | CompareConfig = "default",
    out_dir: str | Path = "runs/toy-compare",
    methods: list[str] | None = None,
    sweep: list[str] | None = None,
    progress: bool = True,
    workers: int = 1,
    resume: bool = False,
) -> dict:
    """Pretrain (cached), fine-tune every run x seed through `anchorft.rpsft.train.train`, evaluate,
    write results.json / report.md / tradeoff.png / models/ under `out_dir`; returns the results.

    `workers` > 1 runs that many fine-tunes at once in separate processes (spawned), each with
    torch.get_num_threads() // workers threads (at least 1): the testbed's matrices are too small for
    two threads to halve a step, so two one-thread jobs beat one two-thread job. The results do not
    depend on `workers`. With `resume`, fine-tunes already recorded in `out_dir`/results.json (with their
    model saved) are kept, not run again: the same comparison, stopped part-way, picks up where it stopped."""
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    cfg = load_config(preset_or_config)
    if methods:
        bad = [m for m in methods if m not in METHODS and m not in {r.name for r in cfg.runs}]
        if bad:
            raise ValueError(f"methods: unknown {bad}; choose from {tuple(METHODS)} or run names")
        cfg.runs = [r for r in cfg.runs if r.method in methods or r.name in methods]
    cfg.runs = expand_sweeps(cfg.runs, list(sweep or []))
    cfg.validate()
    out = Path(out_dir)
    (out / "models").mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(
        f"# anchorft toy compare --out {out} --preset <this file>\n" + yaml.safe_dump(_to_plain(cfg), sort_keys=False)
    )

    base_dir = pretrained_model(cfg.pretrain, progress=progress)
    pretrain_metrics = json.loads((base_dir / "metrics.json").read_text())
    from anchorft.rpsft.data import load_tokenizer

    tok = load_tokenizer(str(base_dir))
    eval_sets = comparison_eval_sets(cfg)
    base_model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(cfg.eval_seed)
    base = evaluate_toy(base_model, tok, eval_sets, cfg.eval, gen, id_skill=cfg.id_skill)
    base_model.save_pretrained(out / "models" / "base")
    tok.save_pretrained(out / "models" / "base")
    base["pretrain"] = {k: pretrain_metrics[k] for k in ("params", "greedy_accuracy", "train_seconds", "key")}
    del base_model

    results = {
        "base": base,
        "methods": {},
        "settings": {
            "k": cfg.eval.k,
            "n_samples": cfg.eval.n_samples,
            "temperature": cfg.eval.temperature,
            "top_p": cfg.eval.top_p,
            "id_skill": cfg.id_skill,
            "id_items": len(eval_sets[cfg.id_skill]),
            "ood_items": {s: len(eval_sets[s]) for s in sk.OOD_SKILLS},
            "seeds": cfg.seeds,
            "pretrained": str(base_dir),
        },
    }
    jobs = list(itertools.product(cfg.runs, cfg.seeds))
    per_run: dict[str, dict[int, dict]] = _finished(out, cfg) if resume else {}
    jobs = [(r, s) for r, s in jobs if s not in per_run.get(r.name, {})]
    specs = {r.name: r for r in cfg.runs}

    def record(name: str, seed: int, metrics: dict) -> None:
        per_run.setdefault(name, {})[seed] = metrics
        seeds = [m for _, m in sorted(per_run[name].items())]  # seed order, whatever the finishing order
        run = specs[name]
        results["methods"][name] = {
            **mean_over_seeds(seeds),
            "method": run.method,
            "settings": {k: v for k, v in dataclasses.asdict(run).items() if v is not None and k != "name"},
            "per_seed": seeds,
        }
        write_json(out / "results.json", results, indent=2)
        tqdm.write(
            f"{name} seed {seed}: id_greedy {metrics['id_greedy']:.3f} ood_mean {metrics['ood_mean']:.3f} "
            f"({metrics['train_seconds']:.0f}s)"
        )

    for name, kept in list(per_run.items()):  # fine-tunes kept from a stopped run of the same comparison
        for seed, metrics in sorted(kept.items()):
            record(name, seed, metrics)
    bar = tqdm(total=len(jobs), desc="toy compare", disable=not progress)
    if workers == 1:
        for run, seed in jobs:
            bar.set_postfix(run=run.name, seed=seed)
            record(*_finetune_and_evaluate(cfg, run, seed, base_dir, out, 0))
            bar.update()
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        threads = max(1, torch.get_num_threads() // workers)
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(_finetune_and_evaluate, cfg, r, s, base_dir, out, threads) for r, s in jobs]
            for fut in as_completed(futures):
                record(*fut.result())
                bar.update()
    bar.close()
    # the report lists runs in the config's order
    results["methods"] = {r.name: results["methods"][r.name] for r in cfg.runs if r.name in results["methods"]}
    write_json(out / "results.json", results, indent=2)
    write_report(results, out / "report.md")
    write_tradeoff_plot(results, out / "tradeoff.png")
    return results
