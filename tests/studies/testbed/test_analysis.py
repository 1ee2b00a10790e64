"""`--testbed` prompt sets: the testbed's own evaluation items, the same ones a comparison evaluated on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

toy_skills = pytest.importorskip("anchorft.toy.skills", reason="the testbed (anchorft.toy) is not importable")
toy_compare = pytest.importorskip(
    "anchorft.studies.testbed.compare_config", reason="the testbed (anchorft.toy) is not importable"
)

from anchorft.analysis.prompts import load_prompts  # noqa: E402
from anchorft.studies.testbed import analysis as tb  # noqa: E402


def _saved_comparison_config(tmp_path, **overrides):
    """A comparison's config.yaml as `anchorft toy compare` writes it (the smoke preset, overridden)."""
    cfg = toy_compare.load_config({"preset": "smoke", **overrides})
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    import dataclasses

    (cmp_dir / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    return cfg, cmp_dir


@pytest.mark.parametrize("id_skill", ["math_word", "math_hard"])
def test_sets_are_the_comparisons_item_by_item(tmp_path, id_skill):
    """The drift sets are the comparison's evaluation sets, item by item (skill order included: the
    items depend on the order in which one generator draws them)."""
    cfg, cmp_dir = _saved_comparison_config(tmp_path, id_skill=id_skill, eval_seed=7)
    files, fisher = tb.testbed_prompt_files(tmp_path / "p", n_items=5, seed=1, compare_dir=cmp_dir)
    ref = toy_compare.comparison_eval_sets(cfg)
    names = sorted(p.split("/")[-1] for p in files)
    assert names == sorted([f"id_{id_skill}.jsonl"] + [f"ood_{s}.jsonl" for s in toy_skills.OOD_SKILLS])
    for f in files:
        rows = [json.loads(line) for line in open(f)]
        skill = rows[0]["skill"]
        assert [(r["prompt"], r["completion"], r["key"]) for r in rows] == [
            (it.prompt, it.answer, it.key) for it in ref[skill]
        ]
        assert all(toy_skills.split_of(skill, r["key"]) == "eval" for r in rows)
    items = load_prompts(fisher)
    assert len(items) == 5 and all(it.completion for it in items)
    rows = list(map(json.loads, open(fisher)))
    assert {r["skill"] for r in rows} == {id_skill}  # the fine-tuning distribution
    assert all(toy_skills.split_of(r["skill"], r["key"]) == "train" for r in rows)


def test_without_a_comparison_the_default_construction_is_used(tmp_path):
    files, _ = tb.testbed_prompt_files(tmp_path / "p", n_items=4, seed=3)
    cfg = toy_compare.CompareConfig(eval_seed=3)
    cfg.eval.id_items = cfg.eval.ood_items = 4
    ref = toy_compare.comparison_eval_sets(cfg)
    got = {json.loads(open(f).readline())["skill"]: [json.loads(line)["key"] for line in open(f)] for f in files}
    assert got == {s: [it.key for it in items] for s, items in ref.items()}
    assert np.all([len(v) == 4 for v in got.values()])
