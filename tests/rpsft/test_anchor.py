"""SubspaceAnchor against independent computations (numpy SVD, explicit W_0, autograd)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters


def numpy_penalty(w0s: dict, model, k: int) -> float:
    params = dict(model.named_parameters())
    total = 0.0
    for name, w0 in w0s.items():
        w = params[name].detach().double().numpy()
        m, n = w0.shape
        if k >= min(m, n):
            total += float(np.sum((w - w0) ** 2))
            continue
        u, _, vt = np.linalg.svd(w0)
        uk, vk = u[:, :k], vt[:k].T
        total += float(np.sum((uk.T @ (w - w0) @ vk) ** 2))
    return total


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("k", [3, 8, 1000])
def test_penalty_matches_explicit_svd(kind, k, rp):
    model = rp.tiny_model(kind, 64, tie=(kind == "qwen2"))
    names = [n for n, _ in select_parameters(model)]
    w0s = {n: p.detach().double().numpy().copy() for n, p in model.named_parameters() if n in names}
    anchor = SubspaceAnchor.from_model(model, rank=k)
    assert float(anchor.penalty(model)) == 0.0  # zero at init (exact SVD: S_ref = U^T W_0 V)
    rp.perturb(model)
    got = float(anchor.penalty(model))
    want = numpy_penalty(w0s, model, k)
    assert want > 0
    assert abs(got - want) / want < 1e-5
    assert all(e.fallback == (k >= min(e.shape)) for e in anchor.entries)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_closed_form_grad_equals_autograd(kind, rp):
    model = rp.tiny_model(kind, 64)
    anchor = SubspaceAnchor.from_model(model, rank=5)
    rp.perturb(model)
    model.zero_grad()
    anchor.penalty(model).backward()
    auto = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=False)
    out = anchor.add_penalty_grad_(model, scale=1.0)
    assert out["penalty"] == pytest.approx(float(anchor.penalty(model)), rel=1e-6)
    for e in anchor.entries:
        p = dict(model.named_parameters())[e.name]
        torch.testing.assert_close(p.grad, auto[e.name], rtol=1e-5, atol=1e-7)
    # scale is linear, and grads that were None are created
    model.zero_grad(set_to_none=True)
    anchor.add_penalty_grad_(model, scale=2.5)
    p = dict(model.named_parameters())[anchor.entries[0].name]
    torch.testing.assert_close(p.grad, 2.5 * auto[anchor.entries[0].name], rtol=1e-5, atol=1e-7)


def test_invariant_to_updates_outside_the_subspace(rp):
    model = rp.tiny_model("llama", 64)
    k = 4
    anchor = SubspaceAnchor.from_model(model, rank=k)
    rp.perturb(model)
    before = float(anchor.penalty(model))
    g = torch.Generator().manual_seed(3)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for i, e in enumerate(anchor.entries):
            if e.fallback:
                continue
            m, n = e.shape
            a, b = torch.randn(m, 1, generator=g), torch.randn(n, 1, generator=g)
            if i % 2 == 0:  # a orthogonal to U_k, b arbitrary
                a = a - e.u @ (e.u.T @ a)
            else:  # b orthogonal to V_k, a arbitrary
                b = b - e.v @ (e.v.T @ b)
            params[e.name].add_(3.0 * a @ b.T)
    assert float(anchor.penalty(model)) == pytest.approx(before, rel=1e-5)
    # and an update inside the subspace does change it
    e = next(e for e in anchor.entries if not e.fallback)
    with torch.no_grad():
        params[e.name].add_(e.u[:, :1] @ e.v[:, :1].T)
    assert float(anchor.penalty(model)) > before + 0.5


def test_full_rank_equals_l2(rp):
    model = rp.tiny_model("llama", 64)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    anchor = SubspaceAnchor.from_model(model, rank=10**6)
    assert all(e.fallback for e in anchor.entries)
    rp.perturb(model)
    l2 = sum(float((p.detach() - w0[n]).pow(2).sum()) for n, p in model.named_parameters() if p.dim() == 2)
    assert float(anchor.penalty(model)) == pytest.approx(l2, rel=1e-6)


@pytest.mark.parametrize("k", [3, 1000])
def test_drift_max_is_the_largest_relative_drift(k, rp):
    """drift_max = max_l ||U^T (W - W_0) V||_F / ||U^T W_0 V||_F (||W - W_0||_F / ||W_0||_F for L2 fallbacks),
    from numpy's SVD; the same from `drift`, `summarize(penalty_terms)` and `add_penalty_grad_`."""
    model = rp.tiny_model("llama", 64)
    names = [n for n, _ in select_parameters(model)]
    w0s = {n: p.detach().double().numpy().copy() for n, p in model.named_parameters() if n in names}
    anchor = SubspaceAnchor.from_model(model, rank=k)
    rp.perturb(model)
    params = dict(model.named_parameters())
    rel = []
    for name, w0 in w0s.items():
        w = params[name].detach().double().numpy()
        if k >= min(w0.shape):
            rel.append(np.linalg.norm(w - w0) / np.linalg.norm(w0))
            continue
        u, _, vt = np.linalg.svd(w0)
        uk, vk = u[:, :k], vt[:k].T
        rel.append(np.linalg.norm(uk.T @ (w - w0) @ vk) / np.linalg.norm(uk.T @ w0 @ vk))
    want = max(rel)
    assert want > 0
    model.zero_grad()
    terms = anchor.penalty_terms(model)
    for got in (anchor.drift(model), anchor.summarize(terms), anchor.add_penalty_grad_(model, 1.0)):
        assert got["drift_max"] == pytest.approx(want, rel=1e-4)
        assert got["penalty"] == pytest.approx(numpy_penalty(w0s, model, k), rel=1e-5)


def test_tied_weights_count_once_and_memory(rp):
    model = rp.tiny_model("qwen2", 64, tie=True)
    anchor = SubspaceAnchor.from_model(model, rank=4)
    names = [e.name for e in anchor.entries]
    assert len(names) == len(set(names))
    assert sum(1 for n in names if "embed_tokens" in n or "lm_head" in n) == 1
    tied = next(e for e in anchor.entries if "embed_tokens" in e.name)
    assert "lm_head.weight" in tied.aliases
    for row in anchor.stats(model):
        m, n = row["shape"]
        assert row["numel"] == (m * n if row["fallback"] else (m + n) * 4 + 16)
        assert row["penalty"] == 0.0
    svd_entries = [e for e in anchor.entries if not e.fallback]
    assert svd_entries and all(e.w0 is None for e in svd_entries)  # no copy of W_0 in the SVD branch


def test_targets_selection_and_errors(rp):
    model = rp.tiny_model("llama", 64)
    allp = select_parameters(model)
    assert any("lm_head" in n for n, _ in allp) and any("embed_tokens" in n for n, _ in allp)
    no_emb = select_parameters(model, include_embeddings=False)
    assert len(no_emb) == len(allp) - 2
    qv = select_parameters(model, "q_proj|v_proj")
    assert len(qv) == 4 and all("q_proj" in n or "v_proj" in n for n, _ in qv)
    listed = select_parameters(model, ["q_proj", "model.layers.0.mlp.down_proj"])
    assert len(listed) == 3
    with pytest.raises(ValueError, match="matches no trainable.*q_proj"):
        select_parameters(model, "attention_query")
    with pytest.raises(ValueError, match="rank"):
        SubspaceAnchor.from_model(model, rank=0)
    with pytest.raises(ValueError, match="svd"):
        SubspaceAnchor.from_model(model, rank=2, svd="fast")


def test_gpt2s_conv1d_layers_are_anchored_like_linear_ones(rp):
    """GPT-2's attention and MLP layers are transformers' Conv1D: 'all-linear' anchors them, as PEFT's 'all-linear'
    adapts them; the tied input/output embedding is anchored once."""
    model = rp.tiny_model("gpt2", 64, layers=1, tie=True)
    names = [n for n, _ in select_parameters(model)]
    conv = [f"transformer.h.0.{m}.weight" for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
    assert set(conv) <= set(names)
    assert set(names) - set(conv) == {"transformer.wte.weight", "transformer.wpe.weight"}
    assert set(n for n, _ in select_parameters(model, include_embeddings=False)) == set(conv)
    assert [n for n, _ in select_parameters(model, ["c_fc"])] == ["transformer.h.0.mlp.c_fc.weight"]


def test_save_load_roundtrip_and_mismatches(tmp_path, rp):
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=4)
    anchor.save(tmp_path / "a")
    loaded = SubspaceAnchor.load(tmp_path / "a", model=model)
    assert loaded.fingerprint == anchor.fingerprint and len(loaded.entries) == len(anchor.entries)
    rp.perturb(model)
    assert float(loaded.penalty(model)) == pytest.approx(float(anchor.penalty(model)), rel=1e-7)
    for a, b in zip(anchor.entries, loaded.entries):
        for k, t in a.tensors().items():
            assert torch.equal(t, b.tensors()[k])
    # the perturbed model is no longer the pretrained one: fingerprint mismatch
    with pytest.raises(ValueError, match="fingerprint"):
        SubspaceAnchor.load(tmp_path / "a", model=model)
    SubspaceAnchor.load(tmp_path / "a", model=model, check_fingerprint=False)
    with pytest.raises(ValueError, match="fingerprint"):
        SubspaceAnchor.load(tmp_path / "a", model=rp.tiny_model("llama", 64, seed=7))
    with pytest.raises(ValueError, match="shape"):
        SubspaceAnchor.load(tmp_path / "a", model=rp.tiny_model("llama", 64, hidden=48))
    with pytest.raises(ValueError, match="no parameter"):
        SubspaceAnchor.load(tmp_path / "a", model=rp.tiny_model("llama", 64, layers=1))
    with pytest.raises(FileNotFoundError):
        SubspaceAnchor.load(tmp_path / "missing")


def test_check_model_checks_the_fingerprint_by_default(rp):
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=4)
    anchor.check_model(model)
    rp.perturb(model)
    with pytest.raises(ValueError, match=r"^anchor: fingerprint mismatch: the model's weights are not the pretrained"):
        anchor.check_model(model)
    anchor.check_model(model, check_fingerprint=False)


def test_fingerprint_same_in_bf16(rp):
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=4)
    anchor.check_model(model.to(torch.bfloat16))


def test_randomized_svd_accuracy(rp):
    g = torch.Generator().manual_seed(0)
    model = rp.tiny_model("llama", 64, hidden=64, inter=128)
    with torch.no_grad():  # give the weights a decaying spectrum, as pretrained weights have
        for _, p in select_parameters(model):
            u, s, vh = torch.linalg.svd(torch.randn(p.shape, generator=g), full_matrices=False)
            p.copy_(u @ torch.diag(0.8 ** torch.arange(len(s), dtype=torch.float32)) @ vh)
    exact = SubspaceAnchor.from_model(model, rank=8)
    approx = SubspaceAnchor.from_model(model, rank=8, svd="randomized", generator=torch.Generator().manual_seed(1))
    for a, b in zip(exact.entries, approx.entries):
        if a.fallback:
            continue
        overlap = float((a.u.T @ b.u).pow(2).sum()) / a.rank
        assert overlap > 0.999
        assert b.svd_residual < 1e-3 and a.svd_residual == 0.0
    assert float(approx.penalty(model)) < 1e-8  # S_ref = U^T W_0 V keeps the penalty exactly 0 at init


def test_bf16_weights_penalty_in_fp32(rp):
    model = rp.tiny_model("llama", 64).to(torch.bfloat16)
    anchor = SubspaceAnchor.from_model(model, rank=4)
    pen = anchor.penalty(model)
    assert pen.dtype == torch.float32 and float(pen) == 0.0
    rp.perturb(model, scale=0.1)
    fp32 = {n: p.detach().float() for n, p in model.named_parameters()}
    model.zero_grad()
    out = anchor.add_penalty_grad_(model, 1.0)  # bf16 grads: computed in fp32, added in bf16
    ref = rp.tiny_model("llama", 64)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            p.copy_(fp32[n])
    assert out["penalty"] == pytest.approx(float(anchor.penalty(ref)), rel=1e-6)
    anchor.penalty(ref).backward()
    for e in anchor.entries:
        g = dict(model.named_parameters())[e.name].grad
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), dict(ref.named_parameters())[e.name].grad, rtol=1e-2, atol=1e-3)
