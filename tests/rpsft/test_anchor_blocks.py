"""The anchor's per-matrix residuals (`SubspaceAnchor._blocks`, through `penalty`) where the stored bases are not the
model's dtype or not an exact SVD, on a one-matrix anchor, and the refusal of sharded (DTensor) parameters; each
penalty against an explicit float64 computation from the bases the anchor stored."""

from __future__ import annotations

import pytest
import torch

from anchorft.rpsft.anchor import SubspaceAnchor


@pytest.fixture
def model(rp):
    return rp.tiny_model("llama", 64)


def _explicit(anchor, model, kind, rest):
    """sum_l of the paper's term from the anchor's own stored U, V, S_ref (and W_0), in float64."""
    params = dict(model.named_parameters())
    total = 0.0
    for e in anchor.entries:
        w = params[e.name].detach().double()
        if e.fallback:
            total += float((w - e.w0.double()).pow(2).sum())
            continue
        u, v, s_ref = e.u.double(), e.v.double(), e.s_ref.double()
        if rest > 0:  # with W_0 stored every residual is D's own: D = W - W_0
            d = w - e.w0.double()
            a, b, c = u.T @ d, d @ v, u.T @ d @ v
        else:  # without it: U^T W_0 = S_ref V^T and W_0 V = U S_ref (exact for an exact SVD)
            a, b, c = u.T @ w - s_ref @ v.T, w @ v - u @ s_ref, u.T @ w @ v - s_ref
        r = float(c.pow(2).sum()) if kind == "block" else float(a.pow(2).sum() + b.pow(2).sum() - c.pow(2).sum())
        if rest > 0:
            r += rest * (float(d.pow(2).sum()) - r)
        total += r
    return total


@pytest.mark.parametrize("kind, rest", [("block", 0.0), ("subspace", 0.0), ("block", 0.3), ("subspace", 0.3)])
def test_bases_stored_in_bfloat16_are_computed_in_float32(rp, model, kind, rest):
    anchor = SubspaceAnchor.from_model(model, rank=3, dtype=torch.bfloat16, kind=kind, lambda_rest=rest)
    assert {e.u.dtype for e in anchor.entries if not e.fallback} == {torch.bfloat16}
    rp.perturb(model)
    want = _explicit(anchor, model, kind, rest)
    # float32 arithmetic: U^T W - S_ref V^T cancels most of U^T W
    assert float(anchor.penalty(model)) == pytest.approx(want, rel=1e-4)
    assert anchor.add_penalty_grad_(model, 1.0)["penalty"] == pytest.approx(want, rel=1e-4)


def test_a_bfloat16_model_against_float32_bases(rp, model):
    anchor = SubspaceAnchor.from_model(model, rank=3, kind="subspace")
    rp.perturb(model)
    model = model.to(torch.bfloat16)  # the weights a bf16 run trains; the anchor keeps its float32 bases
    want = _explicit(anchor, model, "subspace", 0.0)
    assert float(anchor.penalty(model)) == pytest.approx(want, rel=1e-4)  # float32 arithmetic on bf16 weights


@pytest.mark.parametrize("kind", ["block", "subspace"])
def test_a_stored_w0_makes_the_residuals_exact_for_an_inexact_svd(rp, model, kind):
    # a randomized SVD with no oversampling and no power iteration: U^T W_0 is not S_ref V^T, so only D = W - W_0
    # (what the remainder penalty stores W_0 for) gives the paper's U^T D and D V
    g = torch.Generator().manual_seed(0)
    anchor = SubspaceAnchor.from_model(
        model, rank=3, svd="randomized", oversample=0, n_iter=0, generator=g, kind=kind, lambda_rest=0.3
    )
    assert max(e.svd_residual for e in anchor.entries) > 0.05
    rp.perturb(model)
    want = _explicit(anchor, model, kind, 0.3)
    assert float(anchor.penalty(model)) == pytest.approx(want, rel=1e-5)


def test_one_matrix_anchor(rp, model):
    anchor = SubspaceAnchor.from_model(model, rank=3, targets=["model.layers.0.self_attn.q_proj"], lambda_rest=0.5)
    assert [e.name for e in anchor.entries] == ["model.layers.0.self_attn.q_proj.weight"]
    rp.perturb(model)
    assert float(anchor.penalty(model)) == pytest.approx(_explicit(anchor, model, "block", 0.5), rel=1e-5)


def test_the_differentiable_penalty_refuses_sharded_parameters(model):
    anchor = SubspaceAnchor.from_model(model, rank=3)
    model.model.layers[1].mlp.up_proj.weight.to_local = lambda: None  # what marks an FSDP2 DTensor shard
    with pytest.raises(ValueError) as info:
        anchor.penalty(model)
    assert str(info.value) == "anchor.penalty: use add_penalty_grad_ for sharded (DTensor) parameters"


def test_weights_fingerprint_is_stable_across_versions_and_dtypes():
    from anchorft.rpsft.anchor_store import weights_fingerprint

    # a saved anchor is checked against the model by this digest: it must not change between versions. Three
    # sizes: whole (12 values), strided by 3 (12,288 = 3 x 4,096), and the first 4,096 of 8,191 (stride 1)
    named = [  # values exact in float32 (integers over powers of two), so that no platform rounds them otherwise
        ("small", torch.arange(12.0).reshape(3, 4)),
        ("strided", (torch.arange(12288.0) - 6144).reshape(96, 128) / 4096),
        ("long", (torch.arange(8191.0) - 4095).reshape(1, 8191) / 1024),
    ]
    digests = [
        "c9263d042473d14d2f6bc981a62a7f8bbe1293f43003520727d14fb104902b48",
        "cfd232e4ad9d75d742dfaa8ac345d6d0a993a9febf2c256dd38d1145b9809adb",
        "f29bdf50473b66e7b149b366307dafa4fdcfb75094368c1e2121dfca35b44df5",
    ]
    for i, want in enumerate(digests, start=1):
        assert weights_fingerprint(named[:i]) == want
        assert weights_fingerprint([(n, t.to(torch.bfloat16)) for n, t in named[:i]]) == want  # fp32 or bf16
