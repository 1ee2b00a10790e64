"""The testbed's prompt sets (`anchorft.toy.skills`) as JSONL files, for `anchorft analyze --testbed`.

One evaluation set per skill, from the skill's evaluation split (ID: `ID_SKILLS`, OOD: `OOD_SKILLS`),
for hidden-state drift; and in-domain training items (prompt + completion) for the Fisher overlap.
Files are written to a directory so that the analysis reads them like any user's JSONL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

__all__ = ["testbed_prompt_files"]


def _write(path: Path, items) -> str:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for it in items:
            f.write(json.dumps({"prompt": it.prompt, "completion": it.answer, "skill": it.skill}) + "\n")
    os.replace(tmp, path)
    return str(path)


def testbed_prompt_files(out_dir: str | os.PathLike, n_items: int = 64, seed: int = 0) -> tuple[list[str], str]:
    """Writes id_<skill>.jsonl / ood_<skill>.jsonl (eval split) and fisher_<skill>.jsonl (train split).

    Returns (evaluation-set files, Fisher data file). The generator is seeded from `seed` explicitly.
    """
    try:
        from anchorft.toy import skills as sk
    except ImportError as e:  # the testbed is optional for the analysis
        raise ValueError(f"--testbed: the testbed (anchorft.toy.skills) is not available: {e}") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = []
    for domain, names in (("id", sk.ID_SKILLS), ("ood", sk.OOD_SKILLS)):
        for s in names:
            items = sk.sample_items(s, n_items, "eval", rng, unique=True)
            files.append(_write(out / f"{domain}_{s}.jsonl", items))
    fisher_skill = sk.ID_SKILLS[0]
    fisher = _write(out / f"fisher_{fisher_skill}.jsonl", sk.sample_items(fisher_skill, n_items, "train", rng))
    return files, fisher
