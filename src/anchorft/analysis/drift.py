"""Hidden-state drift: how far fine-tuning moves the representations on the same prompts.

For an evaluation set of N prompts, h^l_j is the mean over prompt j's tokens of the hidden state after
layer l (l = 0 the embeddings; `output_hidden_states`), and mu^l = (1/N) sum_j h^l_j. Between base (mu_0)
and tuned (mu) models, per layer:

    l2       = ||mu^l - mu_0^l||_2,     rel_l2 = l2 / ||mu_0^l||_2,
    cos_dist = 1 - cos(mu^l, mu_0^l),   prompt_cos_dist = (1/N) sum_j (1 - cos(h^l_j, h^l_{0,j})).
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from anchorft import stop
from anchorft.analysis.prompts import PromptItem, encode_batch

__all__ = ["prompt_hidden_means", "drift_metrics"]


@torch.no_grad()
def prompt_hidden_means(
    model, tokenizer, items: list[PromptItem], batch_size: int = 8, max_length: int = 256, desc: str = "hidden"
) -> torch.Tensor:
    """(N, L+1, d) float64: per prompt and layer, the mean hidden state over the prompt's tokens."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for start in tqdm(range(0, len(items), batch_size), desc=desc, leave=False):
        stop.check_alone()  # a safe point per batch (anchorft.stop)
        enc = encode_batch(tokenizer, items[start : start + batch_size], max_length, with_completion=False)
        mask = enc["attention_mask"].to(device)
        hs = model(input_ids=enc["input_ids"].to(device), attention_mask=mask, output_hidden_states=True).hidden_states
        h = torch.stack(hs, dim=1).double()  # (B, L+1, T, d)
        w = mask.double()[:, None, :, None]
        out.append(((h * w).sum(2) / w.sum(2)).cpu())
    return torch.cat(out)


def drift_metrics(base: torch.Tensor, tuned: torch.Tensor) -> dict[str, list[float]]:
    """Per-layer l2, rel_l2, cos_dist (of the means) and prompt_cos_dist from two (N, L+1, d) arrays."""
    if base.shape != tuned.shape:
        raise ValueError(f"hidden states differ in shape: {tuple(base.shape)} vs {tuple(tuned.shape)}")
    mu0, mu = base.mean(0), tuned.mean(0)  # (L+1, d)
    l2 = (mu - mu0).norm(dim=-1)
    cos = torch.nn.functional.cosine_similarity(mu, mu0, dim=-1)
    pcos = torch.nn.functional.cosine_similarity(tuned, base, dim=-1).mean(0)  # (L+1,)
    return {
        "l2": l2.tolist(),
        "rel_l2": (l2 / mu0.norm(dim=-1).clamp_min(1e-30)).tolist(),
        "cos_dist": (1 - cos).tolist(),
        "prompt_cos_dist": (1 - pcos).tolist(),
    }
