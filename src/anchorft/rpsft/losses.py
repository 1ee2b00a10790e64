"""Token losses of the methods RPSFT is compared with (pure functions on per-token log-probabilities).

Which method uses which loss is the methods table's business (`anchorft.rpsft.methods`).

Inputs follow TRL's fused LM head: `log_probs` (batch, T) holds log pi_theta(y_t | y_<t) of each
target token and 0 at ignored positions; `mask` (batch, T) is True on the target tokens. Every loss
is a sum over tokens divided by `num_items` (the number of target tokens in the whole
gradient-accumulation batch, as TRL and transformers normalise), so that micro-batches add up.

- nll    (SFT):    l_t = -log p_t
- dft    (Wu et al. 2025, arXiv:2508.05629, eq. 9):  l_t = -sg(p_t) log p_t
- iw_sft (Qin and Springenberg 2025, arXiv:2507.12856): sequence weight
         w_i = clamp(exp(T * mean_t(log pi_theta - log pi_ref)), 0, clip); loss = w_i * NLL_i. As in the paper's
         public release the gradient flows through w_i too (`detach_weight=True`: w_i a constant):
         d loss / d log p_{i,t} = -w_i + w_i * (T / n_i) * NLL_i  (unclipped rows; n_i the row's target tokens)
- l2 anchoring is not a token loss: it is the full-rank `SubspaceAnchor` (rank >= min(m, n)).
"""

from __future__ import annotations

import torch

__all__ = ["nll_loss", "dft_loss", "iw_sft_weights", "iw_sft_loss"]


def _normaliser(mask: torch.Tensor, num_items: torch.Tensor | int | None) -> torch.Tensor:
    n = mask.sum() if num_items is None else num_items
    return torch.as_tensor(n, device=mask.device).clamp(min=1)


def nll_loss(log_probs: torch.Tensor, mask: torch.Tensor, num_items: torch.Tensor | int | None = None) -> torch.Tensor:
    """Token-level negative log-likelihood: sum_t -log p_t over target tokens / num_items."""
    return -(log_probs * mask).sum() / _normaliser(mask, num_items)


def dft_loss(log_probs: torch.Tensor, mask: torch.Tensor, num_items: torch.Tensor | int | None = None) -> torch.Tensor:
    """Dynamic fine-tuning: sum_t -sg(p_t) log p_t / num_items (DFT, eq. 9)."""
    return -(log_probs * log_probs.detach().exp() * mask).sum() / _normaliser(mask, num_items)


def iw_sft_weights(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    clip: float = 16.0,
) -> torch.Tensor:
    """w_i = clamp(exp(T * mean_t(log pi_theta - log pi_ref)), 0, clip) per sequence (differentiable in log_probs).

    A sequence without target tokens gets weight 1 (its NLL is 0 anyway).
    """
    m = mask.to(log_probs.dtype)
    count = m.sum(-1)
    mean_ratio = ((log_probs - ref_log_probs) * m).sum(-1) / count.clamp(min=1)
    return torch.exp(temperature * mean_ratio).clamp(0.0, clip).masked_fill(count == 0, 1.0)


def iw_sft_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    mask: torch.Tensor,
    num_items: torch.Tensor | int | None = None,
    temperature: float = 1.0,
    clip: float = 16.0,
    detach_weight: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted SFT: sum_i w_i sum_t -log p_{i,t} / num_items. Returns (loss, detached weights).

    `detach_weight=False` (the release's form) lets the gradient flow through w_i as well."""
    w = iw_sft_weights(log_probs, ref_log_probs, mask, temperature, clip)
    if detach_weight:
        w = w.detach()
    per_seq = -(log_probs * mask).sum(-1)
    return (w.to(per_seq.dtype) * per_seq).sum() / _normaliser(mask, num_items), w.detach()
