import numpy as np
import pytest
import torch

from anchorft.w2s.config import apply_overrides
from anchorft.w2s.dynamics import dense_step, log_steps, reduced_step, schedule_factor, step_scale, train
from anchorft.w2s.fused import DenseStepper
from anchorft.w2s.hermite import get_activation
from anchorft.w2s.problem import build_problem
from anchorft.w2s.sampling import generative_dense, generative_reduced, isotropic, make_generators


def _unit_rows(x):
    return x / x.norm(dim=-1, keepdim=True)


def test_dense_step_is_the_projected_gradient_step():
    """Independent computation: autograd gradient of the loss, projected on the tangent space, then renormalised."""
    g = torch.Generator().manual_seed(0)
    S, b, N, d = 2, 8, 5, 20
    act = get_activation("he2+he4")
    w = _unit_rows(torch.randn(S, N, d, generator=g, dtype=torch.float64))
    x = torch.randn(S, b, d, generator=g, dtype=torch.float64)
    y = torch.randn(S, b, generator=g, dtype=torch.float64)
    a = torch.rand(N, generator=g, dtype=torch.float64)
    for loss in ("squared", "correlation"):
        wr = w.clone().requires_grad_(True)
        f = act.value(x @ wr.mT) @ a
        lval = (0.5 * (f - y) ** 2).mean(-1) if loss == "squared" else -(y * f).mean(-1)
        (grad,) = torch.autograd.grad(lval.sum(), wr)
        tangent = grad - (grad * w).sum(-1, keepdim=True) * w
        ref = _unit_rows(w - 0.3 * tangent)
        new, lv = dense_step(w, x, y, a, act, 0.3, loss)
        torch.testing.assert_close(new, ref, atol=1e-12, rtol=0)
        torch.testing.assert_close(lv, lval.detach())
        torch.testing.assert_close(new.norm(dim=-1), torch.ones(S, N, dtype=torch.float64))


def test_dense_step_with_an_extra_gradient():
    """With `extra_grad` E (the anchor's dR/dW): the projected step of the autograd data gradient plus E."""
    g = torch.Generator().manual_seed(2)
    S, b, N, d = 2, 8, 5, 20
    act = get_activation("he2+he4")
    w = _unit_rows(torch.randn(S, N, d, generator=g, dtype=torch.float64))
    x = torch.randn(S, b, d, generator=g, dtype=torch.float64)
    y = torch.randn(S, b, generator=g, dtype=torch.float64)
    a = torch.rand(N, generator=g, dtype=torch.float64)
    extra = torch.randn(S, N, d, generator=g, dtype=torch.float64)
    wr = w.clone().requires_grad_(True)
    lval = (0.5 * (act.value(x @ wr.mT) @ a - y) ** 2).mean(-1)
    (grad,) = torch.autograd.grad(lval.sum(), wr)
    full = grad + extra
    ref = _unit_rows(w - 0.3 * (full - (full * w).sum(-1, keepdim=True) * w))
    new, _ = dense_step(w, x, y, a, act, 0.3, "squared", extra)
    torch.testing.assert_close(new, ref, atol=1e-12, rtol=0)


def test_dense_step_in_place_gives_the_same_numbers_in_w_itself():
    """`inplace=True` (what `DenseStepper` uses: no new (S, N, d) tensor per step) writes W_new into w, bit for bit
    the pure step's W_new; a stepper's W stays one tensor across steps and chunk ends."""
    g = torch.Generator().manual_seed(3)
    S, b, N, d = 3, 8, 5, 40
    act = get_activation("he2+he4")
    w = _unit_rows(torch.randn(S, N, d, generator=g))
    x = torch.randn(S, b, d, generator=g)
    y = torch.randn(S, b, generator=g)
    a = torch.rand(N, generator=g)
    for loss in ("squared", "correlation"):
        ref, lref = dense_step(w, x, y, a, act, 0.3, loss)
        mine = w.clone()
        got, lv = dense_step(mine, x, y, a, act, 0.3, loss, inplace=True)
        assert got is mine and torch.equal(got, ref) and torch.equal(lv, lref)
    stepper = DenseStepper(w, a, act, "squared", 4, dense_step)
    ptr = stepper.weights().data_ptr()
    for i in range(4):
        stepper.step(i, x, x @ x.mT, y, 0.3)
    stepper.end_chunk()
    assert stepper.weights().data_ptr() == ptr and not torch.equal(stepper.weights(), w)


def test_isotropic_draws_into_a_buffer_are_the_same_numbers():
    gens = lambda: make_generators([4, 9], 2, torch.device("cpu"))  # noqa: E731
    plain = isotropic(gens(), 3, 5, 7, torch.float32, torch.device("cpu"))  # (chunk, S, b, d)
    buf = torch.empty(2, 4, 5, 7)
    got = isotropic(gens(), 3, 5, 7, torch.float32, torch.device("cpu"), out=buf)
    assert torch.equal(got, plain) and got.data_ptr() == buf.data_ptr()


def test_reduced_step_equals_dense_step_on_lifted_inputs():
    g = torch.Generator().manual_seed(1)
    S, b, N, d, s = 2, 8, 6, 30, 5
    act = get_activation("he2+he4")
    basis, _ = torch.linalg.qr(torch.randn(S, d, s, generator=g, dtype=torch.float64))
    w = _unit_rows(torch.randn(S, N, d, generator=g, dtype=torch.float64))
    c = w @ basis
    p = w - c @ basis.mT
    q = (p * p).sum(-1)
    r = torch.ones(S, N, dtype=torch.float64)
    z = torch.randn(S, b, s, generator=g, dtype=torch.float64)
    y = torch.randn(S, b, generator=g, dtype=torch.float64)
    a = torch.rand(N, generator=g, dtype=torch.float64)
    for _ in range(5):
        w, _ = dense_step(w, z @ basis.mT, y, a, act, 0.5)  # x = B z
        c, r, _ = reduced_step(c, r, z, y, a, act, 0.5)
    torch.testing.assert_close(r.unsqueeze(-1) * p + c @ basis.mT, w, atol=1e-12, rtol=0)
    torch.testing.assert_close(r * r * q + (c * c).sum(-1), torch.ones(S, N, dtype=torch.float64))


@pytest.mark.parametrize("mode", ["w2s", "sft", "sft_anchor"])
def test_spherical_sgd_keeps_unit_norms(tiny, mode):
    cfg = apply_overrides(tiny, {"lambda_kappa": 0.5}) if mode == "w2s" else tiny
    res = train(cfg, build_problem(cfg), mode, progress=False)
    torch.testing.assert_close(res.weights.norm(dim=-1), torch.ones(2, 10), atol=1e-5, rtol=0)
    res = train(tiny, build_problem(tiny), "w2s", progress=False)  # reduced path
    torch.testing.assert_close(res.weights.norm(dim=-1), torch.ones(2, 10), atol=1e-5, rtol=0)


def test_orthogonal_subspaces_lambda_one_nontarget_do_not_move(tiny):
    cfg = apply_overrides(tiny, {"rho": 0.0, "lambda_kappa": 1.0, "steps": 200, "dtype": "float64"})
    pb = build_problem(cfg)
    res = train(cfg, pb, "w2s", progress=False)
    non = pb.groups > 0
    moved_non = (res.weights[:, non] - pb.w0[:, non]).abs().max()
    moved_tgt = (res.weights[:, ~non] - pb.w0[:, ~non]).abs().max()
    assert moved_non < 1e-12
    assert moved_tgt > 1e-2


def test_dense_sampler_at_lambda_one_leaves_nontarget_neurons_in_place(tiny):
    """The same result through the dense path: dense_step on generative_dense(lambda = 1) inputs (in V_kappa
    exactly) with the weak model's labels moves the target neurons and leaves the non-target ones in place."""
    cfg = apply_overrides(tiny, {"rho": 0.0, "lambda_kappa": 1.0, "dtype": "float64"})
    pb = build_problem(cfg)
    act, weak_act = get_activation(cfg.activation), get_activation(cfg.weak_activation)
    gens = make_generators(pb.seeds, 1, torch.device("cpu"))
    w = pb.w0.clone()
    for _ in range(25):
        for x in generative_dense(gens, pb.bases[:, 0], 1.0, 8, cfg.batch_size):
            y = weak_act.value(x @ pb.weak_u.mT).mean(-1)
            w, _ = dense_step(w, x, y, pb.a, act, 0.5)
    non = pb.groups > 0
    assert (w[:, non] - pb.w0[:, non]).abs().max() < 1e-12
    assert (w[:, ~non] - pb.w0[:, ~non]).abs().max() > 1e-2


def _block_penalty(w: torch.Tensor, w0: torch.Tensor, k: int) -> np.ndarray:
    """R(W) = ||U_0^T (W - W_0) V_0||_F^2 per seed, from NumPy's SVD of W_0 (independent of anchorft.rpsft)."""
    out = []
    for ws, w0s in zip(w.double().numpy(), w0.double().numpy()):
        u, _, vt = np.linalg.svd(w0s, full_matrices=False)
        out.append(float(np.sum((u[:, :k].T @ (ws - w0s) @ vt[:k].T) ** 2)))
    return np.array(out)


def test_sft_anchor_pulls_the_top_k_block_back_to_w0(tiny):
    """The RPSFT anchor inside the simulator: weight 0 is SFT exactly (same inputs); a positive weight keeps the
    top-k block of W near W_0, more so the larger the weight (a flipped or mis-scaled penalty gradient fails)."""
    cfg = apply_overrides(tiny, {"dtype": "float64", "steps": 100})
    pb = build_problem(cfg)
    k = cfg.anchor_rank
    sft = train(cfg, pb, "sft", progress=False).weights
    off = train(apply_overrides(cfg, {"anchor_weight": 0.0}), pb, "sft_anchor", progress=False).weights
    torch.testing.assert_close(off, sft, atol=0, rtol=0)

    def anchored(weight: float) -> np.ndarray:
        res = train(apply_overrides(cfg, {"anchor_weight": weight}), pb, "sft_anchor", progress=False)
        return _block_penalty(res.weights, pb.w0, k)

    r_sft, r_half, r_two = _block_penalty(sft, pb.w0, k), anchored(0.5), anchored(2.0)
    assert (r_sft > 1.0).all()  # SFT alone moves the block (measured: 4.4 and 5.4)
    assert (r_half < 0.05 * r_sft).all()  # measured: 0.061 and 0.021
    assert (r_two < 0.5 * r_half).all()  # measured: 0.0086 and 0.0035


def test_same_seed_same_metrics(tiny):
    a = train(tiny, build_problem(tiny), "sft", progress=False).log
    b = train(tiny, build_problem(tiny), "sft", progress=False).log
    assert a == b
    c = train(
        apply_overrides(tiny, {"seed": 5}), build_problem(apply_overrides(tiny, {"seed": 5})), "sft", progress=False
    )
    assert c.log["target_alignment"] != a["target_alignment"]


@pytest.mark.parametrize("mode", ["w2s", "sft"])
def test_batched_seeds_equal_a_loop_over_seeds(tiny, mode):
    cfg = apply_overrides(tiny, {"n_seeds": 3, "dtype": "float64"})
    batched = train(cfg, build_problem(cfg), mode, progress=False)
    for i in range(3):
        one = apply_overrides(cfg, {"n_seeds": 1, "seed": cfg.seed + i})
        single = train(one, build_problem(one), mode, progress=False)
        torch.testing.assert_close(batched.weights[i], single.weights[0], atol=1e-10, rtol=0)
        got = [v[i] for v in batched.log["target_alignment_seeds"]]
        np.testing.assert_allclose(got, [v[0] for v in single.log["target_alignment_seeds"]], atol=1e-10)


def test_lambda_one_sampler_has_the_dense_distribution():
    d, s, n = 12, 4, 40000
    g = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(1, d, s, generator=g, dtype=torch.float64))
    proj = basis[0] @ basis[0].T
    z = generative_reduced(make_generators([0], 1, torch.device("cpu")), s, 1, n, torch.float64, "cpu")
    x_red = z @ basis.mT  # x = B z
    x_den = generative_dense(make_generators([1], 1, torch.device("cpu")), basis, 1.0, 1, n)
    for x in (x_red[0, 0], x_den[0, 0]):
        cov = x.T @ x / n
        assert (cov - proj).abs().max() < 0.05  # both N(0, B B^T)
        assert (x - x @ proj).abs().max() < 1e-12  # both inside V_kappa
    x_half = generative_dense(make_generators([2], 1, torch.device("cpu")), basis, 0.5, 1, n)[0, 0]
    cov = x_half.T @ x_half / n
    assert (cov - (proj + 0.5 * (torch.eye(d, dtype=torch.float64) - proj))).abs().max() < 0.05


def test_nan_stops_the_run_and_keeps_metrics(tiny):
    cfg = apply_overrides(tiny, {"eta_sft": 1e30, "steps": 40})
    res = train(cfg, build_problem(cfg), "sft", progress=False)
    assert res.diverged_at is not None and 1 <= res.diverged_at <= 40
    assert res.log["steps"][0] == 0 and all(t < res.diverged_at for t in res.log["steps"])
    assert all(np.isfinite(res.log["target_alignment"]))


def test_schedule_and_log_steps(tiny):
    cfg = apply_overrides(tiny, {"anneal_start": 0.5, "anneal_final": 0.1})
    assert schedule_factor(cfg, 0, 100) == 1.0 and schedule_factor(cfg, 49, 100) == 1.0
    assert abs(schedule_factor(cfg, 99, 100) - 0.1) < 1e-12
    assert schedule_factor(apply_overrides(cfg, {"schedule": "constant"}), 99, 100) == 1.0
    pts = log_steps(1000, 20)
    assert pts[0] == 0 and pts[-1] == 1000 and pts == sorted(set(pts))
    # geometric in between: anneal_final ** ((t - t0) / (steps - 1 - t0)), t0 = 50
    assert schedule_factor(cfg, 74, 100) == pytest.approx(0.1 ** (24 / 49), rel=1e-12)
    # a one-step decay (t0 = steps - 2) reaches anneal_final at the last step
    assert schedule_factor(apply_overrides(cfg, {"anneal_start": 0.8}), 9, 10) == pytest.approx(0.1)
    # the decay starts at the last step or later: no decay (and no 0 / 0)
    late = apply_overrides(cfg, {"anneal_start": 0.95})  # t0 = 9 of 10 steps
    assert schedule_factor(late, 9, 10) == 1.0
    assert schedule_factor(apply_overrides(cfg, {"anneal_start": 1.0}), 9, 10) == 1.0


def test_step_scale_is_eta_n_kappa_over_c_s_or_c_d(tiny):
    """eta_w2s N_kappa / (c s) under W2S and its ceiling (W2S inputs, true labels), eta_sft N_kappa / (c d) under SFT
    and SFT + anchor (N_kappa = 4 here)."""
    cfg = apply_overrides(tiny, {"eta_w2s": 0.3, "eta_sft": 0.7, "c": 0.2})
    assert cfg.group_sizes == [4, 6] and cfg.s == 8 and cfg.d == 48
    assert step_scale(cfg, "w2s") == pytest.approx(0.3 * 4 / (0.2 * 8))
    assert step_scale(cfg, "ceiling") == pytest.approx(0.3 * 4 / (0.2 * 8))
    assert step_scale(cfg, "sft") == pytest.approx(0.7 * 4 / (0.2 * 48))
    assert step_scale(cfg, "sft_anchor") == pytest.approx(0.7 * 4 / (0.2 * 48))


def test_hit_threshold_stops_early(tiny):
    cfg = apply_overrides(tiny, {"steps": 400, "schedule": "constant"})
    res = train(cfg, build_problem(cfg), "w2s", progress=False, hit_threshold=0.3)
    hits = res.extra["hit_step"]
    assert all(h is not None for h in hits) and res.extra["steps_run"] == max(hits) <= 400
    res = train(cfg, build_problem(cfg), "sft", progress=False, hit_threshold=0.99)
    assert res.extra["hit_step"] == [None, None] and res.extra["steps_run"] == 400


def test_weak_model_from_scratch_learns_theta(tiny):
    from anchorft.w2s.dynamics import train_weak

    cfg = apply_overrides(
        tiny, {"d": 16, "s": 8, "weak": "scratch", "weak_space": "ambient", "weak_steps": 600, "weak_eta": 1.0}
    )
    pb = build_problem(cfg)
    u, info = train_weak(cfg, pb, progress=False, hit_threshold=0.5)
    assert u.shape == (2, cfg.weak_neurons, 16)
    torch.testing.assert_close(u.norm(dim=-1), torch.ones(2, cfg.weak_neurons), atol=1e-5, rtol=0)
    # from a uniform start (alignment ~ d^{-1/2} = 0.25) every seed reaches 0.5, and the run stops there
    assert all(h is not None for h in info["hit_step"]) and info["steps_run"] == max(info["hit_step"])
    _, info = train_weak(apply_overrides(cfg, {"weak_steps": 8}), pb, progress=False, hit_threshold=0.99)
    assert info["hit_step"] == [None, None] and info["steps_run"] == 8


def test_weak_model_trained_in_the_subspace(tiny):
    """weak_space=subspace: the weak model is trained in the s-dimensional problem (inputs x = B z), so its neurons
    stay unit vectors of V_kappa, start at alignment ~ s^{-1/2} and learn theta_kappa; weak_stop freezes each
    seed at the first chunk end where it reached the stop alignment (a longer budget leaves those seeds as they
    were)."""
    from anchorft.w2s.dynamics import train_weak

    cfg = apply_overrides(tiny, {"d": 64, "s": 8, "weak": "trained", "weak_steps": 1600, "weak_eta": 0.5})
    pb = build_problem(cfg)
    b0 = pb.bases[:, 0]
    u, info = train_weak(cfg, pb, progress=False, hit_threshold=0.6)
    assert info["space"] == "subspace" and u.shape == (2, cfg.weak_neurons, 64)
    # inside V_kappa: ||B^T u_j|| = ||u_j|| = 1 (trained in R^d, ||B^T u_j|| would be ~ sqrt(s / d) = 0.35)
    torch.testing.assert_close((u @ b0).norm(dim=-1), torch.ones(2, cfg.weak_neurons), atol=1e-4, rtol=0)
    assert all(h is not None for h in info["hit_step"])
    u1, i1 = train_weak(cfg, pb, progress=False, stop_at=0.6)
    assert all(t is not None for t in i1["stop_step"]) and min(i1["final_alignment"]) >= 0.6
    u2, i2 = train_weak(apply_overrides(cfg, {"weak_steps": 3200}), pb, progress=False, stop_at=0.6)
    assert i2["stop_step"] == i1["stop_step"]
    torch.testing.assert_close(u2, u1, atol=0, rtol=0)
    # the stop point is the first checked step at or above the stop alignment, as the hit time is
    assert i1["stop_step"] == info["hit_step"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_statistics(tiny):
    cfg = apply_overrides(tiny, {"device": "cuda", "steps": 100})
    res = train(cfg, build_problem(cfg), "w2s", progress=False)
    assert res.weights.device.type == "cuda"
    torch.testing.assert_close(res.weights.norm(dim=-1).cpu(), torch.ones(2, 10), atol=1e-5, rtol=0)
    assert res.log["target_alignment"][-1] > res.log["target_alignment"][0]
