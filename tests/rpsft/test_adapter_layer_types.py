"""A PEFT run's merge (`anchorft.rpsft.train.merge_peft_run`: `gather_adapter`, then `merge_adapter` into a plain
model) on every layer type PEFT adapts here: nn.Linear (Llama, Qwen2), nn.Embedding (embed_tokens, GPT-2's wte and
wpe) and GPT-2's `Conv1D`, whose weight is stored transposed, (in, out), and which PEFT adapts as a
`fan_in_fan_out` Linear.

Two checks, each independent of the merge code and of PEFT's `get_delta_weight`:
- the merged plain model's logits equal the adapter model's on random tokens;
- every merged weight equals W_0 plus the update written out here from the adapter's factors, with the configured
  scaling alpha / r: s B A for a Linear (weight (out, in)), s A^T B^T = s (B A)^T for a Conv1D (weight (in, out)),
  and for an Embedding, whose factors PEFT stores as A (r, vocabulary) and B (hidden, r) and applies as
  emb(x) + s onehot(x) A^T B^T, s A^T B^T (vocabulary, hidden).

Every trainable tensor is set to random values first: a fresh LoRA has B = 0 (and an Embedding's A = 0), so any
merge would be right. Tolerances (float32, ulp 2.4e-7 at 2): a merged weight is W_0 + s B A summed in
another order than here, a few ulps of its largest entry (|W| < 4): WEIGHT_ATOL 2e-6 (measured: 3.6e-7). The
logits come through one or two layers in which x (W_0 + s B A)^T replaces x W_0^T + s (x A^T) B^T, a few ulps per
product, times the depth: LOGIT_ATOL 1e-5 on logits of size ~0.4 (measured: 2.4e-6), while the adapter moves them
by more than 0.1."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D

from anchorft.rpsft.peft_methods import RELEASE_TARGETS, gather_adapter, merge_adapter, peft_config_for, tuner_layers
from anchorft.rpsft.train import merge_peft_run

# the project's LoraConfig leaves fan_in_fan_out at False; PEFT sets it for a Conv1D, and says so
pytestmark = pytest.mark.filterwarnings("ignore:fan_in_fan_out is set to False:UserWarning")

RANK, ALPHA = 4, 12.0  # scaling alpha / r = 3: a merge that drops it is off by a factor of 3
WEIGHT_ATOL, LOGIT_ATOL = 2e-6, 1e-5

# (model, lora_target_modules, the base layer types the targets must cover)
CASES = {
    "gpt2-conv1d": ("gpt2", "all-linear", {"Conv1D"}),
    "gpt2-conv1d-and-embeddings": (
        "gpt2",
        r"transformer\.(wte|wpe)|.*\.(c_attn|c_proj|c_fc)",
        {"Conv1D", "Embedding"},
    ),
    "llama-linear-and-embedding": ("llama", RELEASE_TARGETS, {"Linear", "Embedding"}),
    "qwen2-linear-and-embedding": ("qwen2", RELEASE_TARGETS, {"Linear", "Embedding"}),
}


def _gpt2() -> nn.Module:
    """A tiny GPT-2 (its attention and MLP are `Conv1D`), wte untied from lm_head so that it can be adapted."""
    torch.manual_seed(0)  # test-only: transformers' init draws from the global generator
    cfg = GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32, tie_word_embeddings=False)
    cfg.bos_token_id = cfg.eos_token_id = 0  # inside the tiny vocabulary
    return GPT2LMHeadModel(cfg).float().eval()


def _base(rp, kind: str) -> nn.Module:
    return _gpt2() if kind == "gpt2" else rp.tiny_model(kind, 60).eval()


def _adapted(rp, base: nn.Module, targets: str, method: str = "lora") -> nn.Module:
    """The PEFT model as the trainer builds it (`peft_config_for(args, model)`, which TRL's SFTTrainer passes to
    `get_peft_model`), on a copy of `base`, every trainable tensor set to seeded random values."""
    from peft import get_peft_model

    kw = dict(lora_rank=RANK, lora_alpha=ALPHA) if method == "lora" else dict(anchor_rank=4)
    args = rp.base_args("unused", method=method, lora_target_modules=targets, **kw)
    model = get_peft_model(copy.deepcopy(base), peft_config_for(args, base)).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(0.3 * torch.randn(p.shape, generator=g) + (p if method == "osf" else 0))
    return model


def _ids(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(1))


def _expected_weights(model: nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """({base weight name: W_0 + the update written out from the LoRA factors}, the base layer types seen)."""
    s = ALPHA / RANK  # the configured values, not PEFT's stored scaling
    out, kinds = {}, set()
    for name, layer in tuner_layers(model):
        with torch.no_grad():
            want, kind = _written_out(layer, s)
        assert want.shape == layer.get_base_layer().weight.shape
        assert float((want - layer.get_base_layer().weight).abs().max()) > 0.1  # the update is far past the tolerance
        out[name.removeprefix("base_model.model.") + ".weight"] = want
        kinds.add(kind)
    return out, kinds


def _written_out(layer: nn.Module, s: float) -> tuple[torch.Tensor, str]:
    """(W_0 + the update of the layer's "default" LoRA adapter at scaling `s`, the base layer's type name)."""
    base = layer.get_base_layer()
    w0 = base.weight.detach()
    if isinstance(base, nn.Embedding):
        a, b = layer.lora_embedding_A["default"], layer.lora_embedding_B["default"]  # (r, vocab), (hidden, r)
        return w0 + s * a.T @ b.T, "Embedding"  # (vocab, hidden)
    if isinstance(base, Conv1D):
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight  # (r, in), (out, r)
        return w0 + s * a.T @ b.T, "Conv1D"  # (in, out): Conv1D computes x W + bias
    if isinstance(base, nn.Linear):
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight  # (r, in), (out, r)
        return w0 + s * b @ a, "Linear"  # (out, in): nn.Linear computes x W^T + bias
    raise AssertionError(f"unexpected base layer {type(base).__name__}")  # pragma: no cover


def _merge_as_training_does(model: nn.Module, base: str | None = None) -> nn.Module:
    """`merge_peft_run` on one process, through a stand-in for the trainer with just what it reads: `base` None
    takes the base weights from the trained model itself (`unload`, as for a model object), a folder reads them
    again from it (as for a run started from a path)."""
    merged = {}
    args = SimpleNamespace(world_size=1, device=torch.device("cpu"), model_init_kwargs=None, trust_remote_code=False)
    trainer = SimpleNamespace(
        model=model,
        args=args,
        is_world_process_zero=lambda: True,
        set_merged_model=lambda m: merged.setdefault("model", m),
    )
    merge_peft_run(trainer, model if base is None else base)
    return merged["model"]


@pytest.mark.parametrize("base_from", ["unload", "folder"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lora_merge_computes_what_the_adapter_computes(rp, case, base_from, tmp_path):
    kind, targets, want_kinds = CASES[case]
    base = _base(rp, kind)
    model = _adapted(rp, base, targets)
    want, kinds = _expected_weights(model)
    assert kinds == want_kinds
    ids = _ids(base.config.vocab_size)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        before = base(input_ids=ids).logits
    assert float((ref - before).abs().max()) > 0.1  # the adapter changes the output far past the tolerance

    if base_from == "folder":
        base.save_pretrained(tmp_path / "base")
    merged = _merge_as_training_does(model, None if base_from == "unload" else str(tmp_path / "base"))
    assert not any(True for _ in tuner_layers(merged))  # a plain model of the base's architecture
    assert type(merged) is type(base)
    with torch.no_grad():
        got = merged(input_ids=ids).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=LOGIT_ATOL)

    weights, start = dict(merged.named_parameters()), dict(base.named_parameters())
    assert set(weights) == set(start)
    for key, w in weights.items():
        if key in want:
            torch.testing.assert_close(w, want[key], rtol=0, atol=WEIGHT_ATOL, msg=key)
        else:
            assert torch.equal(w, start[key]), key  # a layer the targets leave alone is untouched


def test_conv1d_update_is_transposed_into_the_stored_layout(rp):
    """On GPT-2's square c_proj (16 x 16), the one layer where an untransposed update would still fit: the merged
    weight is W_0 + s (B A)^T, and differs from W_0 + s B A by far more than the tolerance."""
    base = _gpt2()
    model = _adapted(rp, base, r".*\.attn\.c_proj")
    ((_, layer),) = tuner_layers(model)
    a, b = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
    w0 = layer.get_base_layer().weight.detach().clone()
    assert w0.shape == (16, 16)
    merged = merge_adapter(copy.deepcopy(base), model, gather_adapter(model))
    got = merged.transformer.h[0].attn.c_proj.weight.detach()
    torch.testing.assert_close(got, w0 + (ALPHA / RANK) * (b @ a).T, rtol=0, atol=WEIGHT_ATOL)
    assert float((got - (w0 + (ALPHA / RANK) * (b @ a))).abs().max()) > 0.1


def test_osf_merge_computes_what_the_adapter_computes(rp, tmp_path):
    """OSF adapts nn.Linear only (PEFT's OSF has no Conv1D or Embedding layer): its merged Llama computes what the
    adapter model computes, its factors moved off W_0's."""
    base = _base(rp, "llama")
    model = _adapted(rp, base, "all-linear", method="osf")
    ids = _ids(base.config.vocab_size)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        before = base(input_ids=ids).logits
    assert float((ref - before).abs().max()) > 0.1
    base.save_pretrained(tmp_path / "base")
    merged = _merge_as_training_does(model, str(tmp_path / "base"))
    with torch.no_grad():
        got = merged(input_ids=ids).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=LOGIT_ATOL)
