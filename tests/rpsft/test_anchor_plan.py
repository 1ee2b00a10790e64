"""Per-matrix anchors: rank rules, the name map, layer selection, the memory budget, the remainder L2 and the
subspace kind, against independent computations (numpy SVD, autograd, brute force over every allocation)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from anchorft.rpsft import anchor_plan as plan
from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters


@pytest.fixture
def model(rp):
    return rp.tiny_model("llama", 64)


def test_energy_one_is_the_full_rank_fallback_and_zero_anchors_nothing(rp, model):
    full = SubspaceAnchor.from_model(model, rank="energy:1.0")
    l2 = SubspaceAnchor.from_model(model, rank=10**9)
    assert [(e.name, e.rank, e.fallback) for e in full.entries] == [(e.name, e.rank, e.fallback) for e in l2.entries]
    assert all(e.fallback for e in full.entries)
    rp.perturb(model)
    assert float(full.penalty(model)) == pytest.approx(float(l2.penalty(model)), rel=1e-12)
    none = SubspaceAnchor.from_model(model, rank="energy:0")
    assert none.entries == [] and set(none.ranks.values()) == {0}
    assert float(none.penalty(model)) == 0.0
    assert none.add_penalty_grad_(model, 1.0) == {"penalty": 0.0, "drift_max": 0.0}


def test_energy_rule_ranks_match_numpy(model):
    anchor = SubspaceAnchor.from_model(model, rank="energy:0.6")
    params = dict(model.named_parameters())
    for name, k in anchor.ranks.items():
        s = np.linalg.svd(params[name].detach().double().numpy(), compute_uv=False)
        share = np.cumsum(s**2) / np.sum(s**2)
        assert k == int(np.argmax(share >= 0.6)) + 1, name
    assert len({e.rank for e in anchor.entries}) > 1  # per-matrix, not uniform


def test_map_overrides_the_global_rank_and_lambda(rp, model):
    anchor = SubspaceAnchor.from_model(
        model,
        rank=4,
        rank_map={r"q_proj": 2, r"layers\.1\.mlp": {"rank": 0}, r"v_proj": {"lambda": 3.0}},
        base_lambda=2.0,
    )
    by = {e.name: e for e in anchor.entries}
    for name, k in anchor.ranks.items():
        if "q_proj" in name:
            assert k == 2 and by[name].rank == 2
        elif "layers.1.mlp" in name:
            assert k == 0 and name not in by
        else:
            assert by[name].rank == min(4, *by[name].shape)
        if "v_proj" in name:
            assert by[name].weight == pytest.approx(1.5)  # lambda 3 over the global 2
    # the weight scales that matrix's term and gradient
    rp.perturb(model)
    plain = SubspaceAnchor.from_model(model, rank=4)  # built from other weights: only the ratio matters here
    terms = anchor.penalty_terms(model)
    v_idx = [i for i, e in enumerate(anchor.entries) if "v_proj" in e.name]
    raw = anchor._blocks(model, differentiable=True)[1]
    torch.testing.assert_close(terms[v_idx], 1.5 * raw[v_idx])
    assert plain.entries  # built fine


def test_map_from_yaml_text_and_rules(model, tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text("'self_attn': 'energy:1.0'\nmlp: 3\n")
    anchor = SubspaceAnchor.from_model(model, rank=1, rank_map=str(path))
    for e in anchor.entries:
        if "self_attn" in e.name:
            assert e.fallback
        elif "mlp" in e.name:
            assert e.rank == 3
        else:
            assert e.rank == 1


def test_layers_compose_with_targets(model):
    names = [n for n, _ in select_parameters(model)]
    a = SubspaceAnchor.from_model(model, rank=2, targets="self_attn", layers="1")
    assert sorted(e.name for e in a.entries) == sorted(n for n in names if "layers.1.self_attn" in n)
    b = SubspaceAnchor.from_model(model, rank=2, layers="0-1")
    assert not any("embed" in e.name or "lm_head" in e.name for e in b.entries)
    c = SubspaceAnchor.from_model(model, rank=2, layers=r"embed|lm_head")
    assert sorted(e.name for e in c.entries) == ["lm_head.weight", "model.embed_tokens.weight"]
    assert plan.select_layers(["model.layers.12.mlp.up_proj.weight"], "10-12") == [
        "model.layers.12.mlp.up_proj.weight"
    ]


# ---------------------------------------------------------------- bad input: one line, before any SVD
@pytest.fixture
def no_svd(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an SVD ran before the input was checked")

    for name in ("svd", "svdvals"):
        monkeypatch.setattr(torch.linalg, name, boom)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank="energy:1.5"), r"fraction must be in \[0, 1\]"),
        (dict(rank="fisher:-0.1"), r"fraction must be in \[0, 1\]"),
        (dict(rank="spectrum:0.5"), "expected 'energy:F' or 'fisher:F'"),
        (dict(rank=4, rank_map={"nothing_like_this": 2}), r"matches none of the anchored matrices \[.*q_proj"),
        (dict(rank=4, layers="no_such_layer"), r"matches none of the anchored matrices \[.*q_proj"),
        (dict(rank=4, layers="7-9"), "matches none"),
        (dict(rank=4, memory=100), "below the cheapest rank-1 block"),
        (dict(rank="fisher:0.5"), "fisher rules need F_ood G"),
        (dict(rank=4, kind="diagonal"), "kind must be 'block' or 'subspace'"),
    ],
)
def test_bad_input_is_one_line_before_any_svd(model, no_svd, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        SubspaceAnchor.from_model(model, **kwargs)
    assert "\n" not in str(info.value)


def test_config_checks_the_options_before_loading(tmp_path, rp):
    for kw, match in [
        (dict(anchor_rank_rule="energy:2"), r"\[0, 1\]"),
        (dict(anchor_kind="rows"), "anchor_kind"),
        (dict(anchor_memory=0), "anchor_memory"),
        (dict(anchor_lambda_rest=-1.0), "anchor_lambda_rest"),
        (dict(anchor_map="{q_proj: {rank: 2, lamda: 1}}"), "unknown key"),
    ]:
        with pytest.raises(ValueError, match=match):
            rp.base_args(str(tmp_path), **kw)


# ---------------------------------------------------------------- the memory budget
def _brute_force(costs, gains, budget):
    best = 0.0
    for ks in itertools.product(*[range(len(c)) for c in costs]):
        if sum(c[k] for c, k in zip(costs, ks)) <= budget:
            best = max(best, sum(g[k] for g, k in zip(gains, ks)))
    return best


def _problem(rng, shapes):
    costs, gains = [], []
    for m, n in shapes:
        r = min(m, n)
        s = np.sort(rng.gamma(0.7, size=r))[::-1]
        e = np.concatenate([[0.0], np.cumsum(s**2) / np.sum(s**2)])
        costs.append([plan.anchor_numbers(m, n, k) * 4 for k in range(r + 1)])
        gains.append(e.tolist())
    return costs, gains


# the gap the docs state (docs/anchoring.md), measured against brute force on 60 random cases of 3 matrices:
# at most 32 % of the optimum when the matrices are 2..5 wide (a rank step is then a large part of the budget),
# at most 5 % at 8..23 wide; always within the bound the greedy reports (the LP relaxation's)
@pytest.mark.parametrize("lo, hi, gap_stated", [(2, 6, 0.32), (8, 24, 0.05)])
def test_budget_greedy_never_over_budget_and_near_brute_force(lo, hi, gap_stated):
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(60):
        shapes = [tuple(int(x) for x in rng.integers(lo, hi, size=2)) for _ in range(3)]
        costs, gains = _problem(rng, shapes)
        total = sum(c[-1] for c in costs)
        budget = float(rng.uniform(0.05, 1.0) * total)
        info: dict = {}
        ranks = plan.allocate_ranks(costs, gains, budget, info)
        cost = sum(c[k] for c, k in zip(costs, ranks))
        assert cost <= budget and cost == info["cost"]
        got = sum(g[k] for g, k in zip(gains, ranks))
        opt = _brute_force(costs, gains, budget)
        assert got <= opt + 1e-12
        assert opt - got <= info["gap_bound"] + 1e-12
        if opt > 0:
            worst = max(worst, (opt - got) / opt)
    assert worst <= gap_stated


def test_budget_in_the_anchor_is_respected(model):
    names = [n for n, _ in select_parameters(model)]
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters() if n in names}
    uniform = SubspaceAnchor.from_model(model, rank=4)
    budget = sum(e.numel for e in uniform.entries) * 4
    anchor = SubspaceAnchor.from_model(model, memory=budget)
    used = sum(e.numel for e in anchor.entries) * 4
    assert used <= budget and used == anchor.meta["memory_used"]
    assert used > 0.8 * budget
    assert set(anchor.ranks) == set(shapes)
    # it protects at least the spectral energy of the uniform rank at the same memory (sum of per-matrix shares)
    params = dict(model.named_parameters())

    def protected(a):
        tot = 0.0
        for e in a.entries:
            s = torch.linalg.svdvals(params[e.name].detach().double())
            tot += float(s[: e.rank].pow(2).sum() / s.pow(2).sum())
        return tot

    assert protected(anchor) >= protected(uniform) - 1e-9


def test_rank_one_costs_what_the_anchor_stores(model):
    anchor = SubspaceAnchor.from_model(model, rank=1)
    for e in anchor.entries:
        m, n = e.shape
        assert e.numel == plan.anchor_numbers(m, n, 1) == m + n + 1
    a2 = SubspaceAnchor.from_model(model, rank=2)
    for e1, e2 in zip(anchor.entries, a2.entries):
        m, n = e1.shape
        assert e2.numel - e1.numel == m + n + 2 * 1 + 1  # (m + n + 2k + 1) numbers for rank k -> k + 1


# ---------------------------------------------------------------- remainder L2 and subspace kind
@pytest.mark.parametrize("kind", ["block", "subspace"])
@pytest.mark.parametrize("rest", [0.0, 0.3])
def test_kind_and_rest_penalty_and_closed_form_grad(rp, model, kind, rest):
    params = dict(model.named_parameters())
    w0 = {n: p.detach().clone().double() for n, p in params.items()}
    anchor = SubspaceAnchor.from_model(model, rank=3, kind=kind, lambda_rest=rest, base_lambda=1.0)
    assert float(anchor.penalty(model)) == pytest.approx(0.0, abs=1e-8)
    rp.perturb(model)
    # independent: explicit projectors from numpy's SVD of W_0
    want = 0.0
    for e in anchor.entries:
        d = params[e.name].detach().double() - w0[e.name]
        if e.fallback:
            want += float(d.pow(2).sum())
            continue
        u_np, _, vt_np = np.linalg.svd(w0[e.name].numpy())
        pu = torch.from_numpy(u_np[:, :3] @ u_np[:, :3].T)
        pv = torch.from_numpy(vt_np[:3].T @ vt_np[:3])
        prot = pu @ d @ pv if kind == "block" else pu @ d + d @ pv - pu @ d @ pv
        r = float(prot.pow(2).sum()) if kind == "block" else float(d.pow(2).sum() - (d - prot).pow(2).sum())
        want += r + rest * (float(d.pow(2).sum()) - r)
    assert float(anchor.penalty(model)) == pytest.approx(want, rel=1e-5)
    model.zero_grad()
    anchor.penalty(model).backward()
    auto = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    out = anchor.add_penalty_grad_(model, scale=2.0)
    assert out["penalty"] == pytest.approx(want, rel=1e-5)
    for e in anchor.entries:
        torch.testing.assert_close(params[e.name].grad, 2.0 * auto[e.name], rtol=1e-5, atol=1e-7)


def test_subspace_kind_has_the_same_memory(model):
    a = SubspaceAnchor.from_model(model, rank=3)
    b = SubspaceAnchor.from_model(model, rank=3, kind="subspace")
    assert [e.numel for e in a.entries] == [e.numel for e in b.entries]
    c = SubspaceAnchor.from_model(model, rank=3, lambda_rest=0.1)
    assert all(
        ec.numel == ea.numel + (0 if ea.fallback else ea.shape[0] * ea.shape[1])
        for ea, ec in zip(a.entries, c.entries)
    )


# ---------------------------------------------------------------- persistence
def test_resolved_ranks_saved_and_reloaded(rp, model, tmp_path):
    anchor = SubspaceAnchor.from_model(
        model, rank="energy:0.7", rank_map={"q_proj": {"lambda": 2.0}, "lm_head": 0}, kind="subspace", lambda_rest=0.2
    )
    assert anchor.ranks["lm_head.weight"] == 0  # a matrix left out still lets the fingerprint check pass on load
    anchor.save(tmp_path / "a")
    back = SubspaceAnchor.load(tmp_path / "a", model)
    assert back.ranks == anchor.ranks and back.kind == "subspace"
    assert [(e.name, e.rank, e.weight, e.rest) for e in back.entries] == [
        (e.name, e.rank, e.weight, e.rest) for e in anchor.entries
    ]
    rp.perturb(model)
    assert float(back.penalty(model)) == pytest.approx(float(anchor.penalty(model)), rel=1e-12)


def test_fisher_rule_from_a_given_product(model):
    names = [n for n, _ in select_parameters(model)]
    params = dict(model.named_parameters())
    g = torch.Generator().manual_seed(3)
    fisher = {n: torch.randn(params[n].shape, generator=g, dtype=torch.float64) for n in names}
    anchor = SubspaceAnchor.from_model(model, rank="fisher:0.5", fisher=fisher)
    for n in names:
        w = params[n].detach().double()
        u, _, vh = torch.linalg.svd(w, full_matrices=False)
        total = float(fisher[n].pow(2).sum())
        shares = [float((u[:, :k].T @ fisher[n] @ vh[:k].T).pow(2).sum()) / total for k in range(1, min(w.shape) + 1)]
        want = next((k + 1 for k, sh in enumerate(shares) if sh >= 0.5), min(w.shape))
        assert anchor.ranks[n] == want, n


def test_drift_max_after_penalty_terms_is_unweighted_by_the_map_lambda(rp, model):
    """drift_max = max_l ||U^T (W - W_0) V||_F / ||U^T W_0 V||_F (numpy SVD) whatever weight a map's lambda gives
    the terms: `summarize(penalty_terms(...))` reads the unweighted R_l, not the weighted terms."""
    names = [n for n, _ in select_parameters(model)]
    w0s = {n: p.detach().double().numpy().copy() for n, p in model.named_parameters() if n in names}
    anchor = SubspaceAnchor.from_model(model, rank=4, rank_map={r".": {"lambda": 8.0}}, base_lambda=2.0)
    assert {e.weight for e in anchor.entries} == {4.0}
    rp.perturb(model)
    params = dict(model.named_parameters())
    rel, raw = [], 0.0
    for name, w0 in w0s.items():
        u, _, vt = np.linalg.svd(w0)
        block = u[:, :4].T @ (params[name].detach().double().numpy() - w0) @ vt[:4].T
        rel.append(np.linalg.norm(block) / np.linalg.norm(u[:, :4].T @ w0 @ vt[:4].T))
        raw += float(np.sum(block**2))
    got = anchor.summarize(anchor.penalty_terms(model))
    assert got["drift_max"] == pytest.approx(max(rel), rel=1e-4)
    assert got["penalty"] == pytest.approx(4.0 * raw, rel=1e-5)
