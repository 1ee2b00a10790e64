"""`method_memory` (the per-component memory of `anchorft train --estimate`) against the tensors actually held after
one optimiser step of a >= 20M-parameter stand-in on CPU (fp32), for each method."""

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.rpsft.estimate import method_memory
from anchorft.rpsft.trainer import frozen_copy

CFG = dict(model_type="qwen2", hidden_size=384, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=6,
           num_key_value_heads=2, head_dim=64, vocab_size=32000, tie_word_embeddings=True)  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
RANK, TOKENS = 96, (2, 32)  # k_proj / v_proj (128 x 384) stay below full rank at 96: the SVD branch everywhere


def _bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        if t is not None and t.numel() > 1:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


@pytest.fixture(scope="module")
def model():
    cfg = AutoConfig.for_model(**CFG)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    assert sum(p.numel() for p in m.parameters()) >= 20_000_000
    return m.train()


def _saved_per_token(model, ids, checkpointing: bool) -> float:
    """Bytes autograd keeps for backward (storages counted once, parameters left out), per token."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids=ids, labels=ids, attention_mask=torch.ones_like(ids), use_cache=False).loss
        loss.backward()
    finally:
        model.gradient_checkpointing_disable()
        model.zero_grad(set_to_none=True)
    return sum(seen.values()) / ids.numel()


@pytest.mark.parametrize("method", ["sft", "dft", "iw_sft", "l2", "rpsft"])
def test_estimate_matches_held_tensors(model, method):
    est = method_memory(CFG, method, rank=RANK, stage="single", weight_bytes=4, anchor_bytes=4)
    anchor = None
    if method in ("rpsft", "l2"):
        anchor = SubspaceAnchor.from_model(model, rank=10**6 if method == "l2" else RANK, dtype=torch.float32)
    ref = frozen_copy(model) if method == "iw_sft" else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, CFG["vocab_size"], TOKENS, generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    if anchor is not None:
        anchor.add_penalty_grad_(model, 1.0)
    held = {
        "parameters": _bytes(model.parameters()),
        "gradients": _bytes(p.grad for p in model.parameters()),
        "anchor_buffers": _bytes(t for e in anchor.entries if not e.fallback for t in e.tensors().values())
        if anchor
        else 0,
        "l2_w0": _bytes(e.w0 for e in anchor.entries if e.fallback) if anchor else 0,
        "iw_reference": _bytes(ref.parameters()) if ref is not None else 0,
    }
    opt.step()
    held["optimizer_state"] = _bytes(t for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
    model.zero_grad(set_to_none=True)
    for key, value in held.items():
        if est[key] == 0:
            assert value == 0, key
        else:
            assert abs(est[key] - value) <= 0.15 * value, (key, est[key], value)
    assert (method == "l2") == (est["l2_w0"] > 0) and (method == "rpsft") == (est["anchor_buffers"] > 0)


def test_activations_per_token(model):
    est = method_memory(CFG, "sft", stage="single", weight_bytes=4)
    ids = torch.randint(0, CFG["vocab_size"], TOKENS, generator=torch.Generator().manual_seed(1))
    plain, ckpt = _saved_per_token(model, ids, False), _saved_per_token(model, ids, True)
    assert abs(est["activations_per_token"] - plain) <= 0.15 * plain, (est["activations_per_token"], plain)
    held = est["activations_per_token_checkpointed"]
    assert abs(held - ckpt) <= 0.15 * ckpt, (held, ckpt)
    assert ckpt < plain


def test_estimate_command_reads_a_recipe(capsys):
    """`anchorft train --estimate --config RECIPE`: every method's components; L2's W0 is 4 bytes a matrix entry."""
    from anchorft.cli import command

    main = command("train")
    from anchorft.rpsft.estimate import model_matrices, read_model_config

    recipe = str(ROOT / "configs/rpsft/llama-3.1-8b-instruct/l2.yaml")
    assert main(["--estimate", "--config", recipe, "--seq_len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "method l2" in out and "2 x 4096 tokens" in out
    rows = {ln.split(" (")[0].strip(): ln.split(")")[-1].split() for ln in out.splitlines() if " (GB)" in ln}
    cfg = read_model_config(ROOT / "configs/models/llama-3.1-8b-instruct.json")
    w0 = 4 * sum(m * n * c for _, m, n, c in model_matrices(cfg, True)) / 1e9
    assert float(rows["l2_w0"][3]) == pytest.approx(w0, abs=0.01) and float(rows["l2_w0"][4]) == 0.0
    assert float(rows["iw_reference"][2]) > 0 and float(rows["anchor_buffers"][4]) > 0
