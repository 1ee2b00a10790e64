"""The testbed comparison's configuration: runs, presets (the YAML files of configs/toy/), sweeps, evaluation sets.

`CompareConfig` and `RunSpec` are plain dataclasses loaded with the project's YAML -> dataclass helper
(`anchorft.dataclass_yaml`); `comparison_eval_sets` is the one construction of the held-out items every model
of a comparison is scored on (also used by `anchorft analyze --testbed` and the RL stage). The orchestration
of fine-tunes is `anchorft.studies.testbed.compare`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from dataclasses import dataclass, field

import numpy as np
import torch

from anchorft.dataclass_yaml import resolve_presets, update
from anchorft.resources import configs_dir
from anchorft.rpsft.anchor_options import AnchorOptions
from anchorft.rpsft.methods import METHODS, RUN_KEYS, get_method
from anchorft.rpsft.paper import PAPER_RANK
from anchorft.toy import skills as sk
from anchorft.toy.evaluate import EvalSettings, build_eval_sets, evaluate_greedy, evaluate_toy
from anchorft.toy.pretrain import PretrainConfig

__all__ = [
    "CompareConfig",
    "RunSpec",
    "PRESETS",
    "PRESET_DIR",
    "load_config",
    "expand_sweeps",
    "comparison_eval_sets",
    "comparison_val_sets",
    "comparison_sets",
    "evaluate_comparison",
    "paper_rank",
    "plumbing_only",
]


# one optional override per setting a run may set (the sweepable RUN_KEYS and lora_alpha), None meaning the
# CompareConfig's default (or the trainer's); the anchor options' types are AnchorOptions'
_RUN_TYPES = {**typing.get_type_hints(AnchorOptions), "learning_rate": float, "lora_rank": int, "lora_alpha": float}
RunSpec = dataclasses.make_dataclass(
    "RunSpec",
    [("name", str), ("method", str), *((k, _RUN_TYPES[k] | None, None) for k in (*RUN_KEYS, "lora_alpha"))],
    namespace={
        "__module__": __name__,
        "__doc__": """One fine-tuning run: a method and its settings (None: the CompareConfig's default).

    lora: lora_rank is the adapter's rank (default: CompareConfig.lora_rank, else a quarter of the width) and
    lora_alpha its alpha (default 2 x rank, the release's ratio); an anchor_rank on a lora run turns on the adapter
    anchor (lora_anchor) at that k, kind and lambda. osf: anchor_rank is its effective_rank (RPSFT's k).""",
    },
)


@dataclass
class CompareConfig:
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    runs: list[RunSpec] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    # pretraining seeds: one base per seed and one whole comparison per base (OUT/base-seedB: `layout.base_folder`),
    # each pretrained (and cached) with pretrain.seed = B; empty: the single base of pretrain.seed, in OUT itself
    bases: list[int] = field(default_factory=list)
    id_skill: str = "math_word"  # the fine-tuning and ID evaluation distribution (see skills.ID_SKILLS)
    finetune_items: int = 2000  # size of the fine-tuning set (train split of id_skill)
    learning_rate: float = 5e-4
    max_steps: int = 200
    batch_size: int = 32
    warmup_ratio: float = 0.03
    anchor_lambda: float = AnchorOptions.anchor_lambda
    anchor_targets: str = AnchorOptions.anchor_targets
    anchor_include_embeddings: bool = AnchorOptions.anchor_include_embeddings
    lora_rank: int | None = None  # the lora runs' default rank (None: pretrain.hidden_size // 4)
    eval: EvalSettings = field(default_factory=EvalSettings)
    eval_seed: int = 12345  # the held-out items and the sampling generator of the evaluation
    # fisher:F rank rules: training-split items (prompt + answer) whose gradients give F_ood G on the base model,
    # this many of the fine-tuning distribution (G) and this many spread over the OOD skills (F_ood)
    calibration_items: int = 32
    # torch CPU threads of each fine-tune and each evaluation, whatever --workers and the machine: the numbers then
    # do not depend on how many run at once (pretraining pins its own, pretrain.threads)
    threads: int = 1

    def validate(self) -> None:
        self.pretrain.validate()
        self.eval.validate()
        if self.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {self.threads}")
        if not self.runs:
            raise ValueError("runs: need at least one fine-tuning run")
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names) or "base" in names:
            raise ValueError(f"runs: names must be unique and not 'base', got {names}")
        for r in self.runs:
            if r.method not in METHODS:
                raise ValueError(f"runs[{r.name}].method: must be one of {tuple(METHODS)}, got {r.method!r}")
            if get_method(r.method).uses_rank and not (r.anchor_rank or r.anchor_rank_rule or r.anchor_memory):
                raise ValueError(f"runs[{r.name}].anchor_rank: {r.method} needs a rank")
            if r.learning_rate is not None and not r.learning_rate > 0:
                raise ValueError(f"runs[{r.name}].learning_rate: must be > 0, got {r.learning_rate}")
            if get_method(r.method).peft == "osf" and not r.anchor_rank:
                raise ValueError(f"runs[{r.name}].anchor_rank: osf needs its effective rank (RPSFT's k)")
        if self.id_skill not in sk.ID_SKILLS:
            raise ValueError(f"id_skill: must be one of {sk.ID_SKILLS}, got {self.id_skill!r}")
        if self.lora_rank is not None and self.lora_rank < 1:
            raise ValueError(f"lora_rank: must be >= 1, got {self.lora_rank}")
        if not self.seeds:
            raise ValueError("seeds: need at least one seed")
        bad = [s for s in self.seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**32]
        if bad:  # numpy's and transformers' set_seed accept 0 .. 2**32 - 1 only
            raise ValueError(f"seeds: must be integers in 0 .. 2**32 - 1, got {bad}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: each seed once, got {self.seeds}")
        bad = [b for b in self.bases if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < 2**32]
        if bad or len(set(self.bases)) != len(self.bases):
            raise ValueError(f"bases: distinct pretraining seeds in 0 .. 2**32 - 1, got {self.bases}")
        for name in ("finetune_items", "max_steps", "batch_size", "calibration_items"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")


# Below these a comparison checks that its parts run, not what the methods do (the smoke preset: 60 pretraining
# steps of a 25k-parameter model, 4 fine-tuning steps): the testbed's skills needed 1,300 or more pretraining steps
# (docs/toy.md, how the defaults were found) and the ID task is learnt over the 200 fine-tuning steps of the presets.
PLUMBING_PRETRAIN_STEPS = 1000
PLUMBING_FINETUNE_STEPS = 50


def plumbing_only(cfg: CompareConfig) -> str | None:
    """Why `cfg` is a plumbing check whose numbers say nothing of the methods (its pretraining or fine-tuning steps,
    e.g. "60 pretraining steps, 4 fine-tuning steps"), or None for a comparison that can show the phenomenon."""
    if cfg.pretrain.steps < PLUMBING_PRETRAIN_STEPS or cfg.max_steps < PLUMBING_FINETUNE_STEPS:
        return f"{cfg.pretrain.steps} pretraining steps, {cfg.max_steps} fine-tuning steps"
    return None


def per_base(cfg: CompareConfig) -> list[tuple[int | None, CompareConfig]]:
    """(pretraining seed, the comparison of that base) for each of `cfg.bases`; [(None, cfg)] without bases."""
    if not cfg.bases:
        return [(None, cfg)]
    out = []
    for b in cfg.bases:
        one = copy.deepcopy(cfg)
        one.bases, one.pretrain.seed = [], b
        out.append((b, one))
    return out


def comparison_eval_sets(cfg: CompareConfig) -> dict:
    """The held-out items a comparison scores every model on (fixed by `cfg.eval_seed`)."""
    sets = build_eval_sets([cfg.id_skill, *sk.OOD_SKILLS], cfg.eval.id_items, np.random.default_rng(cfg.eval_seed))
    for s in sk.OOD_SKILLS:
        sets[s] = sets[s][: cfg.eval.ood_items]
    return sets


def comparison_val_sets(cfg: CompareConfig, reported: dict | None = None) -> dict:
    """The validation items (`cfg.eval.val_items` per skill; {} when 0): evaluation-split items, never trained on,
    disjoint by key from `comparison_eval_sets` (drawn with eval_seed + 1). A skill whose evaluation split the
    reported items exhaust (boolean's 64 expressions) is left out."""
    n = cfg.eval.val_items
    if not n:
        return {}
    reported = reported if reported is not None else comparison_eval_sets(cfg)
    rng = np.random.default_rng(cfg.eval_seed + 1)
    sets = {}
    for s in [cfg.id_skill, *sk.OOD_SKILLS]:
        taken = {it.key for it in reported[s]}
        pool = sk.sample_items(s, len(taken) + n, "eval", rng, unique=True)
        items = [it for it in pool if it.key not in taken][:n]
        if items:
            sets[s] = items
    if cfg.id_skill not in sets:
        raise ValueError(f"eval.val_items: the evaluation split of {cfg.id_skill} has no item left for validation")
    return sets


def comparison_sets(cfg: CompareConfig) -> tuple[dict, dict]:
    """(`comparison_eval_sets`, `comparison_val_sets`) of `cfg`, built once per process for the values they depend
    on: a study's fine-tunes (each a cell in a worker process) and its bases share one construction (about a
    second, 3 % of a testbed cell). Fresh dicts and lists of the shared (frozen) items, so a caller may edit them."""
    e = cfg.eval
    sets = _sets(cfg.id_skill, e.id_items, e.ood_items, e.val_items, cfg.eval_seed)
    return tuple({s: list(items) for s, items in part.items()} for part in sets)


@functools.lru_cache(maxsize=4)
def _sets(id_skill: str, id_items: int, ood_items: int, val_items: int, eval_seed: int) -> tuple[dict, dict]:
    cfg = CompareConfig(id_skill=id_skill, eval_seed=eval_seed)
    cfg.eval = dataclasses.replace(cfg.eval, id_items=id_items, ood_items=ood_items, val_items=val_items)
    eval_sets = comparison_eval_sets(cfg)
    return eval_sets, comparison_val_sets(cfg, eval_sets)


def evaluate_comparison(
    model, tokenizer, cfg: CompareConfig, eval_sets: dict, val_sets: dict, per_item: bool = False
) -> dict:
    """A model's metrics in a comparison: `evaluate_toy` on `eval_sets` with the sampling generator seeded by
    `cfg.eval_seed` (the same stream for every model), and `val`, greedy, on `val_sets` when there are any. With
    `per_item`, each part also holds its "per_item" scores (`evaluate_toy`)."""
    gen = torch.Generator().manual_seed(cfg.eval_seed)
    kw = dict(id_skill=cfg.id_skill, per_item=per_item)
    metrics = evaluate_toy(model, tokenizer, eval_sets, cfg.eval, gen, **kw)
    if val_sets:
        metrics["val"] = evaluate_greedy(model, tokenizer, val_sets, cfg.eval, **kw)
    return metrics


def paper_rank(hidden_size: int) -> int:
    """The paper's best rank (768 of Llama-3.1-8B's hidden size 4096) scaled to `hidden_size`."""
    return max(1, round(PAPER_RANK / 4096 * hidden_size))


def _width_runs(hidden_size: int) -> list[RunSpec]:
    # l2 at lambda 0.01: its sum runs over every direction of every matrix, and at lambda 1 it does not move;
    # rpsft at the paper's lambda 1 and rank (768/4096 of the width: 24 at 128) and a third of it.
    k = paper_rank(hidden_size)
    runs = [RunSpec(m, m) for m in ("sft", "dft", "iw_sft")] + [RunSpec("l2", "l2", anchor_lambda=0.01)]
    return runs + [RunSpec(f"rpsft-k{r}", "rpsft", anchor_rank=r) for r in (max(1, k // 3), k)]


PRESET_DIR = configs_dir("toy")
# the presets are the YAML files of configs/toy/, loaded by name (`smoke`, `default`, `sweep`, ...) or by path
PRESETS = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))


def load_config(spec: str | dict | CompareConfig) -> CompareConfig:
    """A CompareConfig from a preset name (configs/toy/NAME.yaml), a YAML path, a dict, or itself.

    A mapping may name base presets with `preset: NAME` (or a list; `anchorft.dataclass_yaml.resolve_presets`);
    its own keys override the bases' (nested mappings key by key) and are coerced to the fields' types (unknown
    keys are a ValueError with the closest known ones). Without `runs` anywhere in the chain, the runs follow the
    width: sft, dft, iw_sft, l2 (lambda 0.01) and rpsft at the paper's rank scaled to `pretrain.hidden_size` and at
    a third of it."""
    if isinstance(spec, CompareConfig):
        return copy.deepcopy(spec)
    if not isinstance(spec, (str, dict)):
        raise ValueError(f"preset: expected a name, a YAML path or a dict, got {type(spec).__name__}")
    merged = resolve_presets(spec, PRESET_DIR, "preset")
    cfg = update(CompareConfig(), merged, "toy compare config")
    if "runs" not in merged:  # the rank sweep follows the width
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
            short = {
                "anchor_lambda": "lam",
                "learning_rate": "lr",
                "anchor_targets": "tgt",
                "anchor_include_embeddings": "emb",
                "anchor_rank_rule": "rule",
                "anchor_layers": "layers",
                "anchor_memory": "mem",
                "anchor_lambda_rest": "rest",
                "anchor_kind": "kind",
                "lora_rank": "r",
            }.get(key, "k")
            for v in values:
                base = r.name.split("-k")[0] if key == "anchor_rank" else r.name
                name = f"{base}-k{v}" if key == "anchor_rank" else f"{base}-{short}{v}"
                new.append(dataclasses.replace(r, name=name, **{key: v}))
        # keep the first of duplicate names (e.g. a rank sweep over several rpsft runs)
        first: dict[str, RunSpec] = {}
        for r in new:
            first.setdefault(r.name, r)
        out = list(first.values())
    return out
