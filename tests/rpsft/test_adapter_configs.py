"""What each adapter hands PEFT, field by field, and the words of its refusals: LoRA's config (the dropout the
user set, no bias, a causal LM), OSF's (effective_rank = anchor_rank), OSF's line about the matrices its rank
covers whole (the counts and the first such matrix, computed here from the model's shapes), and the merge's refusal
of DoRA and of LoRA biases. Written for the mutants `make mutants` left alive in `anchorft.rpsft.adapters`
(docs/testing.md)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from anchorft.rpsft.adapters import lora, osf
from anchorft.rpsft.peft_methods import peft_config_for, tuner_layers

MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def test_lora_config_carries_the_users_values(rp):
    base = rp.tiny_model("llama", 60)
    args = rp.base_args("unused", method="lora", lora_rank=4, lora_alpha=12.0, lora_dropout=0.25)
    cfg = peft_config_for(args, base)
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (4, 12.0, 0.25)
    assert cfg.bias == "none" and cfg.task_type == "CAUSAL_LM"


def test_osf_config_freezes_anchor_rank_directions_of_a_causal_lm(rp):
    base = rp.tiny_model("llama", 60)
    cfg = peft_config_for(rp.base_args("unused", method="osf", anchor_rank=4), base)
    assert cfg.effective_rank == 4
    assert cfg.task_type == "CAUSAL_LM"


def _covered(base, k: int) -> tuple[list[str], int]:
    """The adapted matrices whose smaller side is <= k (in the model's order), and how many are adapted."""
    adapted = [(n, m) for n, m in base.named_modules() if n.endswith(MATRICES)]
    return [n for n, m in adapted if k >= min(m.weight.shape)], len(adapted)


def test_osf_says_how_many_matrices_its_rank_covers_and_names_the_first(rp, caplog):
    base = rp.tiny_model("llama", 60)
    whole, n = _covered(base, 16)
    assert 0 < len(whole) < n  # GQA's k/v projections here
    with caplog.at_level(logging.WARNING, logger="anchorft.rpsft.adapters.osf"):
        peft_config_for(rp.base_args("unused", method="osf", anchor_rank=16), base)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "anchorft.rpsft.adapters.osf"]
    assert line == (
        f"osf: anchor_rank 16 >= min(m, n) for {len(whole)} of {n} matrices (e.g. {whole[0]}): these stay frozen at "
        "W_0 (nothing below rank 16 to train); a smaller anchor_rank trains them"
    )
    whole, _ = _covered(base, 32)
    with pytest.raises(ValueError) as e:
        peft_config_for(rp.base_args("unused", method="osf", anchor_rank=32), base)
    assert str(e.value) == (
        f"osf: anchor_rank=32 >= min(m, n) of every adapted matrix (e.g. {whole[0]}): OSF would train nothing; "
        "use a smaller anchor_rank"
    )


def test_osf_refuses_embeddings_in_one_line(rp):
    args = rp.base_args("unused", method="lora", lora_target_modules="all-linear-embedding")
    assert osf.refuse(args) == "lora_target_modules='all-linear-embedding': OSF adapts linear layers only"
    assert osf.refuse(rp.base_args("unused", method="lora")) is None


@pytest.mark.parametrize("option", ["use_dora", "lora_bias"])
def test_lora_merge_refuses_dora_and_lora_biases(rp, option):
    from peft import LoraConfig, get_peft_model

    base = rp.tiny_model("llama", 60)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], task_type="CAUSAL_LM", **{option: True})
    model = get_peft_model(copy.deepcopy(base), cfg)
    state = {k: v for k, v in model.state_dict().items()}
    (name, layer), *_ = tuner_layers(model)
    with pytest.raises(ValueError) as e:
        lora.delta(layer, name, "default", state)
    assert str(e.value) == f"{name}: DoRA and LoRA biases are not merged here (plain LoRA only)"
    plain = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    (name, layer), *_ = tuner_layers(plain)
    d = lora.delta(layer, name, "default", plain.state_dict())
    assert isinstance(d, torch.Tensor) and d.shape == layer.base_layer.weight.shape
