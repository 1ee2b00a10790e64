"""The anchor's maths (`anchorft.subspace`) against independent computations: numpy's SVD, autograd of
the penalty written out by hand, and the L2 identity when the block is the whole matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anchorft.subspace import block_residual, reference_block, subspace_penalty_grad, top_k_bases


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_exact_bases_match_numpy_svd():
    w0 = _rand(7, 5)
    u, s, v = top_k_bases(w0, 3)
    _, s_np, _ = np.linalg.svd(w0.numpy())
    np.testing.assert_allclose(s.numpy(), s_np[:3], rtol=1e-12)
    # same subspaces as numpy: projectors agree (singular vectors are defined up to sign)
    u_np, _, vh_np = np.linalg.svd(w0.numpy(), full_matrices=False)
    np.testing.assert_allclose((u @ u.T).numpy(), u_np[:, :3] @ u_np[:, :3].T, atol=1e-10)
    np.testing.assert_allclose((v @ v.T).numpy(), vh_np[:3].T @ vh_np[:3], atol=1e-10)
    # S_ref of an exact SVD is diag(sigma_1..sigma_k)
    np.testing.assert_allclose(reference_block(w0, u, v).numpy(), np.diag(s_np[:3]), atol=1e-10)


def test_randomized_bases_recover_a_low_rank_matrix():
    w0 = _rand(40, 4, seed=1) @ _rand(4, 30, seed=2)  # rank 4
    u, s, _ = top_k_bases(w0, 4, svd="randomized", generator=torch.Generator().manual_seed(0))
    s_np = np.linalg.svd(w0.numpy(), compute_uv=False)[:4]
    np.testing.assert_allclose(s.numpy(), s_np, rtol=1e-8)
    u_np = np.linalg.svd(w0.numpy(), full_matrices=False)[0][:, :4]
    np.testing.assert_allclose((u @ u.T).numpy(), u_np @ u_np.T, atol=1e-8)


def test_rank_is_clipped_and_checked():
    u, s, v = top_k_bases(_rand(6, 4), 10)
    assert u.shape == (6, 4) and s.shape == (4,) and v.shape == (4, 4)
    with pytest.raises(ValueError, match="rank"):
        top_k_bases(_rand(6, 4), 0)
    with pytest.raises(ValueError, match="svd"):
        top_k_bases(_rand(6, 4), 2, svd="qr")


def test_penalty_gradient_equals_autograd():
    """dR/dW = 2 U (U^T W V - S_ref) V^T against autograd of ||U^T (W - W_0) V||_F^2 (eq. 3)."""
    w0, w = _rand(2, 8, 6, seed=3), _rand(2, 8, 6, seed=4)  # a leading batch dimension (seeds)
    u, _, v = top_k_bases(w0, 3)
    s_ref = reference_block(w0, u, v)
    w_ag = w.clone().requires_grad_(True)
    (u.mT @ (w_ag - w0) @ v).pow(2).sum().backward()
    torch.testing.assert_close(subspace_penalty_grad(w, u, v, s_ref), w_ag.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(block_residual(w0, u, v, s_ref), torch.zeros(2, 3, 3, dtype=torch.float64))


def test_full_block_of_a_square_matrix_is_l2_anchoring():
    """Square full-rank W_0 and k = n: R(W) = ||W - W_0||_F^2, so the gradient is 2 (W - W_0)."""
    w0, w = _rand(4, 4, seed=5), _rand(4, 4, seed=6)
    u, _, v = top_k_bases(w0, 4)
    s_ref = reference_block(w0, u, v)
    torch.testing.assert_close(block_residual(w, u, v, s_ref).pow(2).sum(), (w - w0).pow(2).sum())
    torch.testing.assert_close(subspace_penalty_grad(w, u, v, s_ref), 2 * (w - w0))
    # a tall matrix is not: the drift outside the column space of W_0 is not penalised
    w0, w = _rand(5, 4, seed=5), _rand(5, 4, seed=6)
    u, _, v = top_k_bases(w0, 4)
    assert block_residual(w, u, v, reference_block(w0, u, v)).pow(2).sum() < (w - w0).pow(2).sum()


def test_rank_one_is_a_valid_rank():
    w0 = _rand(6, 4, seed=7)
    s_np = np.linalg.svd(w0.numpy(), compute_uv=False)
    for svd in ("exact", "randomized"):
        u, s, v = top_k_bases(w0, 1, svd=svd, generator=torch.Generator().manual_seed(0))
        assert u.shape == (6, 1) and s.shape == (1,) and v.shape == (4, 1)
        np.testing.assert_allclose(s.numpy(), s_np[:1], rtol=1e-8)


def test_rank_is_clipped_by_the_last_two_dims_of_a_batch():
    """(2, 3, 5, 6): k = 5 fits a 5 x 6 matrix; the batch sizes in front (here 3 < 5) do not clip it."""
    w0 = _rand(2, 3, 5, 6, seed=8)
    u, s, v = top_k_bases(w0, 5)
    assert u.shape == (2, 3, 5, 5) and s.shape == (2, 3, 5) and v.shape == (2, 3, 6, 5)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(w0.numpy(), compute_uv=False), rtol=1e-10)
    u, s, v = top_k_bases(w0, 5, svd="randomized", generator=torch.Generator().manual_seed(0))
    assert u.shape == (2, 3, 5, 5) and v.shape == (2, 3, 6, 5)


def test_randomized_bases_draw_from_the_generator():
    """Without power iterations the approximation of a full-rank matrix depends on the random test matrix:
    the same generator seed gives the same bases, bit for bit."""
    w0 = _rand(30, 20, seed=9)

    def run(seed: int) -> torch.Tensor:
        u, s, _ = top_k_bases(
            w0, 3, svd="randomized", oversample=1, n_iter=0, generator=torch.Generator().manual_seed(seed)
        )
        return s

    torch.testing.assert_close(run(0), run(0), rtol=0, atol=0)
    assert not torch.equal(run(0), run(1))


def test_block_residual_computes_in_the_bases_dtype():
    """A float32 weight against float64 bases: the residual is computed (and returned) in float64."""
    w0, w = _rand(6, 5, seed=10), _rand(6, 5, seed=11)
    u, _, v = top_k_bases(w0, 2)
    s_ref = reference_block(w0, u, v)
    got = block_residual(w.float(), u, v, s_ref)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, u.mT @ w.float().double() @ v - s_ref)


def test_rotation_penalty_against_projectors():
    from anchorft.subspace import rotation_penalty, rotation_residuals

    w0 = _rand(9, 7, seed=3)
    u, _, v = top_k_bases(w0, 3)
    s_ref = reference_block(w0, u, v)
    w = w0 + 0.1 * _rand(9, 7, seed=4)
    # independent form: ||D||^2 - ||(I - P_U) D (I - P_V)||^2 with explicit projectors
    d = w - w0
    pu, pv = u @ u.T, v @ v.T
    ref = d.pow(2).sum() - ((torch.eye(9, dtype=w.dtype) - pu) @ d @ (torch.eye(7, dtype=w.dtype) - pv)).pow(2).sum()
    a, b, c = rotation_residuals(w.detach(), u, v, s_ref)  # without W_0: from S_ref (exact SVD)
    assert float(rotation_penalty(a, b, c)) == pytest.approx(float(ref), rel=1e-10)
    a2, b2, c2 = rotation_residuals(w.detach(), u, v, s_ref, w0=w0)  # with W_0: the same
    torch.testing.assert_close(a2, a)
    torch.testing.assert_close(b2, b)
    # it sees off-diagonal drift (rotation) that the block penalty misses
    u_perp = torch.linalg.svd(w0)[0][:, 3:4]
    rot = w0 + 0.3 * u_perp @ v[:, :1].T  # moves W only in the U_perp x V_k block
    assert float(block_residual(rot, u, v, s_ref).pow(2).sum()) < 1e-20
    assert float(rotation_penalty(*rotation_residuals(rot, u, v, s_ref))) == pytest.approx(0.09, rel=1e-9)


@pytest.mark.parametrize("frac", [0.0, 0.3, 0.9, 0.999, 1.0])
def test_energy_rank_against_numpy(frac):
    from anchorft.subspace import energy_rank

    w0 = _rand(12, 8, seed=5)
    s = np.linalg.svd(w0.numpy(), compute_uv=False)
    share = np.cumsum(s**2) / np.sum(s**2)
    want = 0 if frac == 0 else (len(s) if frac == 1 else int(np.argmax(share >= frac)) + 1)
    assert energy_rank(torch.linalg.svdvals(w0), frac) == want
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        energy_rank(torch.linalg.svdvals(w0), 1.5)


def test_cumulative_block_energy_against_a_loop():
    from anchorft.subspace import cumulative_block_energy

    g, w0 = _rand(10, 6, seed=6), _rand(10, 6, seed=7)
    u, _, v = top_k_bases(w0, 6)
    got = cumulative_block_energy(g, u, v)
    want = [float((u[:, :k].T @ g @ v[:, :k]).pow(2).sum()) for k in range(1, 7)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_rotation_penalty_of_a_batch_is_one_value_per_matrix():
    from anchorft.subspace import rotation_penalty, rotation_residuals

    w0 = _rand(3, 9, 7, seed=8)
    u, _, v = top_k_bases(w0, 3)
    s_ref = reference_block(w0, u, v)
    w = w0 + 0.1 * _rand(3, 9, 7, seed=9)
    got = rotation_penalty(*rotation_residuals(w, u, v, s_ref))
    assert got.shape == (3,)
    for i in range(3):  # each matrix alone, written with explicit projectors
        d, pu, pv = w[i] - w0[i], u[i] @ u[i].T, v[i] @ v[i].T
        want = (
            d.pow(2).sum() - ((torch.eye(9, dtype=d.dtype) - pu) @ d @ (torch.eye(7, dtype=d.dtype) - pv)).pow(2).sum()
        )
        assert float(got[i]) == pytest.approx(float(want), rel=1e-10)


def test_rotation_residuals_compute_in_the_bases_dtype():
    from anchorft.subspace import rotation_residuals

    w0 = _rand(9, 7, seed=10)
    u, _, v = top_k_bases(w0, 3)
    s_ref = reference_block(w0, u, v)
    w = w0 + 0.1 * _rand(9, 7, seed=11)
    u32, v32, s32 = u.float(), v.float(), s_ref.float()
    for w0_arg in (None, w0):  # W in bfloat16 (a model's weights), W_0 in float64, the bases in float32
        a, b, c = rotation_residuals(w.bfloat16(), u32, v32, s32, w0=w0_arg)
        assert a.dtype == b.dtype == c.dtype == torch.float32
        d = w.bfloat16().double() - w0
        torch.testing.assert_close(a.double(), u.T @ d, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b.double(), d @ v, atol=1e-4, rtol=1e-4)


def test_energy_rank_one_is_every_singular_value_and_sums_in_float64():
    from anchorft.subspace import energy_rank

    # fraction 1 is min(m, n) even when trailing singular values are 0 (a rank-2 matrix of shape 4 x 4)
    assert energy_rank(torch.tensor([3.0, 2.0, 0.0, 0.0]), 1.0) == 4
    assert energy_rank(torch.tensor([3.0, 2.0, 0.0, 0.0]), 0.999) == 2
    # float32 singular values: sigma_2^2 = 1e-8 of the energy is below float32's resolution at 1, not float64's
    s = torch.tensor([1.0, 1e-4], dtype=torch.float32)
    frac = 1.0 - 5e-9
    share = np.cumsum(np.array([1.0, 1e-4]) ** 2) / np.sum(np.array([1.0, 1e-4]) ** 2)
    assert energy_rank(s, frac) == int(np.argmax(share >= frac)) + 1 == 2


def test_cumulative_block_energy_computes_in_the_bases_dtype():
    from anchorft.subspace import cumulative_block_energy

    g, w0 = _rand(10, 6, seed=12), _rand(10, 6, seed=13)
    u, _, v = top_k_bases(w0, 4)
    got = cumulative_block_energy(g.float(), u, v)  # a float32 Fisher gradient, float64 bases
    assert got.dtype == torch.float64
    want = [float((u[:, :k].T @ g.float().double() @ v[:, :k]).pow(2).sum()) for k in range(1, 5)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_randomized_bases_take_a_cpu_generator_for_cuda_weights():
    """`anchorft analyze --device cuda --svd randomized` passes a CPU generator: the sketch is drawn on the CPU and
    moved, so CUDA weights get the CPU's bases (same seed, same sketch on every device)."""
    w = torch.randn(64, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u_cpu, s_cpu, _ = top_k_bases(w, 8, svd="randomized", generator=torch.Generator().manual_seed(1))
    u_gpu, s_gpu, _ = top_k_bases(w.cuda(), 8, svd="randomized", generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(s_gpu.cpu(), s_cpu)
    torch.testing.assert_close((u_gpu.cpu().mT @ u_cpu).abs().diagonal(), torch.ones(8, dtype=torch.float64))
