"""The suite's table, exactly as written to table.md: headers, rule lines, signed deltas and the "-" of a mean
or delta that a model has no benchmark for (pure functions, no model)."""

from __future__ import annotations

import pytest

from anchorft.eval.report import main_table, table_markdown


def _results() -> dict:
    return {
        "base": {"a": {"avg@k": 0.5, "pass@k": 0.75, "k": 4}, "b": {"avg@k": 0.2, "pass@k": 0.4, "k": 4}},
        "sft": {"a": {"avg@k": 0.6, "pass@k": 0.8, "k": 4}, "b": {"avg@k": 0.1, "pass@k": 0.3, "k": 4}},
        "rl": {"a": {"avg@k": 0.7, "pass@k": 0.9, "k": 4}},  # no OOD benchmark: its OOD mean and delta are None
    }


def test_a_missing_mean_has_no_delta_in_either_direction():
    t = main_table(_results(), {"b": "ood", "a": "id"}, base="base")
    rl = t["models"]["rl"]
    assert rl["ood_mean_avg@k"] is None and rl["delta_ood_mean_avg@k"] is None
    assert rl["delta_id_mean_pass@k"] == pytest.approx(0.15)
    no_base = main_table(_results(), {"b": "ood", "a": "id"}, base="rl")  # the base lacks the mean this time
    assert no_base["models"]["sft"]["delta_ood_mean_pass@k"] is None
    assert no_base["models"]["sft"]["delta_id_mean_avg@k"] == pytest.approx(-0.1)
    assert sorted(k for k in rl if k.startswith("delta_")) == [
        "delta_id_mean_avg@k", "delta_id_mean_pass@k", "delta_ood_mean_avg@k", "delta_ood_mean_pass@k",
    ]  # fmt: skip


def test_table_markdown_is_two_tables_id_benchmarks_first():
    md = table_markdown(main_table(_results(), {"b": "ood", "a": "id"}, base="base"))
    head = "| model | a (ID) | b (OOD) | ID mean | OOD mean | ID vs base | OOD vs base |"
    rule = "|---|---|---|---|---|---|---|"
    assert md == "\n".join([
        "### Avg@4 (%)", "", head, rule,
        "| base | 50.0 | 20.0 | 50.0 | 20.0 | +0.0 | +0.0 |",
        "| sft | 60.0 | 10.0 | 60.0 | 10.0 | +10.0 | -10.0 |",
        "| rl | 70.0 | - | 70.0 | - | +20.0 | - |",
        "",
        "### Pass@4 (%)", "", head, rule,
        "| base | 75.0 | 40.0 | 75.0 | 40.0 | +0.0 | +0.0 |",
        "| sft | 80.0 | 30.0 | 80.0 | 30.0 | +5.0 | -10.0 |",
        "| rl | 90.0 | - | 90.0 | - | +15.0 | - |",
        "",
    ])  # fmt: skip
