"""Hidden-state drift (against loops), prompt files, rank sensitivity and the `anchorft analyze` command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from anchorft.analysis.drift import drift_metrics, prompt_hidden_means
from anchorft.analysis.prompts import load_prompts, render
from anchorft.analysis.rank import rank_sensitivity
from anchorft.commands.analyze import main


def test_drift_metrics_against_numpy():
    g = np.random.default_rng(0)
    base, tuned = g.normal(size=(5, 3, 4)), g.normal(size=(5, 3, 4))
    d = drift_metrics(torch.tensor(base), torch.tensor(tuned))
    for layer in range(3):
        mu0, mu = base[:, layer].mean(0), tuned[:, layer].mean(0)
        assert d["l2"][layer] == pytest.approx(np.linalg.norm(mu - mu0))
        assert d["rel_l2"][layer] == pytest.approx(np.linalg.norm(mu - mu0) / np.linalg.norm(mu0))
        assert d["cos_dist"][layer] == pytest.approx(1 - mu @ mu0 / np.linalg.norm(mu) / np.linalg.norm(mu0))
        pc = [1 - a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(tuned[:, layer], base[:, layer])]
        assert d["prompt_cos_dist"][layer] == pytest.approx(np.mean(pc))
    zero = drift_metrics(torch.tensor(base), torch.tensor(base))
    assert max(zero["l2"]) == 0.0 and max(zero["prompt_cos_dist"]) < 1e-12


def test_hidden_means_ignore_padding(checkpoints, tokenizer, prompt_files):
    model = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)
    items = load_prompts(prompt_files["plain"])
    batched = prompt_hidden_means(model, tokenizer, items, batch_size=5)
    single = prompt_hidden_means(model, tokenizer, items, batch_size=1)
    assert batched.shape == (5, 3, 32)  # prompts, layers + embeddings, hidden
    assert torch.allclose(batched, single, atol=1e-5)
    # per-prompt loop by hand
    ids = tokenizer(items[2].prompt)["input_ids"]
    hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    assert torch.allclose(batched[2, -1], hs[-1][0].double().mean(0), atol=1e-5)


def test_prompt_files(prompt_files, tokenizer, tmp_path):
    chat = load_prompts(prompt_files["chat"], limit=2)
    assert len(chat) == 2 and isinstance(chat[0].prompt, list)
    assert "user: the cat" in render(tokenizer, chat[0].prompt)
    pc = load_prompts(prompt_files["pc"])
    assert pc[0].completion is not None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: field 'prompt' is missing"):
        load_prompts(bad)


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


def test_cli_end_to_end(checkpoints, prompt_files, tmp_path, capsys):
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    results = {
        "base": {"id_avg@k": 0.1, "ood_mean": 0.6},
        "methods": {
            "sft": {"id_avg@k": 0.5, "ood_mean": 0.2, "method": "sft", "settings": {}},
            "rpsft-k2": {"id_avg@k": 0.4, "ood_mean": 0.4, "method": "rpsft", "settings": {"anchor_rank": 2}},
        },
    }
    (cmp_dir / "results.json").write_text(json.dumps(results))
    out = tmp_path / "out"
    argv = ["--base", str(checkpoints["base"]), "--tuned", f"small={checkpoints['small']}"]
    argv += ["--tuned", f"large={checkpoints['large']}", "--out", str(out), "--rank", "4"]
    argv += ["--prompts", str(prompt_files["plain"]), "--prompts", str(prompt_files["chat"])]
    argv += ["--fisher-data", str(prompt_files["pc"]), "--fisher-samples", "3", "--compare", str(cmp_dir)]
    argv += ["--fisher-ood-data", str(prompt_files["pc"])]
    assert main(argv) == 0
    res = json.loads((out / "analysis.json").read_text())
    assert set(res) >= {"rotation", "drift", "fisher", "rank_sensitivity"}
    assert set(res["drift"]) == {"plain", "chat"}
    d = res["drift"]["plain"]["models"]
    assert d["large"]["rel_l2"][-1] > d["small"]["rel_l2"][-1] > 0
    assert res["fisher"]["ranks"] == [1, 2, 4] and res["fisher"]["samples"] == 3
    fp = res["fisher_projected"]
    assert (fp["ranks"], fp["id_samples"], fp["ood_samples"]) == ([1, 2, 4], 3, 3)
    assert "fisher_projected_overlap.png" in res["figures"]
    assert [p["k"] for p in res["rank_sensitivity"]["points"]] == [0, 2]
    for f in res["figures"]:
        assert (out / f).stat().st_size > 1000
    assert {"drift_plain.png", "fisher_overlap.png", "rank_sensitivity.png"} <= set(res["figures"])
    assert json.loads((out / "config.json").read_text())["resolved_rank"] == 4


def test_cli_bad_input_returns_2(checkpoints, tmp_path, capsys):
    assert main(["--base", str(checkpoints["base"]), "--tuned", "x", "--out", str(tmp_path)]) == 2
    assert "--tuned must be NAME=DIR" in capsys.readouterr().err
    argv = ["--base", str(tmp_path / "missing"), "--tuned", f"s={checkpoints['small']}", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "base checkpoint not found" in capsys.readouterr().err


def test_cli_finds_models_of_a_comparison(checkpoints, tmp_path):
    import shutil

    cmp_dir = tmp_path / "cmp"
    for name, src in (("base", "base"), ("zeta", "small"), ("alpha", "large"), ("zeta-seed1", "small")):
        shutil.copytree(checkpoints[src], cmp_dir / "models" / name)
    zeta, alpha = {"ood_mean": 0.1, "method": "sft"}, {"ood_mean": 0.2, "method": "dft"}
    results = {"base": {}, "methods": {"zeta": zeta, "alpha": alpha}}
    (cmp_dir / "results.json").write_text(json.dumps(results))
    out = tmp_path / "out"
    assert main(["--compare", str(cmp_dir), "--out", str(out), "--rank", "2", "--no-plots"]) == 0
    res = json.loads((out / "analysis.json").read_text())
    assert list(res["tuned"]) == ["zeta", "alpha"]  # results.json order; seed copies left out
    assert res["base"] == str(cmp_dir / "models" / "base")
