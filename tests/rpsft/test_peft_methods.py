"""The PEFT methods' merge (`anchorft.rpsft.peft_methods`) and the strict loading every trained or evaluated model
goes through (`anchorft.eval.loading`).

The merge writes each update out from the adapter's tensors; the references here are independent of it: LoRA's
update is (alpha / r) B A with alpha and r the run's configured values (not PEFT's stored scaling), and OSF's is
PEFT's own `merge_and_unload` on a copy."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from anchorft.eval.loading import check_loading_info, load_causal_lm
from anchorft.rpsft.peft_methods import gather_adapter, merge_adapter, peft_config_for, tuner_layers

TARGETS = r".*\.(q_proj|v_proj|down_proj)"  # a string is a regex to PEFT
ADAPTED = ("q_proj", "v_proj", "down_proj")


def _adapted(rp, base, **kw):
    """(args, PEFT model built by `peft_config_for(args)` on a copy of `base`, its adapter moved off the start)."""
    from peft import get_peft_model

    args = rp.base_args("unused", lora_target_modules=TARGETS, **kw)
    model = get_peft_model(copy.deepcopy(base), peft_config_for(args))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # LoRA's B starts at 0, OSF's factors at W_0's: a random step moves both
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return args, model


def _lora_error(merged, base, model, alpha: float, r: int) -> float:
    """max over adapted weights of |merged - W_0 - (alpha / r) B A| / max |(alpha / r) B A|."""
    weights, start = dict(merged.named_parameters()), dict(base.named_parameters())
    worst, seen = 0.0, 0
    for name, mod in model.named_modules():
        if not hasattr(mod, "lora_A") or "default" not in mod.lora_A:
            continue
        key = name.removeprefix("base_model.model.") + ".weight"
        want = ((alpha / r) * mod.lora_B["default"].weight @ mod.lora_A["default"].weight).detach()
        got = weights[key] - start[key]
        worst = max(worst, float((got - want).abs().max()) / float(want.abs().max()))
        seen += 1
    assert seen == 2 * 3  # q, v and down in each of the 2 layers
    return worst


def test_lora_update_is_alpha_over_r_times_BA(rp):
    base = rp.tiny_model("llama", 60)
    args, model = _adapted(rp, base, method="lora", lora_rank=4, lora_alpha=12.0)
    merged = merge_adapter(copy.deepcopy(base), model, gather_adapter(model))
    assert _lora_error(merged, base, model, alpha=12.0, r=4) < 1e-6
    untouched = [n for n in dict(base.named_parameters()) if not any(t in n for t in ADAPTED)]
    assert all(torch.equal(dict(merged.named_parameters())[n], dict(base.named_parameters())[n]) for n in untouched)
    # the check discriminates: an adapter built with alpha = r (scaling 1) is off by a factor of 3
    _, plain = _adapted(rp, base, method="lora", lora_rank=4, lora_alpha=4.0)
    wrong = merge_adapter(copy.deepcopy(base), plain, gather_adapter(plain))
    assert _lora_error(wrong, base, plain, alpha=12.0, r=4) > 0.5


def test_osf_merge_equals_peft_merge(rp):
    base = rp.tiny_model("llama", 60)
    _, model = _adapted(rp, base, method="osf", anchor_rank=4)
    state = gather_adapter(model)
    assert any("_osf_U_low_init" in k for k in state)  # the frozen parts travel with the factors
    merged = dict(merge_adapter(copy.deepcopy(base), model, state).named_parameters())
    want = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    moved = 0.0
    for n, w in want.items():
        torch.testing.assert_close(merged[n], w, rtol=0, atol=1e-5)
        moved = max(moved, float((w - dict(base.named_parameters())[n]).abs().max()))
    assert moved > 1e-2


def _save(model, path) -> str:
    model.save_pretrained(path)
    return str(path)


def test_a_folder_with_a_missing_or_renamed_key_is_refused_in_one_line(rp, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _save(rp.tiny_model("llama", 60), tmp_path / "m")
    path = os.path.join(folder, "model.safetensors")
    weights = load_file(path)
    save_file({k: v for k, v in weights.items() if k != "model.norm.weight"}, path)
    with pytest.raises(ValueError) as e:
        load_causal_lm(folder)
    msg = str(e.value)
    assert "\n" not in msg and folder in msg and "1 missing (first: model.norm.weight)" in msg
    # an engine's PEFT state dict: every key prefixed, so every weight missing and every key unexpected
    save_file({f"base_model.model.{k}": v for k, v in weights.items()}, path)
    with pytest.raises(ValueError, match=r"missing \(first: .*unexpected \(first: base_model\.model\."):
        load_causal_lm(folder)


def test_tied_embeddings_load(rp, tmp_path):
    """A tied lm_head has no key of its own: transformers does not report it, and the loader takes the folder."""
    tied = rp.tiny_model("qwen2", 60, tie=True)
    folder = _save(tied, tmp_path / "q")
    model = load_causal_lm(folder)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    torch.testing.assert_close(model.model.embed_tokens.weight, tied.model.embed_tokens.weight)


def test_check_loading_info_reports_each_kind():
    check_loading_info({"missing_keys": [], "unexpected_keys": set(), "mismatched_keys": []}, "m")
    with pytest.raises(ValueError, match=r"^m: .*1 mismatched \(first: w\)"):
        check_loading_info({"mismatched_keys": [("w", (2, 2), (3, 2))]}, "m")


@pytest.mark.parametrize(
    "kw, launch, line",
    [
        (dict(method="osf"), dict(deepspeed={"zero_optimization": {"stage": 3}}), "OSF cannot run under ZeRO-3"),
        (dict(method="osf"), dict(fsdp="full_shard", fsdp_config={"version": 1}), "cannot run under FSDP1"),
        (dict(method="lora", lora_anchor=True), dict(fsdp="full_shard", fsdp_config={"version": 1}), "under FSDP1"),
    ],
)
def test_launch_refusals(rp, kw, launch, line):
    """Refused before any model is loaded (the `args` stand in for a launch: only the fields `check_launch` reads);
    OSF and the adapter anchor run under ZeRO-2, ZeRO-3 (lora) and FSDP2 (the distributed matrix's cells)."""
    from types import SimpleNamespace

    from anchorft.rpsft.methods import get_method
    from anchorft.rpsft.train import check_launch

    args = SimpleNamespace(method_spec=get_method(kw["method"]), lora_anchor=kw.get("lora_anchor", False), **launch)
    with pytest.raises(ValueError, match=line):
        check_launch(args, False, f"method={kw['method']!r}")
    for ok in (
        dict(deepspeed={"zero_optimization": {}}),
        dict(fsdp="full_shard", fsdp_config={"version": 2}),
        *([dict(deepspeed={"zero_optimization": {"stage": 3}})] if kw["method"] == "lora" else []),
    ):
        check_launch(SimpleNamespace(method_spec=get_method(kw["method"]), lora_anchor=True, **ok), False, "x")


def test_osf_projection_after_backward_equals_peft_hooks(rp):
    """OSF's `project_grads_` (what the trainer applies under FSDP2, where PEFT's hooks are lost) gives the gradient
    PEFT's own hooks give, for square and non-square factors (q_proj 32 x 32, down_proj 32 x 64, up_proj 64 x 32);
    without any projection the gradient differs."""
    from peft import get_peft_model

    from anchorft.rpsft.adapters.osf import project_grads_ as osf_project_grads_

    base = rp.tiny_model("llama", 60)
    args = rp.base_args("unused", method="osf", anchor_rank=4, lora_target_modules=r".*\.(q_proj|down_proj|up_proj)")
    ids = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(0))

    def grads(hooks: bool, project: bool) -> dict[str, torch.Tensor]:
        model = get_peft_model(copy.deepcopy(base), peft_config_for(args))
        if not hooks:
            for _, layer in tuner_layers(model):
                layer._detach_hooks()
        model(input_ids=ids, labels=ids).loss.backward()
        if project:
            osf_project_grads_(model)
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want, got, raw = grads(True, False), grads(False, True), grads(False, False)
    assert {k.rsplit(".", 1)[-1] for k in want} == {"U_low", "S_low", "V_low"}
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7, msg=name)
    # without the projection the gradient is off by far more than the tolerance (3.6e-4 here, against 1e-7 + 1e-5 |g|)
    assert max(float((raw[n] - want[n]).abs().max()) for n in want) > 1e-4
    twice = grads(True, True)  # a projection: applying it after PEFT's hooks changes nothing
    for name in want:
        torch.testing.assert_close(twice[name], want[name], rtol=1e-5, atol=1e-7, msg=name)


def test_a_lora_run_saves_a_plain_model_and_its_checkpoints_the_adapter(rp, tmp_path):
    """`train` then the final `save_model` (as `anchorft train` ends): the folder loads strictly, and its weights are
    the base's plus (alpha / r) B A of the adapter that the last checkpoint kept (checkpoint-N/adapter/)."""
    import json

    from safetensors.torch import load_file

    from anchorft.rpsft.train import train

    base_dir = str(tmp_path / "base")
    tok = rp.build_tokenizer(base_dir)
    base = rp.tiny_model("llama", len(tok))
    base.save_pretrained(base_dir)
    out = str(tmp_path / "out")
    args = rp.base_args(out, method="lora", lora_rank=4, lora_alpha=12.0, max_steps=2, save_strategy="steps",
                        save_steps=2)  # fmt: skip
    tr = train(args, base_dir, rp.pc_dataset(8), tokenizer=tok)
    tr.save_model(out)
    saved = dict(load_causal_lm(out).named_parameters())
    state = load_file(os.path.join(out, "checkpoint-2", "adapter", "adapter_state.safetensors"))
    with open(os.path.join(out, "checkpoint-2", "adapter", "adapter_config.json")) as f:
        cfg = json.load(f)["default"]
    assert (cfg["r"], cfg["lora_alpha"]) == (4, 12.0)
    start, adapted = dict(base.named_parameters()), 0
    for key, a in state.items():
        if ".lora_A." not in key:
            continue
        b = state[key.replace(".lora_A.", ".lora_B.")]
        name = key.removeprefix("base_model.model.").replace(".lora_A.default.weight", ".weight")
        torch.testing.assert_close(saved[name], start[name] + (12.0 / 4) * b @ a, rtol=0, atol=1e-6)
        adapted += float((b @ a).abs().max()) > 0
    assert adapted > 0  # the adapter moved


def _trained_then_merged(base, model):
    """`model` (PEFT around a copy of `base`) with its adapter weights moved as by training, merged into another copy
    of `base`; the merged plain model must compute what the PEFT model computes. Returns the merged model."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
        merged = merge_adapter(copy.deepcopy(base), model, gather_adapter(model))
        ids = torch.tensor([[1, 5, 9, 13, 2]])
        got, ref = merged(input_ids=ids).logits, model(input_ids=ids).logits
    assert float((got - ref).abs().max()) < 1e-4 * float(ref.abs().max())
    return merged


def test_release_targets_adapt_every_linear_and_embedding_and_merge_to_the_trained_function(rp):
    """lora_target_modules='all-linear-embedding' (the release's set but lm_head, which TRL's SFTTrainer cannot
    adapt) adapts every nn.Linear and nn.Embedding but the output layer, and the merged plain model computes what
    the PEFT model computes."""
    from peft import get_peft_model
    from torch import nn

    from anchorft.rpsft.peft_methods import RELEASE_TARGETS

    base = rp.tiny_model("llama", 60)
    args = rp.base_args("unused", method="lora", lora_rank=4, lora_alpha=12.0, lora_target_modules=RELEASE_TARGETS)
    model = get_peft_model(copy.deepcopy(base), peft_config_for(args, base))
    want = {n for n, m in base.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))} - {"lm_head"}
    adapted = {n.removeprefix("base_model.model.") for n, _ in tuner_layers(model)}
    assert want == adapted and "model.embed_tokens" in adapted
    merged = _trained_then_merged(base, model)
    emb = "model.embed_tokens.weight"
    assert not torch.equal(dict(merged.named_parameters())[emb], dict(base.named_parameters())[emb])


def test_tied_or_osf_release_targets_are_refused_in_one_line(rp):
    from anchorft.rpsft.peft_methods import RELEASE_TARGETS

    tied = rp.tiny_model("qwen2", 60, tie=True)
    args = rp.base_args("unused", method="lora", lora_target_modules=RELEASE_TARGETS)
    with pytest.raises(ValueError, match="shares its weight with .*tie_word_embeddings") as e:
        peft_config_for(args, tied)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="lm_head shares its weight"):  # a regex that names the tied layer too
        peft_config_for(rp.base_args("unused", method="lora", lora_target_modules=r"lm_head"), tied)
    with pytest.raises(ValueError, match="OSF adapts linear layers only"):
        rp.base_args("unused", method="osf", anchor_rank=2, lora_target_modules=RELEASE_TARGETS)


def test_trainer_given_a_path_resolves_the_release_targets(rp, model_dir, dataset, tmp_path):
    """RPSFTTrainer(model=PATH) with the release's targets loads the model to list them: embed_tokens is adapted."""
    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.peft_methods import RELEASE_TARGETS
    from anchorft.rpsft.trainer import RPSFTTrainer

    args = rp.base_args(str(tmp_path / "out"), method="lora", lora_target_modules=RELEASE_TARGETS, max_steps=1)
    tr = RPSFTTrainer(model=model_dir, args=args, train_dataset=dataset, processing_class=load_tokenizer(model_dir))
    names = {n.removeprefix("base_model.model.") for n, _ in tuner_layers(tr.model)}
    assert {"model.embed_tokens", "model.layers.0.mlp.down_proj"} <= names and "lm_head" not in names


def test_a_lora_rank_past_the_adapted_matrices_is_refused(rp):
    """`--lora_rank 512` on a width-32 model: one line (it was accepted); a rank past GQA's k/v sides only is not."""
    base = rp.tiny_model("llama", 60)
    with pytest.raises(
        ValueError, match=r"lora_rank=512 exceeds the smaller side of every adapted matrix \(at most 32\)"
    ):
        peft_config_for(rp.base_args("unused", method="lora", lora_rank=512), base)
    assert peft_config_for(rp.base_args("unused", method="lora", lora_rank=32), base).r == 32  # past k/v's 16 only


def test_the_lora_rank_check_reads_partitioned_weights_whole(rp):
    """Under ZeRO-3 a weight holds an empty partition and its whole shape in ds_shape: the check reads that (it
    refused every rank there once)."""
    base = rp.tiny_model("llama", 60)
    for p in base.parameters():
        p.ds_id, p.ds_shape = 0, tuple(p.shape)
        p.data = torch.empty(0)
    assert peft_config_for(rp.base_args("unused", method="lora", lora_rank=4), base).r == 4


def test_a_peft_method_is_a_registered_adapter():
    """The methods table takes a PEFT method only by a registered adapter's name; the merge asks the registry which
    method owns a layer, and refuses a layer no registered method owns."""
    import torch

    from anchorft.rpsft.adapters import ADAPTERS, Adapter, get_adapter, register
    from anchorft.rpsft.methods import Method
    from anchorft.rpsft.peft_methods import _update

    assert sorted(ADAPTERS) == ["lora", "osf"]
    with pytest.raises(ValueError, match="registered: \\['lora', 'osf'\\]"):
        get_adapter("ia3")
    with pytest.raises(ValueError, match="peft must be None or one of"):
        Method("x", "a method", peft="ia3")

    class Scaled(torch.nn.Module):
        pass

    def delta(layer, name, adapter, state):
        return state[f"{name}.scale.{adapter}"] * torch.eye(2)

    try:
        register(Adapter("scaled", config=lambda *a: None, owns=lambda layer: isinstance(layer, Scaled), delta=delta))
        Method("x", "a method", peft="scaled")
        got = _update(Scaled(), "m", "default", {"m.scale.default": torch.tensor(3.0)})
        assert torch.equal(got, 3.0 * torch.eye(2))
    finally:
        ADAPTERS.pop("scaled", None)
    with pytest.raises(ValueError, match="Scaled adapter is not merged here"):
        _update(Scaled(), "m", "default", {})


def test_osf_leaves_out_the_matrices_its_rank_covers_whole(rp, caplog):
    """anchor_rank >= min(m, n) (GQA's k/v projections at 16 x 32 here, Qwen2.5-3B's at 256 x 2048 under the
    recipes' 768): PEFT would give such a matrix 0-element U_low / V_low, whose CUDA strides break DeepSpeed's first
    broadcast. They are left out of the targets (frozen at W_0, the same function), said in one line; a rank that
    covers every matrix is refused."""
    from peft import get_peft_model

    base = rp.tiny_model("llama", 60)
    args = rp.base_args("unused", method="osf", anchor_rank=16)
    model = get_peft_model(copy.deepcopy(base), peft_config_for(args, base))
    names = {n.removeprefix("base_model.model.") for n, _ in tuner_layers(model)}
    assert names and not any(n.endswith(("k_proj", "v_proj")) for n in names)
    assert any(n.endswith("q_proj") for n in names)
    assert all(p.numel() > 0 for p in model.parameters() if p.requires_grad)
    assert "these stay frozen at W_0" in caplog.text
    with pytest.raises(ValueError, match=r"anchor_rank=32 >= min\(m, n\) of every adapted matrix"):
        peft_config_for(rp.base_args("unused", method="osf", anchor_rank=32), base)


def test_osf_projects_a_bf16_gradient_with_float32_bases(rp, model_dir, dataset, tmp_path):
    """DeepSpeed's bf16 casts parameters and keeps buffers (OSF's bases) in float32: PEFT's own hooks then multiply
    a bf16 gradient by a float32 basis and torch refuses (seen under ZeRO-2 on a GPU). The trainer's hooks project
    it in float32 and return bf16: the gradient equals the float32 projection of the same bf16 gradient, rounded."""
    from peft import get_peft_model

    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.adapters.osf import projection
    from anchorft.rpsft.trainer import RPSFTTrainer

    def cast_params(model):  # what DeepSpeed's `_cast_module_mixed_precision` does with bf16 on
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16)

    ids = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    args = rp.base_args(str(tmp_path / "out"), method="osf", anchor_rank=4, max_steps=1)
    peft_only = get_peft_model(load_causal_lm(model_dir), peft_config_for(args))
    cast_params(peft_only)
    with pytest.raises(RuntimeError, match="same dtype"):
        peft_only(input_ids=ids, labels=ids).loss.backward()

    tr = RPSFTTrainer(model=model_dir, args=args, train_dataset=dataset, processing_class=load_tokenizer(model_dir))
    cast_params(tr.model)
    layers = dict(tuner_layers(tr.model))
    assert layers and all(ly._osf_U_low_init["default"].dtype == torch.float32 for ly in layers.values())
    tr.model(input_ids=ids, labels=ids).loss.backward()  # through the trainer's hooks
    got = {
        (n, k): ly.osf_svd_params["default"][k].grad.clone() for n, ly in layers.items() for k in ("U_low", "V_low")
    }
    tr.model.zero_grad()
    for ly in layers.values():
        ly._detach_hooks()
    tr.model(input_ids=ids, labels=ids).loss.backward()  # the same batch, no projection: the raw bf16 gradient
    for (name, key), g in got.items():
        raw = layers[name].osf_svd_params["default"][key].grad
        assert g.dtype == raw.dtype == torch.bfloat16
        torch.testing.assert_close(g, projection(layers[name], "default", key, raw), rtol=0, atol=0)
        assert not torch.equal(g, raw)


def test_release_targets_include_gpt2s_conv1d_layers_and_merge_to_the_trained_function():
    """GPT-2's attention and MLP layers are transformers' Conv1D (a linear layer with a transposed weight), which
    PEFT's 'all-linear' adapts: the release set adapts them too, and the merged model computes what PEFT's does."""
    from peft import get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.pytorch_utils import Conv1D

    from anchorft.rpsft.config import RPSFTConfig
    from anchorft.rpsft.peft_methods import RELEASE_TARGETS, _targeted

    torch.manual_seed(0)  # test-only: the tiny model's init
    cfg = GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=2, tie_word_embeddings=False)
    base = GPT2LMHeadModel(cfg).eval()
    args = RPSFTConfig(output_dir="unused", method="lora", lora_rank=2, lora_alpha=4.0,
                       lora_target_modules=RELEASE_TARGETS, use_cpu=True)  # fmt: skip
    conv = {n for n, m in base.named_modules() if isinstance(m, Conv1D)}
    assert len(conv) == 8 and conv <= {n for n, _ in _targeted(base, "all-linear")}
    model = get_peft_model(copy.deepcopy(base), peft_config_for(args, base))
    adapted = {n.removeprefix("base_model.model.") for n, _ in tuner_layers(model)}
    assert conv <= adapted and {"transformer.wte", "transformer.wpe"} <= adapted and "lm_head" not in adapted
    _trained_then_merged(base, model)
