"""Fisher share: closed-form cases, the projector identity, the random baseline, and a model check."""

from __future__ import annotations

import pytest
import torch

from anchorft.analysis.fisher import (
    expected_random_share,
    fisher_overlap,
    random_orthonormal,
)
from anchorft.subspace import cumulative_block_energy


def block_energy_share(g, u, v):
    """||U^T G V||_F^2 / ||G||_F^2: the largest nested block's energy (what the Fisher shares use) over G's."""
    return cumulative_block_energy(g, u, v)[-1] / g.pow(2).sum()


def _bases(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return u, v


def test_gradient_inside_block_has_share_one_and_outside_zero():
    m, n, k = 9, 7, 3
    u, v = _bases(m, n, k, 0)
    g_in = u[:, :k] @ torch.randn(k, k, dtype=torch.float64) @ v[:, :k].T
    assert block_energy_share(g_in, u[:, :k], v[:, :k]).item() == pytest.approx(1.0, abs=1e-12)
    g_out = u[:, k:] @ torch.randn(m - k, n, dtype=torch.float64)  # rows outside span(U)
    assert block_energy_share(g_out, u[:, :k], v[:, :k]).item() == pytest.approx(0.0, abs=1e-12)
    g_out_v = torch.randn(m, n - k, dtype=torch.float64) @ v[:, k:].T  # columns outside span(V)
    assert block_energy_share(g_out_v, u[:, :k], v[:, :k]).item() == pytest.approx(0.0, abs=1e-12)


def test_share_equals_projector_on_vec():
    """||U^T G V||^2 = vec(G)^T (V V^T kron U U^T) vec(G) (column-major vec)."""
    m, n, k = 6, 5, 2
    u, v = _bases(m, n, k, 1)
    u, v = u[:, :k], v[:, :k]
    g = torch.randn(m, n, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    p = torch.kron(v @ v.T, u @ u.T)
    vec = g.T.reshape(-1)
    ref = (vec @ p @ vec) / (vec @ vec)
    assert block_energy_share(g, u, v).item() == pytest.approx(ref.item(), rel=1e-12)


def test_random_block_share_matches_expectation():
    m, n, k = 20, 12, 4
    g = torch.randn(m, n, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(4)
    shares = [
        block_energy_share(g, random_orthonormal(m, k, gen), random_orthonormal(n, k, gen)).item() for _ in range(4000)
    ]
    mean = sum(shares) / len(shares)
    assert mean == pytest.approx(expected_random_share(m, n, k), rel=0.05)


def test_random_orthonormal_is_orthonormal():
    q = random_orthonormal(15, 6, torch.Generator().manual_seed(5))
    assert torch.allclose(q.T @ q, torch.eye(6, dtype=torch.float64), atol=1e-12)


def test_fisher_overlap_on_model_matches_direct_computation(checkpoints, tokenizer, prompt_files):
    from transformers import AutoModelForCausalLM

    from anchorft.analysis.prompts import encode_batch, load_prompts

    model = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)
    items = load_prompts(prompt_files["pc"])
    batches = [encode_batch(tokenizer, [it], 64, with_completion=True) for it in items]
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    ks = [2, 4]
    res = fisher_overlap(model, batches, names, ks, n_random=1, generator=torch.Generator().manual_seed(0))
    # direct: per-example gradients by autograd, bases by numpy SVD
    params = dict(model.named_parameters())
    for name in names:
        w = params[name].detach().double().numpy()
        import numpy as np

        uu, _, vh = np.linalg.svd(w)
        num = dict.fromkeys(ks, 0.0)
        den = 0.0
        for b in batches:
            model.zero_grad()
            model(**b).loss.backward()
            gr = params[name].grad.double().numpy()
            den += (gr**2).sum()
            for k in ks:
                num[k] += ((uu[:, :k].T @ gr @ vh[:k].T) ** 2).sum()
        for k in ks:
            assert res[name]["share"][k] == pytest.approx(num[k] / den, rel=1e-6)
            m, n = w.shape
            assert res[name]["expected_random"][k] == pytest.approx(k * k / (m * n))
            assert 0 <= res[name]["random_share"][k] <= 1


def test_fisher_projected_overlap_on_model_matches_direct_computation(checkpoints, tokenizer, prompt_files):
    """The streaming F_ood G share equals the one from stored per-example gradients, the formed Fisher of each
    matrix and numpy SVD bases; and it is not the in-domain share (another quantity)."""
    import numpy as np
    from transformers import AutoModelForCausalLM

    from anchorft.analysis.fisher import fisher_projected_overlap
    from anchorft.analysis.prompts import encode_batch, load_prompts

    model = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)
    items = load_prompts(prompt_files["pc"])
    batches = [encode_batch(tokenizer, [it], 64, with_completion=True) for it in items]
    id_b, ood_b = batches[: len(batches) // 2], batches[len(batches) // 2 :]
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    ks = [2, 4]
    res = fisher_projected_overlap(
        model, id_b, ood_b, names, ks, n_random=1, generator=torch.Generator().manual_seed(0)
    )
    ind = fisher_overlap(model, id_b, names, ks, n_random=1, generator=torch.Generator().manual_seed(0))
    params = dict(model.named_parameters())

    def grad(b, name):
        model.zero_grad()
        model(**b).loss.backward()
        return params[name].grad.double().numpy().copy()

    for name in names:
        w = params[name].detach().double().numpy()
        uu, _, vh = np.linalg.svd(w)
        g = sum(grad(b, name) for b in id_b) / len(id_b)
        hs = np.stack([grad(b, name).reshape(-1) for b in ood_b])
        fisher = hs.T @ hs / len(ood_b)  # formed explicitly (small matrices only)
        fg = (fisher @ g.reshape(-1)).reshape(g.shape)
        for k in ks:
            want = ((uu[:, :k].T @ fg @ vh[:k].T) ** 2).sum() / (fg**2).sum()
            assert res[name]["share"][k] == pytest.approx(want, rel=1e-6)
            assert 0 <= res[name]["random_share"][k] <= 1
        assert res[name]["share"][4] != pytest.approx(ind[name]["share"][4], rel=1e-3)
