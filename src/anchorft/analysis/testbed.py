"""The testbed's prompt sets (`anchorft.toy`) as JSONL files, for `anchorft analyze --testbed`.

One evaluation set per skill, from the skills' evaluation split (ID: `ID_SKILLS`, OOD: `OOD_SKILLS`),
drawn with the testbed's own `build_eval_sets`, for hidden-state drift; and in-domain training items
(prompt + completion) for the Fisher overlap. With the `config.yaml` of an `anchorft toy compare` run
the sets are exactly the ones that comparison evaluated on (its eval_seed, id_items, ood_items).
Files are written to a directory so that the analysis reads them like any user's JSONL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import yaml

__all__ = ["testbed_prompt_files", "testbed_ood_fisher_file"]


def _write(path: Path, items) -> str:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for it in items:
            f.write(
                json.dumps({"prompt": it.prompt, "completion": it.answer, "skill": it.skill, "key": it.key}) + "\n"
            )
    os.replace(tmp, path)
    return str(path)


def testbed_prompt_files(
    out_dir: str | os.PathLike, n_items: int = 64, seed: int = 0, compare_dir: str | os.PathLike | None = None
) -> tuple[list[str], str]:
    """Writes id_<skill>.jsonl / ood_<skill>.jsonl (eval split) and fisher_<skill>.jsonl (train split).

    Returns (evaluation-set files, Fisher data file). Without `compare_dir` (or without its config.yaml),
    `n_items` items per skill from numpy's generator seeded with `seed`.
    """
    try:
        from anchorft.toy import skills as sk
        from anchorft.toy.evaluate import build_eval_sets
    except ImportError as e:  # the testbed is optional for the analysis
        raise ValueError(f"--testbed: the testbed (anchorft.toy) is not available: {e}") from None
    id_items = ood_items = n_items
    eval_seed = seed
    cfg_path = Path(compare_dir) / "config.yaml" if compare_dir is not None else None
    if cfg_path is not None and cfg_path.is_file():
        cfg = yaml.safe_load(cfg_path.read_text()) or {}
        ev = cfg.get("eval") or {}
        id_items, ood_items = int(ev.get("id_items", n_items)), int(ev.get("ood_items", n_items))
        eval_seed = int(cfg.get("eval_seed", seed))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sets = build_eval_sets([*sk.ID_SKILLS, *sk.OOD_SKILLS], id_items, np.random.default_rng(eval_seed))
    files = [_write(out / f"id_{s}.jsonl", sets[s]) for s in sk.ID_SKILLS]
    files += [_write(out / f"ood_{s}.jsonl", sets[s][:ood_items]) for s in sk.OOD_SKILLS]
    fisher_skill = sk.ID_SKILLS[0]
    train = sk.sample_items(fisher_skill, n_items, "train", np.random.default_rng(seed))
    return files, _write(out / f"fisher_{fisher_skill}.jsonl", train)


def testbed_ood_fisher_file(out_dir: str | os.PathLike, n_items: int = 64, seed: int = 0) -> str:
    """Writes fisher_ood.jsonl: `n_items` training-split items (prompt + answer) spread evenly over the OOD skills,
    drawn from numpy's generator seeded with `seed` + 1 (the OOD loss whose empirical Fisher projects G)."""
    from anchorft.toy import skills as sk

    rng = np.random.default_rng(seed + 1)
    per = -(-n_items // len(sk.OOD_SKILLS))
    items = [it for s in sk.OOD_SKILLS for it in sk.sample_items(s, per, "train", rng)]
    order = rng.permutation(len(items))[:n_items]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return _write(out / "fisher_ood.jsonl", [items[int(i)] for i in order])
