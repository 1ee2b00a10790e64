"""The calibration of the anchor's fisher:F rank rule: F_ood G, the empirical Fisher of the out-of-domain loss applied
to the mean in-domain gradient (the quantity of `anchorft.analysis.fisher`, which uses it too), and the encoding of
one prompt/completion example for it.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from anchorft import stop

__all__ = ["encode_example", "named_parameters", "example_grads", "fisher_gradient_product"]


def encode_example(tokenizer, prompt: str, completion: str, max_length: int) -> dict[str, torch.Tensor]:
    """One example as a batch of one: input_ids / attention_mask / labels (the completion's tokens; -100 on the
    prompt), the prompt tokenized with the tokenizer's special tokens and the completion without."""
    p_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    c_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    ids = (p_ids + c_ids)[:max_length]
    labels = ([-100] * len(p_ids) + c_ids)[:max_length]
    return {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "labels": torch.tensor([labels]),
    }


def named_parameters(model: torch.nn.Module, names: list[str]) -> dict[str, torch.nn.Parameter]:
    """The model's parameters by name; ValueError naming the first of `names` the model lacks."""
    params = dict(model.named_parameters())
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(f"model has no parameter {missing[0]!r}")
    return params


def example_grads(model, batch, names, params, dtype) -> dict[str, torch.Tensor]:
    """{name: dL/dW} of the loss of one batch at the model's current weights, for the parameters `names`."""
    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    model(**{k: t.to(device) for k, t in batch.items()}).loss.backward()
    return {n: params[n].grad.detach().to(dtype) for n in names if params[n].grad is not None}


def fisher_gradient_product(
    model: torch.nn.Module,
    id_batches: list[dict[str, torch.Tensor]],
    ood_batches: list[dict[str, torch.Tensor]],
    names: list[str],
    dtype: torch.dtype = torch.float64,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """{name: F_ood G} at the model's current weights: G the mean in-domain loss gradient over `id_batches`,
    F_ood the empirical Fisher of the per-example OOD gradients (`ood_batches` of batch size 1), applied in one
    streaming pass (F_ood G = (1/N) sum_j H_j <H_j, G>_F, one example at a time, F never formed). Also the
    input of the anchor's `fisher:F` rank rule (`SubspaceAnchor.from_model(..., fisher=...)`)."""
    params = named_parameters(model, names)
    if not id_batches or not ood_batches:
        raise ValueError("the Fisher-projected gradient needs in-domain and out-of-domain batches")
    was_training = model.training
    model.eval()
    g = {n: torch.zeros(params[n].shape, dtype=dtype, device=params[n].device) for n in names}
    for batch in tqdm(id_batches, desc="SFT gradient", leave=False, disable=not progress):
        stop.check_alone()  # a safe point per example (anchorft.stop)
        for n, gr in example_grads(model, batch, names, params, dtype).items():
            g[n] += gr / len(id_batches)
    fg = {n: torch.zeros_like(g[n]) for n in names}
    for batch in tqdm(ood_batches, desc="OOD Fisher x G", leave=False, disable=not progress):
        stop.check_alone()  # a safe point per example (anchorft.stop)
        for n, h in example_grads(model, batch, names, params, dtype).items():
            fg[n] += h * ((h * g[n]).sum() / len(ood_batches))
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return fg
