"""The memory budget against the bytes the anchor really stores (its saved safetensors file), not the planner's
own count: with ranks fixed by a map (a rank, rank 0, a rank past the matrix's size), the remainder L2, float64
bases and tied embeddings."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters


def _stored_bytes(anchor: SubspaceAnchor, path) -> int:
    anchor.save(path)
    total = 0
    with safe_open(str(path / "anchor.safetensors"), framework="pt") as f:
        for key in f.keys():
            t = f.get_tensor(key)
            total += t.numel() * t.element_size()
    return total


CASES = [
    # (model kind, tied, options)
    ("llama", False, dict(rank_map={r"q_proj": 2, r"layers\.1\.mlp": 0})),
    (
        "llama",
        False,
        dict(rank_map={r"layers\.0\.self_attn\.k_proj": 10**6, r"o_proj": 1}, lambda_rest=0.1, base_lambda=1.0),
    ),
    ("llama", False, dict(rank_map={r"v_proj": 3}, dtype=torch.float64)),
    ("qwen2", True, dict(rank_map={r"embed": 4})),
    ("qwen2", True, dict()),
]


@pytest.mark.parametrize("kind,tie,opts", CASES)
@pytest.mark.parametrize("share", [0.15, 0.4])
def test_budget_holds_for_the_bytes_saved(rp, tmp_path, kind, tie, opts, share):
    model = rp.tiny_model(kind, 64, tie=tie) if tie else rp.tiny_model(kind, 64)
    full = sum(p.numel() for n, p in select_parameters(model)) * (8 if opts.get("dtype") == torch.float64 else 4)
    budget = int(share * full)
    anchor = SubspaceAnchor.from_model(model, memory=budget, **opts)
    stored = _stored_bytes(anchor, tmp_path / "a")
    assert stored <= budget, (stored, budget)
    assert stored == anchor.meta["memory_used"]  # the recorded use is the file's
    assert stored == sum(e.numel for e in anchor.entries) * (8 if opts.get("dtype") == torch.float64 else 4)
    # the map's fixed ranks are the stored ones
    for pattern, rank in (opts.get("rank_map") or {}).items():
        import re

        hits = [e for e in anchor.entries if re.search(pattern, e.name)]
        if rank == 0:
            assert not hits and all(r == 0 for n, r in anchor.ranks.items() if re.search(pattern, n))
        else:
            assert hits and all(e.rank == min(rank, *e.shape) for e in hits)
    assert stored > 0.5 * budget  # the free matrices take up what the fixed ones leave
