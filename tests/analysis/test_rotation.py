"""Principal angles against scipy and closed forms; rotation statistics on constructed weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from anchorft.analysis.rotation import principal_angles, rotation_stats, vector_angles


def _frame(m: int, k: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(m, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q


def test_identical_subspaces_have_zero_angles():
    u = _frame(40, 6, 0)
    mix = _frame(6, 6, 1)  # another basis of the same span
    ang = principal_angles(u, u @ mix)
    assert ang.shape == (6,)
    assert torch.allclose(ang, torch.zeros(6, dtype=torch.float64), atol=1e-7)


def test_orthogonal_subspaces_have_right_angles():
    q = _frame(30, 8, 2)
    ang = principal_angles(q[:, :4], q[:, 4:])
    assert torch.allclose(ang, torch.full((4,), math.pi / 2, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("p,q", [(5, 5), (7, 3), (3, 7)])
def test_matches_scipy(p, q):
    a, b = _frame(25, p, 3), _frame(25, q, 4)
    ours = np.sort(principal_angles(a, b).numpy())
    ref = np.sort(scipy.linalg.subspace_angles(a.numpy(), b.numpy()))
    np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_small_angle_is_precise():
    """arccos alone would lose a 1e-9 rad angle; the sine branch keeps it."""
    q = _frame(10, 3, 5)
    theta = 1e-9
    b = q[:, :2].clone()
    b[:, 1] = math.cos(theta) * q[:, 1] + math.sin(theta) * q[:, 2]
    ang = principal_angles(q[:, :2], b)
    assert ang[1].item() == pytest.approx(theta, rel=1e-5)


def test_known_rotation_recovered():
    """W = R W0 with R a rotation by theta in the plane (u_1, u_{k+1}): one left angle theta, right angles 0."""
    m, n, k, theta = 12, 9, 4, 0.3
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=torch.Generator().manual_seed(6), dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(7), dtype=torch.float64))
    s = torch.linspace(10, 1, n, dtype=torch.float64)
    w0 = u[:, :n] @ torch.diag(s) @ v.T
    a, b = u[:, 0:1], u[:, k : k + 1]
    rot = (
        torch.eye(m, dtype=torch.float64)
        + (math.cos(theta) - 1) * (a @ a.T + b @ b.T)
        + math.sin(theta) * (b @ a.T - a @ b.T)
    )
    st = rotation_stats(w0, rot @ w0, k)
    assert st["angle_u_max_deg"] == pytest.approx(math.degrees(theta), abs=1e-8)
    assert st["angle_u_mean_deg"] == pytest.approx(math.degrees(theta) / k, abs=1e-8)
    assert st["angle_v_max_deg"] == pytest.approx(0.0, abs=1e-6)
    assert st["sv_rel_change"] == pytest.approx(0.0, abs=1e-12)  # values stay, vectors rotate
    assert st["vec_angle_u_deg"][0] == pytest.approx(math.degrees(theta), abs=1e-8)
    assert st["overlap_u"] == pytest.approx((k - 1 + math.cos(theta) ** 2) / k, abs=1e-12)


def test_block_share_of_update():
    m, n, k = 10, 8, 3
    w0 = torch.randn(m, n, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    u, _, vh = torch.linalg.svd(w0)
    inside = u[:, :k] @ torch.randn(k, k, dtype=torch.float64, generator=torch.Generator().manual_seed(9)) @ vh[:k]
    outside = u[:, k:] @ torch.randn(m - k, n, dtype=torch.float64, generator=torch.Generator().manual_seed(10))
    assert rotation_stats(w0, w0 + 1e-3 * inside, k)["block_share_of_update"] == pytest.approx(1.0, abs=1e-9)
    assert rotation_stats(w0, w0 + 1e-3 * outside, k)["block_share_of_update"] == pytest.approx(0.0, abs=1e-9)


def test_vector_angles_sign_free():
    a = _frame(6, 2, 11)
    assert torch.allclose(vector_angles(a, -a), torch.zeros(2, dtype=torch.float64), atol=1e-7)


def test_rank_above_size_is_refused():
    w = torch.randn(5, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="k=4 exceeds min"):
        rotation_stats(w, w, 4)
