"""The testbed's prompt sets (`anchorft.toy`) as JSONL files, for `anchorft analyze --testbed`.

The evaluation sets are the comparison's own: `anchorft.studies.testbed.compare_config.comparison_eval_sets` of the
comparison's `config.yaml` (its id_skill, eval_seed, id_items, ood_items), so the drift is measured on
exactly the items that comparison scored, item by item. Without a comparison, the same function on the
default comparison config with `n_items` items per set and eval_seed = `seed`. The Fisher data are
training-split items (prompt + completion) of the fine-tuning skill (`id_skill`). Files are written to
a directory so that the analysis reads them like any user's JSONL.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from anchorft.io import write_jsonl

__all__ = ["testbed_eval_sets", "testbed_prompt_files", "testbed_ood_fisher_file"]


def _rows(items) -> list[dict]:
    return [{"prompt": it.prompt, "completion": it.answer, "skill": it.skill, "key": it.key} for it in items]


def testbed_eval_sets(n_items: int = 64, seed: int = 0, compare_dir: str | os.PathLike | None = None):
    """(comparison config, {skill: items}): the evaluation sets of the comparison in `compare_dir`.

    Without `compare_dir` (or without its config.yaml): the default comparison config with `n_items`
    items per set and eval_seed = `seed`."""
    try:
        from anchorft.studies.testbed.compare_config import CompareConfig, comparison_eval_sets, load_config
        from anchorft.toy.evaluate import EvalSettings
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
    from anchorft.toy import skills as sk

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
    from anchorft.toy import skills as sk

    cfg, sets = testbed_eval_sets(n_items, seed, compare_dir)
    ood_skills = [s for s in sets if s != cfg.id_skill]
    rng = np.random.default_rng(seed + 1)
    per = -(-n_items // len(ood_skills))
    items = [it for s in ood_skills for it in sk.sample_items(s, per, "train", rng)]
    order = rng.permutation(len(items))[:n_items]
    path = Path(out_dir) / "fisher_ood.jsonl"
    write_jsonl(path, _rows([items[int(i)] for i in order]))
    return str(path)
