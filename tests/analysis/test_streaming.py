"""Streamed (safetensors, one matrix at a time) and in-memory analyses agree; bad input is named."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from anchorft.analysis.config import AnalysisConfig
from anchorft.analysis.run import analyze_rotation, run_analysis
from anchorft.analysis.streaming import (
    CheckpointError,
    InMemoryWeights,
    SafetensorsWeights,
    analysed_matrices,
    layer_index,
    matrix_type,
)

from .conftest import save_model, tiny_config


def test_names_types_layers():
    assert matrix_type("model.layers.3.self_attn.q_proj.weight") == "q"
    assert matrix_type("model.layers.3.mlp.down_proj.weight") == "down"
    assert matrix_type("model.embed_tokens.weight") == "embed"
    assert matrix_type("lm_head.weight") == "lm_head"
    assert layer_index("model.layers.12.mlp.up_proj.weight") == 12
    assert layer_index("lm_head.weight") is None


def test_analysed_matrices_exclude_what_the_anchor_excludes():
    w = torch.zeros(2, 2)
    names = [
        "model.layers.0.self_attn.q_proj.weight",
        "model.vision_tower.blocks.0.fc.weight",
        "model.visual.proj.weight",
        "model.layers.0.cross_attention.q_proj.weight",
        "model.image_encoder.fc.weight",
        "model.layers.0.input_layernorm.weight",
    ]
    src = InMemoryWeights({n: (w if "layernorm" not in n else w[0]) for n in names})
    assert analysed_matrices(src) == ["model.layers.0.self_attn.q_proj.weight"]


def test_sharded_equals_single_file(checkpoints):
    single, sharded = SafetensorsWeights(checkpoints["base"]), SafetensorsWeights(checkpoints["base_sharded"])
    assert (checkpoints["base_sharded"] / "model.safetensors.index.json").is_file()
    assert sorted(single.names()) == sorted(sharded.names())
    for n in single.names():
        assert torch.equal(single.get(n), sharded.get(n))


def test_streamed_equals_in_memory(checkpoints):
    names = analysed_matrices(SafetensorsWeights(checkpoints["base"]))
    assert len(names) == 2 * 7 + 2  # 7 per layer + embed + lm_head
    streamed = analyze_rotation(
        SafetensorsWeights(checkpoints["base_sharded"]),
        {"small": SafetensorsWeights(checkpoints["small"])},
        names,
        k=4,
        progress=False,
    )
    mem = analyze_rotation(
        InMemoryWeights.from_model(AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)),
        {"small": InMemoryWeights.from_model(AutoModelForCausalLM.from_pretrained(checkpoints["small"]))},
        names,
        k=4,
        progress=False,
    )
    assert streamed == mem  # exactly the same numbers


def test_run_analysis_streamed_equals_in_memory(checkpoints, tmp_path):
    common = dict(base=str(checkpoints["base"]), tuned={"small": str(checkpoints["small"])}, rank=4, plots=False)
    a = run_analysis(AnalysisConfig(out=str(tmp_path / "s"), streaming=True, **common), progress=False)
    b = run_analysis(AnalysisConfig(out=str(tmp_path / "m"), streaming=False, **common), progress=False)
    assert a["rotation"] == b["rotation"]
    on_disk = json.loads((tmp_path / "s" / "analysis.json").read_text())
    assert on_disk["rotation"]["small"]["overall"] == pytest.approx(a["rotation"]["small"]["overall"])


def test_identical_model_has_no_rotation(checkpoints, tmp_path):
    res = run_analysis(
        AnalysisConfig(
            base=str(checkpoints["base"]),
            tuned={"same": str(checkpoints["base_sharded"])},
            out=str(tmp_path),
            rank=4,
            plots=False,
            exclude="embed_tokens|lm_head",
        ),
        progress=False,
    )
    assert res["matrices"] == 14 and "lm_head.weight" not in res["rotation"]["same"]["per_matrix"]
    o = res["rotation"]["same"]["overall"]
    assert o["angle_u_max_deg"] < 1e-5 and o["angle_v_max_deg"] < 1e-5
    assert o["weight_rel_change"] == 0.0 and o["sv_rel_change"] == 0.0


def test_larger_perturbation_rotates_more(checkpoints, tmp_path):
    res = run_analysis(
        AnalysisConfig(
            base=str(checkpoints["base"]),
            tuned={"small": str(checkpoints["small"]), "large": str(checkpoints["large"])},
            out=str(tmp_path),
            rank=4,
        ),
        progress=False,
    )
    r = res["rotation"]
    assert r["large"]["overall"]["angle_u_mean_deg"] > r["small"]["overall"]["angle_u_mean_deg"] > 0
    for f in (
        "rotation_heatmap_small.png",
        "rotation_heatmap_large.png",
        "rotation_by_type.png",
        "singular_values.png",
    ):
        assert (tmp_path / f).stat().st_size > 1000


def test_different_architecture_is_named(checkpoints, tokenizer, tmp_path):
    torch.manual_seed(0)
    other = save_model(LlamaForCausalLM(tiny_config(len(tokenizer), hidden_size=48)), tokenizer, tmp_path / "wide")
    cfg = AnalysisConfig(base=str(checkpoints["base"]), tuned={"wide": str(other)}, out=str(tmp_path / "o"))
    with pytest.raises(CheckpointError, match=r"tuned 'wide'.*'hidden_size' is 48 there and 32 in base"):
        run_analysis(cfg, progress=False)
    assert not (tmp_path / "o").exists()  # refused before any work


def test_different_weights_same_config_is_named(checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "cut"
    shutil.copytree(checkpoints["small"], d)
    sd = load_file(d / "model.safetensors")
    sd["model.layers.1.mlp.up_proj.weight"] = sd["model.layers.1.mlp.up_proj.weight"][:-1].contiguous()
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    cfg = AnalysisConfig(base=str(checkpoints["base"]), tuned={"cut": str(d)}, out=str(tmp_path / "o"))
    with pytest.raises(CheckpointError, match=r"model.layers.1.mlp.up_proj.weight' has shape \(47, 32\)"):
        run_analysis(cfg, progress=False)


def test_rank_above_matrix_size_is_named(checkpoints, tmp_path):
    # k_proj is 16 x 32 (2 kv heads of dim 8): rank 17 exceeds it
    cfg = AnalysisConfig(
        base=str(checkpoints["base"]), tuned={"s": str(checkpoints["small"])}, out=str(tmp_path), rank=17
    )
    with pytest.raises(
        ValueError, match=r"rank 17 exceeds min\(m, n\) = 16 of model.layers.0.self_attn.k_proj.weight"
    ):
        run_analysis(cfg, progress=False)


def test_missing_checkpoint_is_named(checkpoints, tmp_path):
    cfg = AnalysisConfig(
        base=str(checkpoints["base"]), tuned={"gone": str(tmp_path / "nope")}, out=str(tmp_path / "o")
    )
    with pytest.raises(CheckpointError, match=r"tuned 'gone' checkpoint not found: .*nope"):
        run_analysis(cfg, progress=False)
    d = tmp_path / "noweights"
    d.mkdir()
    shutil.copy(checkpoints["base"] / "config.json", d / "config.json")
    cfg = AnalysisConfig(base=str(d), tuned={"s": str(checkpoints["small"])}, out=str(tmp_path / "o"))
    with pytest.raises(CheckpointError, match=r"base checkpoint .*noweights has no model.safetensors"):
        run_analysis(cfg, progress=False)


def test_bad_settings_are_named(checkpoints, tmp_path):
    common = dict(base=str(checkpoints["base"]), tuned={"s": str(checkpoints["small"])}, out=str(tmp_path))
    with pytest.raises(ValueError, match="fisher_random must be >= 1"):
        run_analysis(AnalysisConfig(fisher_random=0, **common), progress=False)
    with pytest.raises(ValueError, match="exclude: not a regular expression"):
        run_analysis(AnalysisConfig(exclude="(", **common), progress=False)
    with pytest.raises(ValueError, match="prompt file not found: .*none.jsonl"):
        run_analysis(AnalysisConfig(prompts=[str(tmp_path / "none.jsonl")], **common), progress=False)
