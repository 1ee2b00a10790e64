"""`comparison_sets`: the evaluation and validation items built once per process, equal to a fresh construction,
keyed by every value they depend on, and safe to edit."""

import dataclasses

from anchorft.studies.testbed import compare_config as cc


def _cfg(**eval_kw) -> cc.CompareConfig:
    cfg = cc.load_config("smoke")
    cfg.eval = dataclasses.replace(cfg.eval, **{"val_items": 5, **eval_kw})
    return cfg


def test_equal_to_a_fresh_construction_and_built_once(monkeypatch):
    cc._sets.cache_clear()
    calls = []
    build = cc.comparison_eval_sets
    monkeypatch.setattr(cc, "comparison_eval_sets", lambda cfg: calls.append(1) or build(cfg))
    cfg = _cfg()
    first, again = cc.comparison_sets(cfg), cc.comparison_sets(_cfg())
    fresh = build(cfg)
    assert first == again == (fresh, cc.comparison_val_sets(cfg, fresh))
    assert len(calls) == 1


def test_every_value_it_depends_on_is_in_its_key():
    base = cc.comparison_sets(_cfg())
    for change in (dict(id_items=7), dict(ood_items=3), dict(val_items=4)):
        assert cc.comparison_sets(_cfg(**change)) != base, change
    other = _cfg()
    other.eval_seed += 1
    assert cc.comparison_sets(other) != base
    other = _cfg()
    other.id_skill = "math_easy" if other.id_skill != "math_easy" else "math_word"
    assert cc.comparison_sets(other) != base


def test_a_caller_may_edit_what_it_gets():
    eval_sets, val_sets = cc.comparison_sets(_cfg())
    skill = next(iter(eval_sets))
    n = len(eval_sets[skill])
    eval_sets[skill].clear()
    val_sets.clear()
    again, val_again = cc.comparison_sets(_cfg())
    assert len(again[skill]) == n and val_again
