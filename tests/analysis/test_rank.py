"""Rank sensitivity: each method placed on the k axis from its method and settings, never from its name."""

from __future__ import annotations

import pytest

from anchorft.analysis.rank import rank_sensitivity


def test_rank_sensitivity_reads_the_method_and_its_settings():
    methods = {
        "sft": {"id_avg@k": 0.5, "ood_mean": 0.2, "method": "sft", "settings": {}},
        "rpsft-k4": {"id_avg@k": 0.45, "ood_mean": 0.3, "method": "rpsft", "settings": {"anchor_rank": 4}},
        "rpsft-big": {"id_avg@k": 0.41, "ood_mean": 0.36, "method": "rpsft", "settings": {"anchor_rank": 99}},
        "l2": {"id_avg@k": 0.3, "ood_mean": 0.4, "method": "l2", "settings": {"anchor_lambda": 0.01}},
        "dft": {"id_avg@k": 0.48, "ood_mean": 0.25, "method": "dft", "settings": {}},
        "iw_sft": {"id_avg@k": 0.47, "ood_mean": 0.26, "method": "iw_sft"},
        "anchored": {"id_avg@k": 0.42, "ood_mean": 0.33, "method": "rpsft", "settings": {"anchor_rank": 6}},
    }
    rs = rank_sensitivity({"base": {"id_avg@k": 0.2, "ood_mean": 0.5}, "methods": methods}, full_rank=16)
    assert [(p["method"], p["k"]) for p in rs["points"]] == [
        ("sft", 0),
        ("rpsft-k4", 4),
        ("anchored", 6),
        ("l2", 16),
        ("rpsft-big", 16),  # a rank above min(m, n) is full rank
    ]
    assert list(rs["references"]) == ["dft", "iw_sft"]
    assert rs["base"]["ood_mean"] == 0.5
    # no guessing from names: a run without its method, or an rpsft run without its rank, is an error
    with pytest.raises(ValueError, match="no known 'method'"):
        rank_sensitivity({"methods": {"rpsft_k4": {"ood_mean": 0.3}}}, full_rank=16)
    with pytest.raises(ValueError, match="anchor_rank"):
        rank_sensitivity({"methods": {"r": {"method": "rpsft", "settings": {}}}}, full_rank=16)
