import pytest
import torch

from anchorft.w2s.dynamics import reduced_step, renormalise_reduced
from anchorft.w2s.fused import ReducedStepper
from anchorft.w2s.hermite import get_activation
from anchorft.w2s.sampling import gaussian_chunk, make_generators


def _state(seed: int, S: int, N: int, s: int):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(S, N, s, generator=g, dtype=torch.float64)
    c = 0.8 * c / c.norm(dim=-1, keepdim=True)
    q = torch.rand(S, N, generator=g, dtype=torch.float64) + 0.5
    r = torch.sqrt((1.0 - (c * c).sum(-1)) / q)  # ||r p + B c|| = 1
    return g, c, r, q


# he2+he4 (the paper's, K = 2), he2 (K = 1), he6, he8 (K = 3, 4: Horner loop), he3, tanh (no even polynomial: fallback)
@pytest.mark.parametrize("name", ["he2+he4", "he2", "he6", "he8", "he3", "tanh"])
@pytest.mark.parametrize("loss", ["squared", "correlation"])
def test_stepper_equals_a_loop_of_reduced_step(name, loss):
    """Independent computation: the plain reduced_step (no deferred scale, no buffers) step by step."""
    S, N, s, b, n = 2, 7, 5, 6, 4
    g, c, r, q = _state(0, S, N, s)
    act = get_activation(name)
    a = torch.rand(N, generator=g, dtype=torch.float64)
    st = ReducedStepper(c, r, a, act, loss, b, n)
    tol = 1e-10 if name == "he8" else 1e-12  # he8's larger coefficients: round-off up to 3e-12 measured
    for _chunk in range(3):
        z = torch.randn(n, S, b, s, generator=g, dtype=torch.float64)
        y = torch.randn(n, S, b, generator=g, dtype=torch.float64)
        yp = st.prepare_labels(y)
        ref_losses = []
        for i in range(n):
            eta = 0.3 + 0.1 * i
            c, r, lval = reduced_step(c, r, z[i], y[i], a, act, eta, loss)
            ref_losses.append(lval)
            st.step(i, z[i], z[i] @ z[i].mT, yp[i], eta)
            got_c, got_r = st.weights()
            torch.testing.assert_close(got_c, c, atol=tol, rtol=0)
            torch.testing.assert_close(got_r, r, atol=tol, rtol=0)
        torch.testing.assert_close(st.losses(yp, 1, n), torch.stack(ref_losses[1:]), atol=tol, rtol=0)
        c, r = renormalise_reduced(c, r, q)
        st.reset(*renormalise_reduced(*st.weights(), q))
        torch.testing.assert_close(st.weights()[0], c, atol=tol, rtol=0)
    torch.testing.assert_close(r * r * q + (c * c).sum(-1), torch.ones(S, N, dtype=torch.float64))


def test_stepper_rejects_an_unknown_loss():
    _, c, r, _ = _state(1, 1, 3, 4)
    with pytest.raises(ValueError, match="loss"):
        ReducedStepper(c, r, torch.ones(3, dtype=torch.float64), get_activation("he4"), "hinge", 2, 2)


def test_gaussian_chunk_into_a_buffer_draws_the_same_numbers():
    cpu = torch.device("cpu")
    ref = gaussian_chunk(make_generators([3, 4], 1, cpu), 5, 6, 7, torch.float32, cpu)
    buf = torch.full((2, 8, 6, 7), float("nan"))
    got = gaussian_chunk(make_generators([3, 4], 1, cpu), 5, 6, 7, torch.float32, cpu, out=buf)
    assert got.shape == ref.shape and got.data_ptr() == buf.data_ptr()
    torch.testing.assert_close(got, ref, atol=0, rtol=0)
    with pytest.raises(ValueError, match="out"):
        gaussian_chunk(make_generators([3, 4], 1, cpu), 9, 6, 7, torch.float32, cpu, out=buf)
