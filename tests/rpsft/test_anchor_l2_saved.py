"""L2 terms without a kept D = W - W_0: `anchorft.subspace.l2_penalty` against autograd of the plain form and finite
differences, and the tensors the anchor's penalty saves for the backward, measured with saved_tensors_hooks."""

from __future__ import annotations

import contextlib

import pytest
import torch

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.subspace import l2_penalty


def _pair(dtype=torch.float64, seed=0, shape=(7, 5)):
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(shape, generator=g, dtype=torch.float64)
    w = (w0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    return w, w0


def test_l2_penalty_value_and_gradient_against_plain_autograd():
    w, w0 = _pair()
    r = l2_penalty(w, w0, torch.float64)
    (g,) = torch.autograd.grad(3.0 * r, w)
    w2 = w.detach().clone().requires_grad_()
    plain = (w2 - w0).pow(2).sum()
    (g2,) = torch.autograd.grad(3.0 * plain, w2)
    assert float(r.detach()) == pytest.approx(float(plain.detach()), rel=1e-14)
    torch.testing.assert_close(g, g2, rtol=1e-14, atol=0)
    torch.testing.assert_close(g, 6.0 * (w.detach() - w0), rtol=1e-14, atol=0)


def test_l2_penalty_finite_differences():
    w, w0 = _pair()
    assert torch.autograd.gradcheck(lambda x: l2_penalty(x, w0, torch.float64), (w,), eps=1e-6, atol=1e-7)


def test_l2_penalty_mixed_dtypes():
    """A bf16 weight against an fp32 W_0: the penalty in fp32 (no rounding of D to bf16), the gradient in bf16."""
    w, w0 = _pair(torch.bfloat16)
    w0 = w0.float()
    r = l2_penalty(w, w0, torch.float32)
    want = (w.detach().float() - w0).pow(2).sum()
    assert r.dtype == torch.float32 and float(r.detach()) == pytest.approx(float(want), rel=1e-6)
    (g,) = torch.autograd.grad(r, w)
    assert g.dtype == torch.bfloat16
    torch.testing.assert_close(g, (2.0 * (w.detach().float() - w0)).to(torch.bfloat16), rtol=0, atol=0)


def test_l2_penalty_regathers_a_partitioned_weight():
    """As a ZeRO-3 parameter: whole only inside `regather` (its data an empty placeholder after the forward); the
    backward enters it once and gives the gradient of the whole matrix. (DeepSpeed accumulates that gradient
    while the module's own backward holds the weight whole; `autograd.grad` stands in for it here.)"""
    w, w0 = _pair(torch.float32)
    w0 = w0.float()
    whole = w.data
    entered = []

    @contextlib.contextmanager
    def regather():
        entered.append(w.numel())
        w.data = whole
        yield
        w.data = torch.empty(0)

    r = l2_penalty(w, w0, torch.float32, regather)
    w.data = torch.empty(0)  # partitioned again after the forward
    (g,) = torch.autograd.grad(r, w)
    assert entered == [0] and g.shape == whole.shape
    torch.testing.assert_close(g, 2.0 * (whole - w0))


def _saved_during(fn):
    """The tensors autograd packs while `fn` runs (saved_tensors_hooks), and fn's result."""
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return packed, out


def _new_bytes(packed, held):
    """Bytes of the saved tensors whose storage is none of `held` (the parameters and the anchor's tensors)."""
    ptrs = {t.untyped_storage().data_ptr() for t in held}
    seen, total = set(), 0
    for t in packed:
        ptr = t.untyped_storage().data_ptr()
        if ptr in ptrs or ptr in seen:
            continue
        seen.add(ptr)
        total += t.untyped_storage().nbytes()
    return total


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_anchor_l2_saves_only_w_and_w0(rp, dtype):
    """Method l2 (every matrix in the fallback, rank past every size): the penalty's graph saves the weights and
    W_0 themselves and nothing new, for fp32 and bf16 weights; the plain form would save one D per matrix."""
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=10**6)
    assert anchor.entries and all(e.fallback for e in anchor.entries)
    model.to(dtype)
    rp.perturb(model, 0.01)
    params = dict(model.named_parameters())
    packed, pen = _saved_during(lambda: anchor.penalty(model))
    held = list(params.values()) + [e.w0 for e in anchor.entries]
    matrices = [t for t in packed if t.dim() == 2]
    assert _new_bytes(matrices, held) == 0  # every matrix saved is a weight or a W_0: nothing new
    assert len(matrices) == 2 * len(anchor.entries)  # W and W_0 of each matrix
    assert _new_bytes(packed, held) <= 8 * 4 * len(anchor.entries)  # the rest: per-matrix scalars (the weights)
    # what the plain form would have kept: one D per matrix, in fp32
    plain, _ = _saved_during(lambda: sum((params[e.name].float() - e.w0).pow(2).sum() for e in anchor.entries))
    assert _new_bytes(plain, held) >= 4 * sum(e.w0.numel() for e in anchor.entries)
    pen.backward()
    for e in anchor.entries:
        want = (2.0 * (params[e.name].detach().float() - e.w0)).to(dtype)
        torch.testing.assert_close(params[e.name].grad, want, rtol=0, atol=0)


def test_anchor_rpsft_saved_tensors_at_most_one_matrix(rp):
    """RPSFT with fallbacks (the release's rank on a model whose k_proj / v_proj are narrower than the rank): the
    SVD blocks save only U_0 (k numbers per row) and k x n products; no m x n matrix beyond W and W_0."""
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=20)  # k_proj, v_proj (16 x 32) fall back
    assert any(e.fallback for e in anchor.entries) and any(not e.fallback for e in anchor.entries)
    rp.perturb(model, 0.01)
    held = list(model.parameters()) + [t for e in anchor.entries for t in e.tensors().values()]
    packed, _ = _saved_during(lambda: anchor.penalty(model))
    ptrs = {h.untyped_storage().data_ptr() for h in held}
    new = [t for t in packed if t.untyped_storage().data_ptr() not in ptrs]
    shapes = {tuple(e.shape) for e in anchor.entries}
    assert new and not [tuple(t.shape) for t in new if tuple(t.shape) in shapes]  # no m x n matrix of any entry
    assert all(t.numel() <= max(e.rank * max(e.shape) for e in anchor.entries if not e.fallback) for t in new)


def test_closed_form_keeps_no_d(rp):
    """The closed form (anchor_mode grad) holds no D between the penalty and the gradient it adds: the blocks of the
    fallback matrices carry no residual, and the gradient is 2 scale (W - W_0) all the same."""
    model = rp.tiny_model("llama", 64)
    anchor = SubspaceAnchor.from_model(model, rank=10**6)
    rp.perturb(model, 0.01)
    with torch.no_grad():
        items, _, _ = anchor._blocks(model, differentiable=False)
    assert all(b.residual is None for b in items)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    anchor.add_penalty_grad_(model, 0.5)
    params = dict(model.named_parameters())
    for e in anchor.entries:
        torch.testing.assert_close(params[e.name].grad, params[e.name].detach() - e.w0, rtol=1e-6, atol=1e-9)
