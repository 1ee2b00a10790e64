"""The strong model's trainable output bias (`strong_bias: trained`), against an independent computation."""

import dataclasses

import pytest
import torch

from anchorft.studies.w2s.experiments import run_experiment
from anchorft.w2s.dynamics import dense_step, reduced_step
from anchorft.w2s.fused import DenseStepper, ReducedStepper
from anchorft.w2s.hermite import get_activation


def _biased_reference(w, b, x, y, a, act, eta, bias_eta):
    """One step of f(x) = sum_j a_j sigma(w_j^T x) + b under (f - y)^2 / 2: the bias's gradient by autograd; the
    first layer's step is the plain step on the labels y - b (its gradient is the same function of the residual)."""
    bb = b.clone().requires_grad_(True)
    f = act.value(x @ w.mT) @ a + bb.unsqueeze(-1)
    loss = 0.5 * ((f - y) ** 2).mean(-1).sum()
    (grad_b,) = torch.autograd.grad(loss, bb)
    return y - b.unsqueeze(-1), b - bias_eta * grad_b


@pytest.mark.parametrize("name", ["he2+he4", "tanh"])  # the fused even-polynomial path and the fallback
def test_reduced_stepper_with_bias_equals_the_reference(name):
    S, N, s, bsz, n = 2, 5, 4, 6, 3
    g = torch.Generator().manual_seed(0)
    c = torch.randn(S, N, s, generator=g, dtype=torch.float64)
    c = c / c.norm(dim=-1, keepdim=True)
    r = torch.zeros(S, N, dtype=torch.float64)  # neurons inside the subspace: w = c
    a = torch.rand(N, generator=g, dtype=torch.float64)
    act = get_activation(name)
    bias = torch.zeros(S, dtype=torch.float64)
    st = ReducedStepper(c, r, a, act, "squared", bsz, n, bias, 0.2)
    b_ref = torch.zeros(S, dtype=torch.float64)
    z = torch.randn(n, S, bsz, s, generator=g, dtype=torch.float64)
    y = 0.7 + torch.randn(n, S, bsz, generator=g, dtype=torch.float64)  # labels with a mean
    yp = st.prepare_labels(y)
    ref_losses = []
    for i in range(n):
        y_eff, b_next = _biased_reference(c, b_ref, z[i], y[i], a, act, 0.3, 0.2)
        c, r, lval = reduced_step(c, r, z[i], y_eff, a, act, 0.3, "squared")
        ref_losses.append(lval)
        b_ref = b_next
        st.step(i, z[i], z[i] @ z[i].mT, yp[i], 0.3)
        torch.testing.assert_close(st.weights()[0], c, atol=1e-12, rtol=0)
        torch.testing.assert_close(bias, b_ref, atol=1e-12, rtol=0)  # updated in place
    torch.testing.assert_close(st.losses(yp, 0, n), torch.stack(ref_losses), atol=1e-12, rtol=0)
    assert (bias > 0.05).all()  # it moved toward the labels' mean


def test_dense_stepper_with_bias_equals_the_reference():
    S, N, d, bsz = 2, 4, 6, 5
    g = torch.Generator().manual_seed(1)
    w = torch.nn.functional.normalize(torch.randn(S, N, d, generator=g, dtype=torch.float64), dim=-1)
    a = torch.rand(N, generator=g, dtype=torch.float64)
    act = get_activation("he2+he4")
    bias = torch.zeros(S, dtype=torch.float64)
    st = DenseStepper(w, a, act, "squared", 4, dense_step, None, bias, 0.1)
    b_ref = bias.clone()
    for i in range(4):
        x = torch.randn(S, bsz, d, generator=g, dtype=torch.float64)
        y = -0.5 + torch.randn(S, bsz, generator=g, dtype=torch.float64)
        y_eff, b_next = _biased_reference(w, b_ref, x, y, a, act, 0.2, 0.1)
        w, _ = dense_step(w, x, y_eff, a, act, 0.2, "squared")
        b_ref = b_next
        st.step(i, x, x @ x.mT, y, 0.2)
        torch.testing.assert_close(st.weights(), w, atol=1e-12, rtol=0)
        torch.testing.assert_close(bias, b_ref, atol=1e-12, rtol=0)


def test_trained_bias_absorbs_the_label_mean(tiny):
    """W2S labels have a mean the strong model cannot fit (about 0.3 here); the trained bias takes it up."""
    cfg = dataclasses.replace(tiny, modes=["w2s"], steps=400, loss="squared", strong_bias="trained").validate()
    m = run_experiment(cfg, None, progress=False)["w2s"]
    mean = m["labels"]["mean"]
    assert mean > 0.15
    assert m["bias"] == pytest.approx([mean] * cfg.n_seeds, abs=0.12)
    plain = run_experiment(dataclasses.replace(cfg, strong_bias="none"), None, progress=False)["w2s"]
    assert "bias" not in plain


def test_bias_needs_the_squared_loss(tiny):
    with pytest.raises(ValueError, match="strong_bias"):
        dataclasses.replace(tiny, strong_bias="trained", loss="correlation").validate()
    with pytest.raises(ValueError, match="strong_bias"):
        dataclasses.replace(tiny, strong_bias="yes").validate()
    with pytest.raises(ValueError, match="bias_eta"):
        dataclasses.replace(tiny, strong_bias="trained", bias_eta=0.0).validate()
