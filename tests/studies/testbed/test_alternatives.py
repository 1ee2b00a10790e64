"""LoRA, LoRA + anchor and OSF in the testbed comparison, and WiSE-FT interpolation (`anchorft toy interpolate`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from anchorft.studies.grid import LocalProcesses
from anchorft.studies.testbed.compare import _train_args, run_compare
from anchorft.studies.testbed.compare_config import RunSpec, load_config
from anchorft.studies.testbed.interpolate import interpolate_weights, parse_alphas
from anchorft.studies.testbed.wise_curves import draw_interpolation_curves


def test_interpolate_weights():
    g = torch.Generator().manual_seed(0)
    w0 = {"a": torch.randn(3, 4, generator=g), "n": torch.tensor([1, 2])}
    ft = {"a": torch.randn(3, 4, generator=g), "n": torch.tensor([1, 2])}
    assert torch.equal(interpolate_weights(w0, ft, 1.0)["a"], ft["a"])
    torch.testing.assert_close(interpolate_weights(w0, ft, 0.25)["a"], w0["a"] + 0.25 * (ft["a"] - w0["a"]))
    torch.testing.assert_close(interpolate_weights(w0, ft, 0.75)["a"], 0.25 * w0["a"] + 0.75 * ft["a"])
    assert torch.equal(interpolate_weights(w0, ft, 0.5)["n"], ft["n"])
    with pytest.raises(ValueError, match="differ in their tensors"):
        interpolate_weights(w0, {"a": ft["a"]}, 0.5)
    with pytest.raises(ValueError, match="shape"):
        interpolate_weights(w0, {**ft, "a": torch.zeros(4, 3)}, 0.5)
    assert parse_alphas("0.75,0.25,0.5") == [0.25, 0.5, 0.75]
    for bad in ("0,0.5", "1.5", "x", ""):
        with pytest.raises(ValueError, match="--alphas"):
            parse_alphas(bad)


def test_lora_runs_reach_the_trainer_args(tmp_path):
    cfg = load_config("smoke")
    lora = _train_args(cfg, RunSpec("l", "lora"), 0, tmp_path)
    assert (lora.method, lora.lora_rank, lora.lora_alpha, lora.lora_anchor) == ("lora", 8, 16.0, False)  # width / 4
    anch = _train_args(cfg, RunSpec("la", "lora", anchor_rank=2, anchor_kind="subspace", lora_rank=4), 0, tmp_path)
    assert (anch.lora_rank, anch.lora_alpha, anch.lora_anchor, anch.anchor_rank, anch.anchor_kind) == (
        4, 8.0, True, 2, "subspace"
    )  # fmt: skip
    osf = _train_args(cfg, RunSpec("o", "osf", anchor_rank=3), 0, tmp_path)
    assert (osf.method, osf.anchor_rank) == ("osf", 3)
    cfg.runs = [RunSpec("o", "osf")]
    with pytest.raises(ValueError, match="osf needs its effective rank"):
        cfg.validate()


def test_alternatives_end_to_end(tmp_path, monkeypatch, smoke_cache):
    """lora, lora + anchor and osf fine-tune in the comparison and save plain models; `toy interpolate` evaluates
    WiSE-FT points from them (alpha 1 gives the fine-tune's own scores back) and `toy report` merges them."""
    from anchorft.cli import main as cli

    monkeypatch.setenv("ANCHORFT_CACHE", str(smoke_cache))
    torch.set_num_threads(1)
    runs = [
        {"name": "sft", "method": "sft"},
        {"name": "lora", "method": "lora", "learning_rate": 5e-3},
        {"name": "lora-anchor", "method": "lora", "learning_rate": 5e-3, "anchor_rank": 2, "anchor_lambda": 10.0},
        {"name": "osf", "method": "osf", "anchor_rank": 2},
    ]
    cfg = load_config({"preset": "smoke", "runs": runs, "eval": {"val_items": 3}})
    out = tmp_path / "cmp"
    res = run_compare(cfg, out, progress=False)
    assert set(res["methods"]) == {r["name"] for r in runs}
    base = AutoModelForCausalLM.from_pretrained(out / "models" / "base")
    names = [n for n, _ in base.named_parameters()]
    for name in ("lora", "lora-anchor", "osf"):
        model = AutoModelForCausalLM.from_pretrained(out / "models" / name)  # merged: the base's architecture
        assert [n for n, _ in model.named_parameters()] == names
        moved = sum(float((a - b).abs().sum()) for a, b in zip(base.parameters(), model.parameters()))
        assert moved > 0, name
    metrics = json.loads((out / "runs" / "lora-anchor-seed0" / "metrics.json").read_text())
    assert "AdapterAnchor" in metrics["anchor"]["repr"]
    assert metrics["log_history"][0]["anchor/penalty"] == 0.0  # B = 0 at the first step

    itp = out / "wise"  # inside the comparison, where `toy verdict --with wise` reads its runs
    from anchorft.studies.testbed import interpolate

    built = []
    real_executor = interpolate.executor_for
    monkeypatch.setattr(interpolate, "executor_for", lambda *a: built.append(real_executor(*a)) or built[-1])
    argv = ["toy", "--threads", "1", "interpolate", "--compare", str(out), "--runs", "sft", "lora", "--workers", "2"]
    assert cli([*argv, "--alphas", "0.5,1", "--out", str(itp)]) == 0
    assert built[-1] == LocalProcesses(2, 1)  # two spawned workers; the in-process resumes below give the same
    got = json.loads((itp / "results.json").read_text())
    assert set(got["methods"]) == {"sft-wise0.5", "sft-wise1", "lora-wise0.5", "lora-wise1"}
    for src in ("sft", "lora"):
        one, ft = got["methods"][f"{src}-wise1"]["per_seed"][0], res["methods"][src]["per_seed"][0]
        assert (one["id_greedy"], one["ood"], one["val"]) == (ft["id_greedy"], ft["ood"], ft["val"])
        assert got["methods"][f"{src}-wise0.5"]["settings"]["wise_from"] == src
    assert (itp / "tradeoff.png").is_file() and "sft-wise0.5" in (itp / "report.md").read_text()
    # each interpolated model's per-item grades, as a fine-tune's: alpha 1 grades every item as the fine-tune did,
    # and the verdict judges an interpolation against the comparison's front
    from anchorft.studies.testbed.verdict import base_verdict, load_scores

    for split in ("reported", "val"):
        scores = load_scores(out, ["sft", "sft-wise1", "lora", "lora-wise1"], split, also=["wise"])
        for src in ("sft", "lora"):
            assert all(np.array_equal(scores[src][k], scores[f"{src}-wise1"][k]) for k in scores[src]), (src, split)
    judged = base_verdict(out, ["sft-wise0.5"], ["sft", "lora"], n_boot=20, also=["wise"])
    assert np.isfinite(judged["sft-wise0.5"]["estimate"])
    with pytest.raises(ValueError, match="not in the comparison"):
        base_verdict(out, ["sft-wise0.5"], ["sft"], n_boot=20)
    # resumed: every (run, seed, alpha) cell is in the grid's record, none is evaluated again
    real_cell = interpolate._interpolated_cell
    monkeypatch.setattr(interpolate, "_interpolated_cell", lambda *a: pytest.fail("a recorded cell ran again"))
    again = interpolate.run_interpolate(out, ["sft", "lora"], [0.5, 1.0], itp, progress=False, resume=True)
    assert again["methods"] == got["methods"]
    # stopped mid-grid (after 2 of its 4 cells), then resumed: the 2 others run, none twice, the same results
    calls: list[str] = []

    def stopping(*a):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(a[-1].name)
        return real_cell(*a)

    monkeypatch.setattr(interpolate, "_interpolated_cell", stopping)
    part = tmp_path / "itp-part"
    with pytest.raises(KeyboardInterrupt):
        interpolate.run_interpolate(out, ["sft", "lora"], [0.5, 1.0], part, progress=False)
    first = list(calls)
    calls.clear()
    monkeypatch.setattr(interpolate, "_interpolated_cell", lambda *a: calls.append(a[-1].name) or real_cell(*a))
    resumed = interpolate.run_interpolate(out, ["sft", "lora"], [0.5, 1.0], part, progress=False, resume=True)
    assert len(first) == len(calls) == 2 and not set(first) & set(calls)
    assert resumed["methods"] == got["methods"]
    rep = tmp_path / "rep"
    pick = "--pick", "wise-sft=sft-wise0.5,sft-wise1"
    assert cli(["toy", "report", "--from", str(out), str(itp), "--out", str(rep), "--front", "sft", *pick]) == 0
    assert "wise-sft" in (rep / "front.md").read_text()


def test_interpolation_curves_are_additive():
    from anchorft.io import pyplot

    plt = pyplot()
    per = [{"seed": 0, "id_greedy": 0.3, "ood_mean": 0.5}]
    base = {"id_greedy": 0.1, "ood_mean": 0.9}
    results = {"base": base, "methods": {
        "sft": {"method": "sft", "settings": {}, "per_seed": per},
        "sft-wise0.5": {"method": "sft", "settings": {"wise_from": "sft", "wise_alpha": 0.5}, "per_seed": per},
        "l2-wise0.5": {"method": "l2", "settings": {"wise_from": "l2", "wise_alpha": 0.5}, "per_seed": per},
    }}  # fmt: skip
    fig, ax = plt.subplots()
    draw_interpolation_curves(ax, results)
    lines = ax.get_lines()
    assert len(lines) == 2 and len(lines[0].get_xdata()) == 3  # base, alpha 0.5, the run itself
    assert len(lines[1].get_xdata()) == 2  # the source run is not in the results: base and alpha 0.5
    fig2, ax2 = plt.subplots()
    draw_interpolation_curves(ax2, {"base": base, "methods": {"sft": results["methods"]["sft"]}})
    assert not ax2.get_lines()
    plt.close(fig)
    plt.close(fig2)


def test_interpolate_help_names_wise_ft(capsys):
    from anchorft.cli import main as cli

    assert cli(["toy", "interpolate", "--help"]) == 0
    assert "WiSE-FT weight interpolation" in capsys.readouterr().out
