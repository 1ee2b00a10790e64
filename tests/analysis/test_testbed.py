"""`--testbed` prompt sets: the testbed's own evaluation items, the same ones a comparison evaluated on."""

from __future__ import annotations

import json

import numpy as np
import pytest

toy_skills = pytest.importorskip("anchorft.toy.skills", reason="the testbed (anchorft.toy) is not importable")
toy_eval = pytest.importorskip("anchorft.toy.evaluate", reason="the testbed (anchorft.toy) is not importable")

from anchorft.analysis import testbed as tb  # noqa: E402
from anchorft.analysis.prompts import load_prompts  # noqa: E402


def test_sets_match_the_comparison_config(tmp_path):
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    (cmp_dir / "config.yaml").write_text("eval:\n  id_items: 6\n  ood_items: 3\neval_seed: 7\n")
    files, fisher = tb.testbed_prompt_files(tmp_path / "p", n_items=5, seed=1, compare_dir=cmp_dir)
    names = sorted(p.split("/")[-1] for p in files)
    assert names == sorted(
        [f"id_{s}.jsonl" for s in toy_skills.ID_SKILLS] + [f"ood_{s}.jsonl" for s in toy_skills.OOD_SKILLS]
    )
    ref = toy_eval.build_eval_sets([*toy_skills.ID_SKILLS, *toy_skills.OOD_SKILLS], 6, np.random.default_rng(7))
    for f in files:
        rows = [json.loads(line) for line in open(f)]
        skill = rows[0]["skill"]
        n = 6 if skill in toy_skills.ID_SKILLS else 3
        assert [r["prompt"] for r in rows] == [it.prompt for it in ref[skill][:n]]
        assert all(toy_skills.split_of(skill, r["key"]) == "eval" for r in rows)
    items = load_prompts(fisher)
    assert len(items) == 5 and all(it.completion for it in items)
    assert all(toy_skills.split_of(r["skill"], r["key"]) == "train" for r in map(json.loads, open(fisher)))
