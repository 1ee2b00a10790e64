"""The anchor planner's small parts, each against an independent statement of what it must return: the rank
rules and the map (values and the exact one-line messages users read), the stored-number count, the upper hull
(against a brute-force definition), the Fisher rank (against a loop), the ranks table, the map's JSON, and the
option checks and keyword arguments the configs hand to the anchor."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from anchorft.errors import UsageError
from anchorft.rpsft import anchor_plan as plan
from anchorft.rpsft.anchor_plan import MapEntry, RankRule


# ---------------------------------------------------------------- rank rules and map values
def test_rank_rule_parsing_and_its_messages():
    assert plan.parse_rank_rule(" Energy :0.25") == RankRule("energy", 0.25)
    assert plan.parse_rank_rule("fisher:1") == RankRule("fisher", 1.0)
    assert str(RankRule("energy", 0.5)) == "energy:0.5"
    cases = [
        ("spectrum:0.5", "anchor_rank_rule: expected 'energy:F' or 'fisher:F' (F in [0, 1]), got 'spectrum:0.5'"),
        ("energy", "anchor_rank_rule: expected 'energy:F' or 'fisher:F' (F in [0, 1]), got 'energy'"),
        # the first colon splits: the rest is the fraction
        ("energy:0.5:1", "anchor_rank_rule: fraction must be a number in [0, 1], got '0.5:1' in 'energy:0.5:1'"),
        ("fisher:x", "anchor_rank_rule: fraction must be a number in [0, 1], got 'x' in 'fisher:x'"),
        ("energy:1.5", "anchor_rank_rule: fraction must be in [0, 1], got 1.5 in 'energy:1.5'"),
    ]
    for rule, message in cases:
        with pytest.raises(UsageError) as info:
            plan.parse_rank_rule(rule)
        assert str(info.value) == message
    with pytest.raises(UsageError, match=r"^rank: fraction must be in"):
        plan.parse_rank_rule("energy:-1", "rank")


@pytest.mark.parametrize(
    "value, expected",
    [(3, 3), (0, 0), (" 7 ", 7), ("energy:0.5", RankRule("energy", 0.5)), ("fisher:0", RankRule("fisher", 0.0))],
)
def test_map_values(value, expected):
    assert plan.parse_anchor_map({"q_proj": value}) == [MapEntry("q_proj", expected, None)]


@pytest.mark.parametrize(
    "value, message",
    [
        (True, "anchor_map['q']: rank must be an integer >= 0 or 'energy:F' / 'fisher:F', got True"),
        (1.5, "anchor_map['q']: rank must be an integer >= 0 or 'energy:F' / 'fisher:F', got 1.5"),
        (-1, "anchor_map['q']: rank must be >= 0, got -1"),
        ("energy:x", "anchor_map['q']: fraction must be a number in [0, 1], got 'x' in 'energy:x'"),
        ({"rank": "rows"}, "anchor_map['q']: expected 'energy:F' or 'fisher:F' (F in [0, 1]), got 'rows'"),
        ({"lambda": -1}, "anchor_map['q']: lambda must be a number >= 0, got -1"),
        ({"lambda": True}, "anchor_map['q']: lambda must be a number >= 0, got True"),
        ({"lambda": "1"}, "anchor_map['q']: lambda must be a number >= 0, got '1'"),
        ({"rank": 1, "lamda": 1, "x": 0}, "anchor_map['q']: unknown key(s) ['lamda', 'x']; use 'rank' and 'lambda'"),
    ],
)
def test_map_value_messages(value, message):
    with pytest.raises(UsageError) as info:
        plan.parse_anchor_map({"q": value})
    assert str(info.value) == message


def test_map_forms_give_the_same_entries(tmp_path):
    want = [
        MapEntry("q_proj", 2, None),
        MapEntry(r"layers\.1\.", None, 3.0),
        MapEntry("v_proj", RankRule("energy", 0.5), 0.0),
        MapEntry("o_proj", 0, 2.0),
    ]
    as_dict = {"q_proj": 2, r"layers\.1\.": {"lambda": 3}, "v_proj": {"rank": "energy:0.5", "lambda": 0}}
    as_dict["o_proj"] = {"rank": 0, "lambda": 2.0}
    text = json.dumps(as_dict)
    path = tmp_path / "map.yaml"
    path.write_text(
        "q_proj: 2\n'layers\\.1\\.': {lambda: 3}\nv_proj: {rank: 'energy:0.5', lambda: 0}\n"
        "o_proj: {rank: 0, lambda: 2.0}\n"
    )
    for spec in (as_dict, list(as_dict.items()), text, str(path), path):
        got = plan.parse_anchor_map(spec)
        assert got == want
        assert [type(e.lam) for e in got] == [type(None), float, float, float]
    for empty in (None, "", {}):
        assert plan.parse_anchor_map(empty) == []


@pytest.mark.parametrize(
    "spec, message",
    [
        ("[1, 2", "anchor_map: not YAML / JSON: "),
        ("7", "anchor_map: expected a mapping of name regex -> rank / {rank, lambda}, got 7"),
        ({"(": 2}, "anchor_map['(']: invalid regular expression: missing ), unterminated subpattern at position 0"),
    ],
)
def test_map_syntax_messages(spec, message):
    with pytest.raises(UsageError) as info:
        plan.parse_anchor_map(spec)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# ---------------------------------------------------------------- the numbers an anchor stores
def test_min_block_bytes_is_the_cheapest_rank_one_block():
    shapes = [(8, 4), (16, 16)]
    # rank 1 stores U_1 (m), V_1 (n) and S_ref (1): 13 numbers for 8 x 4; with the remainder, W_0 too (32 more)
    assert plan.min_block_bytes(shapes, 4) == 13 * 4
    assert plan.min_block_bytes(shapes, 2, rest=True) == (13 + 32) * 2
    assert plan.min_block_bytes([(1, 5), (16, 16)], 4) == 5 * 4  # k = 1 = min(m, n): the matrix itself


# ---------------------------------------------------------------- the upper hull, against its definition
def _hull_by_definition(costs, gains):
    pts = list(range(len(costs)))
    # Pareto: no other point with at most the cost and at least the gain (of equal points, the first)
    front = [
        k
        for k in pts
        if not any(
            (costs[j], -gains[j], j) < (costs[k], -gains[k], k) and costs[j] <= costs[k] and gains[j] >= gains[k]
            for j in pts
            if j != k
        )
    ]

    def under(a, k, b):  # k on or below the chord a -> b
        return (gains[k] - gains[a]) * (costs[b] - costs[a]) <= (gains[b] - gains[a]) * (costs[k] - costs[a])

    hull = [
        k for k in front if not any(costs[a] < costs[k] < costs[b] and under(a, k, b) for a in front for b in front)
    ]
    return sorted(hull, key=lambda k: costs[k])


def test_hull_points_match_the_definition():
    rng = np.random.default_rng(3)
    for _ in range(400):
        n = int(rng.integers(1, 9))
        costs = [0] + rng.integers(0, 8, size=n).tolist()
        gains = [0] + rng.integers(0, 6, size=n).tolist()
        order = rng.permutation(len(costs)).tolist()  # points in any order, not sorted by cost
        costs, gains = [costs[i] for i in order], [gains[i] for i in order]
        assert plan.hull_points(costs, gains) == _hull_by_definition(costs, gains), (costs, gains)
    # collinear points: the middle one is not a vertex
    assert plan.hull_points([0, 1, 2], [0, 1, 2]) == [0, 2]
    assert plan.hull_points([0, 1, 2], [0, 2, 3]) == [0, 1, 2]


# ---------------------------------------------------------------- the Fisher rank, against a loop
def _fisher_rank_loop(cum, total, fraction, k_max):
    if fraction == 0.0 or total <= 0.0:
        return 0
    for k, c in enumerate(cum, start=1):
        if c >= fraction * total:
            return k
    return k_max


def test_fisher_rank_is_the_first_block_holding_the_fraction():
    cum = [1.0, 3.0, 6.0, 10.0]
    for total in (10.0, 20.0, 0.0, -1.0, 0.5):
        for fraction in (0.0, 0.05, 0.1, 0.3, 0.45, 0.5, 0.6, 0.99, 1.0):
            scaled = [c * total / 10.0 for c in cum] if 0 < total < 1 else cum  # a product smaller than 1
            got = plan._fisher_rank(torch.tensor(scaled), total, fraction, 6)
            want = 6 if fraction == 1.0 and total > 0 else _fisher_rank_loop(scaled, total, fraction, 6)
            assert got == want, (total, fraction)
    assert plan._fisher_rank(torch.tensor(cum), 10.0, 0.3, 6) == 2  # 3 >= 0.3 x 10: equality counts


# ---------------------------------------------------------------- what users read
def test_describe_prints_one_line_per_matrix():
    ranks = {"model.layers.0.mlp.up_proj.weight": 0, "q.weight": 2, "k.weight": 4, "lm_head.weight": 9}
    shapes = {"model.layers.0.mlp.up_proj.weight": (4, 8), "q.weight": (4, 8), "k.weight": (4, 8)}
    shapes["lm_head.weight"] = (16, 8)
    want = [
        "  model.layers.0.mlp.up_proj.weight" + " " * 15 + " 4x8        -",
        "  q.weight" + " " * 40 + " 4x8        2",
        "  k.weight" + " " * 40 + " 4x8        full (L2)",
        "  lm_head.weight" + " " * 34 + " 16x8        full (L2)",
    ]
    assert plan.describe(ranks, shapes) == "\n".join(want)
    assert plan.describe({"a": 1}, {"a": (4, 8)}).endswith(" 1")


def test_map_json_keeps_each_rank_and_lambda():
    entries = [MapEntry("q", 2, None), MapEntry("v", RankRule("energy", 0.5), 3.0), MapEntry("o", None, 1.0)]
    assert json.loads(plan.to_json(entries)) == {
        "q": {"rank": "2", "lambda": None},
        "v": {"rank": "energy:0.5", "lambda": 3.0},
        "o": {"rank": None, "lambda": 1.0},
    }
    assert plan.to_json([]) == "{}"


# ---------------------------------------------------------------- options from a config
def _opts(**kw):
    base = dict(
        anchor_rank=768,
        anchor_rank_rule=None,
        anchor_targets="all-linear",
        anchor_include_embeddings=True,
        anchor_map=None,
        anchor_layers=None,
        anchor_memory=None,
        anchor_lambda_rest=0.0,
        anchor_kind="block",
    )
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(anchor_rank_rule="energy:2"), "anchor_rank_rule: fraction must be in [0, 1], got 2 in 'energy:2'"),
        (dict(anchor_map="{q: -1}"), "anchor_map['q']: rank must be >= 0, got -1"),
        (dict(anchor_kind="rows"), "anchor_kind must be 'block' or 'subspace', got 'rows'"),
        (dict(anchor_lambda_rest=-1.0), "anchor_lambda_rest must be a number >= 0, got -1.0"),
        (dict(anchor_lambda_rest=True), "anchor_lambda_rest must be a number >= 0, got True"),
        (dict(anchor_lambda_rest="0.1"), "anchor_lambda_rest must be a number >= 0, got '0.1'"),
        (dict(anchor_lambda_rest=float("nan")), "anchor_lambda_rest must be a number >= 0, got nan"),
        (dict(anchor_memory=0), "anchor_memory must be a number of bytes >= 1, got 0"),
        (dict(anchor_memory=True), "anchor_memory must be a number of bytes >= 1, got True"),
        (dict(anchor_memory=1.5), "anchor_memory must be a number of bytes >= 1, got 1.5"),
    ],
)
def test_option_messages(kw, message):
    with pytest.raises(UsageError) as info:
        plan.validate_options(_opts(**kw))
    assert str(info.value) == message


def test_option_layers_and_defaults():
    with pytest.raises(UsageError) as info:
        plan.validate_options(_opts(anchor_layers="(x"))
    assert str(info.value).startswith("anchor_layers: invalid regular expression '(x': missing )")
    for ok in ("0-1,3", " 2 ", r"layers\.[01]\.", "", None):
        plan.validate_options(_opts(anchor_layers=ok))
    plan.validate_options(_opts(anchor_rank_rule="", anchor_memory=1, anchor_lambda_rest=0, anchor_kind="subspace"))
    plan.validate_options(SimpleNamespace())  # no anchor_* attribute: every default is valid


def test_anchor_kwargs_from_the_options():
    o = _opts(
        anchor_rank=16,
        anchor_targets=["q_proj"],
        anchor_include_embeddings=False,
        anchor_map="{q_proj: 2}",
        anchor_layers="0-1",
        anchor_memory=4096,
        anchor_lambda_rest=0.5,
        anchor_kind="subspace",
    )
    assert plan.build_kwargs(o, 2) == dict(
        rank=16,
        targets=["q_proj"],
        include_embeddings=False,
        rank_map="{q_proj: 2}",
        layers="0-1",
        memory=4096,
        lambda_rest=0.5,
        kind="subspace",
        base_lambda=2.0,
    )
    assert type(plan.build_kwargs(o, 2)["base_lambda"]) is float
    assert plan.build_kwargs(_opts(anchor_rank_rule="energy:0.9"), 1.0)["rank"] == "energy:0.9"
    # the l2 method: every matrix at full rank; rules, map, budget, remainder and kind off; layers and targets kept
    assert plan.build_kwargs(o, 0.5, full_rank=True) == dict(
        rank=2**62,
        targets=["q_proj"],
        include_embeddings=False,
        rank_map=None,
        layers="0-1",
        memory=None,
        lambda_rest=0.0,
        kind="block",
        base_lambda=0.5,
    )
    bare = SimpleNamespace(anchor_rank=8, anchor_targets="all-linear", anchor_include_embeddings=True)
    assert plan.build_kwargs(bare, 1) == dict(
        rank=8,
        targets="all-linear",
        include_embeddings=True,
        rank_map=None,
        layers=None,
        memory=None,
        lambda_rest=0.0,
        kind="block",
        base_lambda=1.0,
    )
    assert plan.build_kwargs(_opts(anchor_layers="", anchor_lambda_rest=None), 1)["layers"] is None
    assert type(plan.build_kwargs(_opts(anchor_lambda_rest=1), 1)["lambda_rest"]) is float


def test_every_message_is_one_line():
    for bad in ("energy:", "fisher:2", ":", ""):
        with pytest.raises(UsageError) as info:
            plan.parse_rank_rule(bad)
        assert "\n" not in str(info.value) and re.match(r"^anchor_rank_rule: ", str(info.value))


# ---------------------------------------------------------------- the plan on a tiny model, against numpy
@pytest.fixture
def model(rp):
    return rp.tiny_model("llama", 64)


def _weights(model):
    return {n: p.detach().double().numpy() for n, p in model.named_parameters()}


def _energy_rank(w, fraction):  # a loop over numpy's singular values
    s = np.linalg.svd(w, compute_uv=False)
    if fraction == 1.0:
        return len(s)
    share = np.cumsum(s**2) / np.sum(s**2)
    return next(k for k, e in enumerate(share, start=1) if e >= fraction)


def _block_energies(w, f):  # [||U_k^T F V_k||^2 for k = 1..r], one block at a time
    u, _, vh = np.linalg.svd(w, full_matrices=False)
    return [float(np.sum((u[:, :k].T @ f @ vh[:k].T) ** 2)) for k in range(1, min(w.shape) + 1)]


def _costs(m, n, bpn, rest=False):  # numbers stored at each rank k = 0..min(m, n), in bytes
    r = min(m, n)
    return [0] + [((m + n) * k + k * k + (m * n if rest else 0)) * bpn for k in range(1, r)] + [m * n * bpn]


def test_plan_defaults_are_the_anchors_and_the_options():
    import inspect

    from anchorft.rpsft.anchor import SubspaceAnchor
    from anchorft.rpsft.anchor_options import AnchorOptions

    planned = inspect.signature(plan.plan_anchor).parameters
    built = inspect.signature(SubspaceAnchor.from_model).parameters
    shared = [n for n in planned if n not in ("model", "fisher")]
    assert [(n, planned[n].default) for n in shared] == [(n, built[n].default) for n in shared]
    opts = AnchorOptions()
    assert planned["rank"].default == opts.anchor_rank == 768  # the paper's k
    assert planned["targets"].default == opts.anchor_targets
    assert planned["include_embeddings"].default is opts.anchor_include_embeddings is True
    assert planned["lambda_rest"].default == opts.anchor_lambda_rest == 0.0
    assert planned["kind"].default == opts.anchor_kind == "block"
    assert planned["base_lambda"].default == 1.0


def test_plan_rank_forms_and_messages(model):
    as_text = plan.plan_anchor(model, "4")
    assert as_text.rule == 4 and type(as_text.rule) is int
    assert as_text.ranks == plan.plan_anchor(model, 4).ranks
    cases = [
        (dict(rank=0), "anchor rank must be an integer >= 1 or 'energy:F' / 'fisher:F', got 0"),
        (dict(rank=1.5), "anchor rank must be an integer >= 1 or 'energy:F' / 'fisher:F', got 1.5"),
        (dict(rank=True), "anchor rank must be an integer >= 1 or 'energy:F' / 'fisher:F', got True"),
        (dict(rank="energy:2"), "anchor rank: fraction must be in [0, 1], got 2 in 'energy:2'"),
        (dict(rank=4, svd="lanczos"), "anchor svd must be 'exact' or 'randomized', got 'lanczos'"),
        (dict(rank=4, kind="rows"), "anchor kind must be 'block' or 'subspace', got 'rows'"),
        (dict(rank=4, lambda_rest=-1), "anchor lambda_rest must be >= 0, got -1"),
        (dict(rank=4, memory=0), "anchor memory must be a number of bytes >= 1, got 0"),
        (dict(rank=4, memory=1.5), "anchor memory must be a number of bytes >= 1, got 1.5"),
        (dict(rank=4, memory=True), "anchor memory must be a number of bytes >= 1, got True"),
        (
            dict(rank=4, lambda_rest=0.5, base_lambda=0.0),
            "anchor: a map lambda or lambda_rest needs a global anchor lambda > 0",
        ),
        (
            dict(rank=4, rank_map={"q_proj": {"lambda": 1}}, base_lambda=0.0),
            "anchor: a map lambda or lambda_rest needs a global anchor lambda > 0",
        ),
    ]
    for kw, message in cases:
        with pytest.raises(UsageError) as info:
            plan.plan_anchor(model, **kw)
        assert str(info.value) == message, kw
    with pytest.raises(UsageError, match=r"^anchor memory 1 bytes is below the cheapest rank-1 block \(49 bytes"):
        plan.plan_anchor(model, 4, memory=1, dtype=torch.int8)  # 1 byte a number: k_proj (16 x 32) at rank 1 is 49
    # a global lambda of 0 is fine when nothing is weighted against it
    plan.plan_anchor(model, 4, rank_map={"q_proj": 2}, base_lambda=0.0)


def test_plan_leaves_embeddings_out_when_told(model):
    from anchorft.rpsft.anchor import select_parameters

    names = set(plan.plan_anchor(model, 4, include_embeddings=False).ranks)
    assert names == {n for n, _ in select_parameters(model, include_embeddings=False)}
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert "lm_head.weight" in plan.plan_anchor(model, 4).ranks


def test_plan_with_integer_ranks_computes_no_spectrum(model, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an SVD ran for an integer rank")

    for name in ("svd", "svdvals"):
        monkeypatch.setattr(torch.linalg, name, boom)
    p = plan.plan_anchor(model, 4, rank_map={"q_proj": 2, "down_proj": {"lambda": 2.0}})
    assert {n: k for n, k in p.ranks.items() if "q_proj" in n} == {
        f"model.layers.{i}.self_attn.q_proj.weight": 2 for i in (0, 1)
    }


def test_plan_mixed_rules_against_numpy(model):
    g = torch.Generator().manual_seed(5)
    params = dict(model.named_parameters())
    fisher = {n: torch.randn(params[n].shape, generator=g) for n in params}
    p = plan.plan_anchor(
        model, "energy:0.6", rank_map={"q_proj": "fisher:0.5", "down_proj": 3}, fisher=fisher, dtype=torch.float64
    )
    w = _weights(model)
    for n, k in p.ranks.items():
        if "q_proj" in n:
            e = _block_energies(w[n], fisher[n].double().numpy())
            total = float(np.sum(fisher[n].double().numpy() ** 2))
            assert k == next(i for i, x in enumerate(e, start=1) if x >= 0.5 * total), n
        elif "down_proj" in n:
            assert k == 3
        else:
            assert k == _energy_rank(w[n], 0.6), n
    assert p.rule == RankRule("energy", 0.6)
    assert [e.pattern for e in p.map_entries] == ["q_proj", "down_proj"]
    with pytest.raises(UsageError) as info:
        plan.plan_anchor(model, "fisher:0.5", fisher={})
    names = list(p.ranks)
    assert str(info.value).endswith(f"missing for {names[:4]}")


def test_plan_asks_f_ood_g_only_of_the_matrices_a_fisher_rule_ranks(model):
    g = torch.Generator().manual_seed(6)
    params = dict(model.named_parameters())
    q = [n for n in params if "q_proj" in n]
    only_q = {n: torch.randn(params[n].shape, generator=g) for n in q}
    p = plan.plan_anchor(model, "energy:0.6", rank_map={"q_proj": "fisher:0.5"}, fisher=only_q)
    w = _weights(model)
    assert all(p.ranks[n] == _energy_rank(w[n], 0.6) for n in p.ranks if n not in q)
    with pytest.raises(UsageError) as info:  # a q_proj matrix left out
        plan.plan_anchor(model, "energy:0.6", rank_map={"q_proj": "fisher:0.5"}, fisher=dict(list(only_q.items())[1:]))
    assert str(info.value).endswith(f"missing for {q[:1]}")
    # a Fisher budget whose map fixes every matrix ranks none by its objective
    p = plan.plan_anchor(model, "fisher:0.5", rank_map={".": 2}, memory=10**9)
    assert set(p.ranks.values()) == {2}


def test_plan_of_a_bfloat16_model_computes_in_float32(model):
    model = model.to(torch.bfloat16)
    p = plan.plan_anchor(model, "energy:0.9")
    w = {n: t.detach().float().double().numpy() for n, t in model.named_parameters()}
    assert p.ranks == {n: _energy_rank(w[n], 0.9) for n in p.ranks}


def _budget_expected(model, names, fixed, memory, bpn, gains_of, rest=False):
    shapes = {n: tuple(t.shape) for n, t in model.named_parameters()}
    used = sum(_costs(*shapes[n], bpn, rest)[min(k, min(shapes[n]))] for n, k in fixed.items())
    free = [n for n in names if n not in fixed]
    gains = gains_of(free)
    info: dict = {}
    ranks = plan.allocate_ranks([_costs(*shapes[n], bpn, rest) for n in free], gains, memory - used, info)
    return dict(zip(free, ranks)), {"gap_bound": info["gap_bound"], "cost": info["cost"] + used}


def test_budget_energy_against_numpy(model):
    w = _weights(model)

    def gains_of(free):
        out = []
        for n in free:
            s = np.linalg.svd(w[n], compute_uv=False)
            out.append([0.0] + (np.cumsum(s**2) / np.sum(s**2)).tolist())
        return out

    names = list(plan.plan_anchor(model, 4).ranks)
    full = sum(_costs(*w[n].shape, 8)[-1] for n in names)
    for share, fixed in [(0.3, {}), (0.15, {r"q_proj": 2, r"k_proj": 0})]:
        memory = int(share * full)
        p = plan.plan_anchor(model, 4, rank_map=fixed, memory=memory, dtype=torch.float64)
        fixed_names = {n: k for pat, k in fixed.items() for n in names if re.search(pat, n)}
        ranks, budget = _budget_expected(model, names, fixed_names, memory, 8, gains_of)
        assert {n: p.ranks[n] for n in ranks} == ranks
        assert all(p.ranks[n] == k for n, k in fixed_names.items())
        assert p.budget["cost"] == budget["cost"] <= memory
        assert p.budget["gap_bound"] == pytest.approx(budget["gap_bound"], rel=1e-9)
        assert len(set(ranks.values())) > 2  # a real allocation, not one rank everywhere
    # an ample budget anchors every matrix in full (the L2 fallback)
    p = plan.plan_anchor(model, 4, memory=full, dtype=torch.float64)
    assert p.ranks == {n: min(w[n].shape) for n in names} and p.budget["cost"] == full


def test_budget_fisher_against_numpy(model):
    w = _weights(model)
    g = torch.Generator().manual_seed(11)
    fisher = {n: torch.randn(t.shape, generator=g, dtype=torch.float64) for n, t in model.named_parameters()}
    f = {n: t.numpy() for n, t in fisher.items()}
    names = list(plan.plan_anchor(model, 4).ranks)

    def gains_of(free):
        norm = sum(float(np.sum(f[n] ** 2)) for n in free)
        out = []
        for n in free:
            e = _block_energies(w[n], f[n])
            e[-1] = float(np.sum(f[n] ** 2))  # at full rank the L2 fallback holds all of it
            out.append([0.0] + [x / norm for x in e])
        return out

    full = sum(_costs(*w[n].shape, 8)[-1] for n in names)
    memory = int(0.25 * full)
    p = plan.plan_anchor(
        model, "fisher:0.5", rank_map={"o_proj": 1}, memory=memory, fisher=fisher, dtype=torch.float64
    )
    fixed = {n: 1 for n in names if "o_proj" in n}
    ranks, budget = _budget_expected(model, names, fixed, memory, 8, gains_of)
    assert {n: p.ranks[n] for n in ranks} == ranks
    assert p.budget["cost"] == budget["cost"] <= memory
    assert p.budget["gap_bound"] == pytest.approx(budget["gap_bound"], rel=1e-9)
    energy = plan.plan_anchor(model, 4, rank_map={"o_proj": 1}, memory=memory, dtype=torch.float64)
    assert energy.ranks != p.ranks  # the Fisher objective decides, not the spectrum


def test_budget_limits_and_the_free_matrices(model):
    # k_proj and v_proj (16 x 32) are the cheapest; fixed at rank 0 by the map, the cheapest free block is
    # q_proj / o_proj at rank 1: 32 + 32 + 1 = 65 numbers, 520 bytes in float64 (k_proj: 49 numbers, 392 bytes)
    fixed = {"k_proj": 0, "v_proj": 0}
    with pytest.raises(UsageError, match=r"^anchor memory 450 bytes is below the cheapest rank-1 block \(520 bytes"):
        plan.plan_anchor(model, 4, rank_map=fixed, memory=450, dtype=torch.float64)
    p = plan.plan_anchor(model, 4, rank_map=fixed, memory=520, dtype=torch.float64)  # exactly one block fits
    assert sorted(p.ranks.values()).count(1) == 1 and p.budget["cost"] == 520
    # with the remainder penalty, rank 1 also stores W_0: 65 + 1024 numbers
    with pytest.raises(UsageError, match=r"below the cheapest rank-1 block \(8,712 bytes at 8 bytes/number\)"):
        plan.plan_anchor(model, 4, rank_map=fixed, memory=8000, lambda_rest=0.5, dtype=torch.float64)
    # every matrix fixed by the map: the fixed ranks may fill the budget exactly, not more
    names = list(plan.plan_anchor(model, 4).ranks)
    shapes = {n: tuple(t.shape) for n, t in model.named_parameters()}
    used = sum(_costs(*shapes[n], 8)[2] for n in names)
    p = plan.plan_anchor(model, 4, rank_map={".": 2}, memory=used, dtype=torch.float64)
    assert set(p.ranks.values()) == {2} and p.budget["cost"] == used
    with pytest.raises(ValueError) as info:
        plan.plan_anchor(model, 4, rank_map={".": 2}, memory=used - 1, dtype=torch.float64)
    assert str(info.value) == f"anchor memory {used - 1:,} bytes: the map's fixed ranks alone take {used:,} bytes"


def test_the_anchor_records_the_map(model):
    from anchorft.rpsft.anchor import SubspaceAnchor

    anchor = SubspaceAnchor.from_model(model, rank=4, rank_map={"q_proj": 2, "v_proj": {"lambda": 0.5}})
    assert json.loads(anchor.meta["rank_map"]) == {
        "q_proj": {"rank": "2", "lambda": None},
        "v_proj": {"rank": None, "lambda": 0.5},
    }
    assert SubspaceAnchor.from_model(model, rank=4).meta["rank_map"] is None


# ---------------------------------------------------------------- the budget's greedy, worked by hand
# A: costs [0, 10, 20], gains [0, 10, 12] (segments of gain per byte 1.0 then 0.2); B: [0, 10, 20], [0, 5, 10]
# (its rank 1 lies on the chord 0 -> 2, so B's hull is one segment of 0.5 per byte)
_A, _B = ([0, 10, 20], [0, 10, 12]), ([0, 10, 20], [0, 5, 10])


@pytest.mark.parametrize(
    "matrices, budget, ranks, gap_bound, cost",
    [
        # A's first segment (10), B's segment (20); A's second (gain 2) no longer fits: the bound
        ((_A, _B), 30, [1, 2], 2.0, 30.0),
        # A's first (10); B's segment (20) does not fit (bound 10) and ends B, A's second still fits
        ((_A, _B), 25, [2, 0], 10.0, 20.0),
        # every segment fits: no bound
        ((_A, _B), 100, [2, 2], 0.0, 40.0),
        # the guard: the small item (gain 2 for 1) leaves no room for the large one (gain 10 for 10); alone, the
        # large one is worth more, and it costs exactly the budget
        ((([0, 1], [0, 2]), ([0, 10], [0, 10])), 10, [0, 1], 10.0, 10.0),
        # the guard on a tie (2 = 2) keeps the greedy's choice
        ((([0, 1], [0, 2]), ([0, 10], [0, 2])), 10, [1, 0], 2.0, 1.0),
        # the fill: 6 left after A's first segment buys B's rank 1 (gain 1 for 5), off B's hull
        ((_A, ([0, 5, 20], [0, 1, 10])), 16, [1, 1], 10.0, 15.0),
        # the fill upgrades from a rank already held: A 1 -> 2 for 10 more, exactly what is left (gain 1)
        ((([0, 10, 20, 30], [0, 10, 11, 20]), ([0, 5], [0, 6])), 25, [2, 1], 10.0, 25.0),
        # the fill takes the larger gain, the first on a tie
        ((([0, 10, 30], [0, 1, 30]), ([0, 10, 30], [0, 0.5, 30]), ([0, 1], [0, 5])), 16, [1, 0, 1], 30.0, 11.0),
        ((([0, 10, 30], [0, 1, 30]), ([0, 10, 30], [0, 1, 30]), ([0, 1], [0, 5])), 16, [1, 0, 1], 30.0, 11.0),
        # a segment that does not fit ends only its own matrix: C's (gain 0.9 for 2, after B's) still goes in,
        # although the fill alone would have bought D (2.4 for 6)
        ((_A, _B, ([0, 2], [0, 0.9]), ([0, 6], [0, 2.4])), 16, [1, 0, 1, 0], 10.0, 12.0),
        # a matrix that gains nothing has a one-point hull
        ((([0, 1, 2], [0, 0, 0]), ([0, 1], [0, 1])), 5, [0, 1], 0.0, 1.0),
        # no matrix, or no budget
        ((), 5, [], 0.0, 0.0),
        ((_A, _B), 0, [0, 0], 10.0, 0.0),
    ],
)
def test_budget_greedy_worked_cases(matrices, budget, ranks, gap_bound, cost):
    info: dict = {}
    got = plan.allocate_ranks([c for c, _ in matrices], [g for _, g in matrices], budget, info)
    assert (got, info) == (ranks, {"gap_bound": gap_bound, "cost": cost})


def test_budget_greedy_does_not_depend_on_the_unit():
    rng = np.random.default_rng(7)
    for _ in range(40):
        costs, gains = [], []
        for _ in range(3):
            m, n = (int(x) for x in rng.integers(2, 9, size=2))
            s = np.sort(rng.gamma(0.7, size=min(m, n)))[::-1]
            costs.append([plan.anchor_numbers(m, n, k) * 4 for k in range(min(m, n) + 1)])
            gains.append([0.0] + (np.cumsum(s**2) / np.sum(s**2)).tolist())
        budget = float(rng.uniform(0.05, 1.0) * sum(c[-1] for c in costs))
        in_bytes = plan.allocate_ranks(costs, gains, budget)
        in_gib = plan.allocate_ranks([[x / 2**30 for x in c] for c in costs], gains, budget / 2**30)
        assert in_gib == in_bytes


def test_budget_greedy_messages():
    with pytest.raises(ValueError) as info:
        plan.allocate_ranks([[0, 1]], [[0, 1]], -1)
    assert str(info.value) == "budget must be >= 0, got -1"
    for c, g in (([1, 2], [0, 1]), ([0, 2], [1, 2])):
        with pytest.raises(ValueError) as info:
            plan.allocate_ranks([c], [g], 5)
        assert str(info.value) == "allocate_ranks: rank 0 must cost 0 and gain 0"


# ---------------------------------------------------------------- which matrices
def test_selection_by_list_regex_and_embeddings(model):
    params = dict(model.named_parameters())
    chosen = plan.select_parameters(model, ["q_proj", "model.layers.1.mlp.down_proj", "lm_head.weight"])
    names = [n for n, _ in chosen]
    assert names == [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "lm_head.weight",
    ]
    assert all(p is params[n] for n, p in chosen)
    for targets in (["q_proj", "lm_head", "embed_tokens"], r"q_proj|lm_head|embed_tokens"):
        with_emb = [n for n, _ in plan.select_parameters(model, targets)]
        without = [n for n, _ in plan.select_parameters(model, targets, include_embeddings=False)]
        assert set(with_emb) - set(without) == {"lm_head.weight", "model.embed_tokens.weight"}
        assert all("q_proj" in n for n in without) and len(without) == 2
    cases = [
        ("(", "anchor_targets: invalid regular expression '(': missing ), unterminated subpattern at position 0"),
        (5, "anchor_targets must be 'all-linear', a regex or a list of names, got 5"),
    ]
    for targets, message in cases:
        with pytest.raises(ValueError) as info:
            plan.select_parameters(model, targets)
        assert str(info.value) == message


def test_selection_skips_frozen_and_tied_weights_and_reads_plain_modules(model):
    frozen = model.model.layers[0].self_attn.q_proj.weight
    frozen.requires_grad_(False)
    names = [n for n, _ in plan.select_parameters(model)]
    assert "model.layers.0.self_attn.q_proj.weight" not in names
    assert names[-1] == "lm_head.weight" and len(names) == 15  # 16 matrices, the frozen one skipped
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))  # no HF methods
    assert [n for n, _ in plan.select_parameters(net)] == ["0.weight", "2.weight"]
    lin = torch.nn.Linear(4, 3)
    assert [(n, p is lin.weight) for n, p in plan.select_parameters(lin)] == [("weight", True)]
    emb = torch.nn.Embedding(5, 4)
    assert [(n, p is emb.weight) for n, p in plan.select_parameters(emb)] == [("weight", True)]  # an embedding counts
    with pytest.raises(ValueError, match="matches no trainable 2-D weight of Embedding"):
        plan.select_parameters(emb, "weight", include_embeddings=False)


def test_layer_selection(model):
    names = [n for n, _ in plan.select_parameters(model)]
    in_layer = {i: [n for n in names if f"layers.{i}." in n] for i in (0, 1)}
    assert plan.select_layers(names, "0-0") == in_layer[0]
    assert plan.select_layers(names, "1") == in_layer[1]
    assert plan.select_layers(names, " 1 , 0 ") == plan.select_layers(names, "0-1") == in_layer[0] + in_layer[1]
    for nothing in (None, "", "   "):
        assert plan.select_layers(names, nothing) == names
    assert plan.select_layers(names, r"mlp\.up") == [n for n in names if "mlp.up" in n]
    cases = [
        ("3-1", "anchor_layers: empty range '3-1' in '3-1'"),
        ("0, 3-1", "anchor_layers: empty range '3-1' in '0, 3-1'"),
        ("(x", "anchor_layers: invalid regular expression '(x': missing ), unterminated subpattern at position 0"),
    ]
    for spec, message in cases:
        with pytest.raises(UsageError) as info:
            plan.select_layers(names, spec)
        assert str(info.value) == message


def test_map_yaml_error_is_the_parsers_first_line():
    import yaml

    text = "{q_proj: 2,\n  v_proj: [1"
    with pytest.raises(yaml.YAMLError) as parser:
        yaml.safe_load(text)
    first = str(parser.value).splitlines()[0]
    with pytest.raises(UsageError) as info:
        plan.parse_anchor_map(text)
    assert str(info.value) == f"anchor_map: not YAML / JSON: {first}" and first != "None"


def test_vision_and_cross_attention_modules_are_never_anchored():
    lin = torch.nn.Linear
    tower = torch.nn.ModuleDict({"fc": lin(4, 4)})
    layer = torch.nn.ModuleDict({"q_proj": lin(4, 4), "cross_attn": torch.nn.ModuleDict({"q_proj": lin(4, 4)})})
    net = torch.nn.ModuleDict(
        {
            "vision_model": tower,
            "vision_encoder": torch.nn.ModuleDict({"fc": lin(4, 4)}),
            "visual": torch.nn.ModuleDict({"proj": lin(4, 4)}),
            "image_encoder": torch.nn.ModuleDict({"fc": lin(4, 4)}),
            "multi_modal_projector": lin(4, 4),
            "cross_attention": torch.nn.ModuleDict({"o_proj": lin(4, 4)}),
            "layers": torch.nn.ModuleList([layer]),
            "revision": lin(4, 4),  # names that only contain one of the words: kept
            "crossing": lin(4, 4),
        }
    )
    assert [n for n, _ in plan.select_parameters(net)] == [
        "layers.0.q_proj.weight",
        "revision.weight",
        "crossing.weight",
    ]


def test_selection_skips_a_module_without_weight_and_names_what_there_is(model):
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    net[0].register_parameter("weight", None)  # e.g. a module whose weight was removed
    assert [n for n, _ in plan.select_parameters(net)] == ["1.weight"]
    with pytest.raises(ValueError) as info:
        plan.select_parameters(net, "nothing")
    assert str(info.value) == (
        "anchor_targets='nothing' matches no trainable 2-D weight of Sequential. "
        "Module names available: ['1']; e.g. parameters ['1.weight']"
    )
    with pytest.raises(ValueError) as info:
        plan.select_parameters(model, ["nothing"])
    assert str(info.value) == (
        "anchor_targets=['nothing'] matches no trainable 2-D weight of LlamaForCausalLM. Module names available: "
        "['down_proj', 'embed_tokens', 'gate_proj', 'k_proj', 'lm_head', 'o_proj', 'q_proj', 'up_proj', 'v_proj']; "
        "e.g. parameters ['model.embed_tokens.weight', 'model.layers.0.self_attn.q_proj.weight', "
        "'model.layers.0.self_attn.k_proj.weight', 'model.layers.0.self_attn.v_proj.weight', "
        "'model.layers.0.self_attn.o_proj.weight', 'model.layers.0.mlp.gate_proj.weight'] ..."
    )
    six = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(6)])
    with pytest.raises(ValueError) as info:
        plan.select_parameters(six, "nothing")
    assert str(info.value).endswith("'5.weight']")  # six names: all shown, no ellipsis
    seven = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(7)])
    with pytest.raises(ValueError) as info:
        plan.select_parameters(seven, "nothing")
    assert str(info.value).endswith("'5.weight'] ...")  # seven: the first six and an ellipsis
