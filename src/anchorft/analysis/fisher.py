"""Fisher overlap: how much of the empirical Fisher's gradient energy lies in the pretrained top-k block.

For a weight W_0 (m x n) with top-k singular bases U_0 (m x k), V_0 (n x k), and per-example gradients
G_j = dL_j/dW at W_0 on in-domain data, the empirical Fisher F = sum_j vec(G_j) vec(G_j)^T. The
orthogonal projector onto the block {U_0 X V_0^T} is P = (V_0 V_0^T) kron (U_0 U_0^T), so

    share_k = tr(P F) / tr(F) = sum_j ||U_0^T G_j V_0||_F^2 / sum_j ||G_j||_F^2        (Fisher share)

Against it: the share a random k-dim block gets, k^2 / (m n) in expectation (E[U U^T] = (k/m) I for a
uniformly random k-frame), and the share measured with random orthonormal bases (QR of Gaussian matrices
drawn from an explicit generator).

The paper's quantity (Jin et al., arXiv:2605.10973): the sensitive directions are those along which an
update raises the out-of-domain loss, measured by the empirical Fisher of the OOD loss,
F_ood = (1/N) sum_j vec(H_j) vec(H_j)^T with H_j = dL^ood_j / dW; the SFT step moves W along the in-domain
gradient G = mean_i dL^id_i / dW, so what it does to the OOD loss is seen through F_ood G. Per matrix (the
Fisher's diagonal block of that matrix), without forming F:

    F_ood G = (1/N) sum_j H_j <H_j, G>_F,   share_k = ||U_0^T (F_ood G) V_0||_F^2 / ||F_ood G||_F^2

(`fisher_gradient_product`, `fisher_projected_overlap`): the paper's summary ("about 20 %") is this share.
The in-domain share above (`fisher_overlap`) is kept beside it.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from anchorft import stop
from anchorft.analysis.prompts import encode_batch, load_prompts
from anchorft.analysis.rotation import bases
from anchorft.errors import UsageError
from anchorft.eval.loading import load_tokenizer
from anchorft.rpsft.anchor import select_parameters
from anchorft.rpsft.anchor_plan import select_layers
from anchorft.rpsft.calibration import example_grads, fisher_gradient_product, named_parameters
from anchorft.rpsft.model_loading import load_model
from anchorft.subspace import cumulative_block_energy

__all__ = [
    "expected_random_share",
    "random_orthonormal",
    "fisher_gradient_product",
    "fisher_product_from_files",
    "fisher_overlap",
    "fisher_projected_overlap",
    "anchor_fisher_inputs",
]


def _nested(g: torch.Tensor, u: torch.Tensor, v: torch.Tensor, ks: list[int]) -> list[float]:
    """[||U[:, :k]^T G V[:, :k]||_F^2 for k in ks] (nested blocks: `anchorft.subspace.cumulative_block_energy`)."""
    cum = cumulative_block_energy(g, u, v)
    return [cum[k - 1].item() for k in ks]


def expected_random_share(m: int, n: int, k: int) -> float:
    """E ||U^T G V||^2 / ||G||^2 for independent uniformly random k-frames U (m x k), V (n x k): k^2 / (m n)."""
    return (k / m) * (k / n)


def random_orthonormal(m: int, k: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A uniformly random m x k orthonormal frame: Q of the QR of a Gaussian matrix, signs fixed by diag(R)."""
    z = torch.randn(m, k, generator=generator, dtype=dtype)
    q, r = torch.linalg.qr(z)
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def _entry(shape, energy: float, block: list[float], rblocks: list[list[float]], ks: list[int]) -> dict:
    """One matrix's result: the top-k block's energy `block[i]` and each random block's `rblocks[r][i]` at k = ks[i],
    as shares of the total `energy` (the random ones averaged), beside k^2 / (m n)."""
    m, n = shape
    t = max(energy, 1e-300)
    return {
        "shape": [m, n],
        "grad_energy": energy,
        "share": {k: block[i] / t for i, k in enumerate(ks)},
        "random_share": {k: sum(rb[i] for rb in rblocks) / (t * max(len(rblocks), 1)) for i, k in enumerate(ks)},
        "expected_random": {k: expected_random_share(m, n, k) for k in ks},
    }


def _frames(model, names, ks, n_random, generator, svd, dtype) -> tuple[dict, list[int], dict]:
    """(the parameters `names` of `model`, sorted distinct ks, {name: (U_0, V_0, [(U, V) random])}): the top-k_max
    bases of each matrix and `n_random` random frames, drawn from `generator` (default: seed 0)."""
    params = named_parameters(model, names)
    ks = sorted(set(ks))
    kmax, gen = ks[-1], generator if generator is not None else torch.Generator().manual_seed(0)
    frames = {}
    for name in names:
        w = params[name].detach()
        m, n = w.shape
        if kmax > min(m, n):
            raise ValueError(f"Fisher rank k={kmax} exceeds min(m, n)={min(m, n)} of {name} ({m} x {n})")
        u, _, v = bases(w, kmax, svd, dtype, gen)
        # U then V of each random block, from the one generator
        rand = [tuple(random_orthonormal(d, kmax, gen, dtype).to(w.device) for d in (m, n)) for _ in range(n_random)]
        frames[name] = (u, v, rand)
    return params, ks, frames


def fisher_product_from_files(
    model: torch.nn.Module,
    tokenizer,
    id_path: str,
    ood_path: str,
    names: list[str],
    samples: int = 32,
    max_length: int = 512,
    dtype: torch.dtype = torch.float64,
    progress: bool = False,
) -> dict[str, torch.Tensor]:
    """`fisher_gradient_product` on the first `samples` rows of two JSONL files (`anchorft.analysis.prompts`
    format: prompt and completion), one example per batch: the calibration of the anchor's `fisher:F` rule."""
    id_b = [encode_batch(tokenizer, [it], max_length, with_completion=True) for it in load_prompts(id_path, samples)]
    ood = [encode_batch(tokenizer, [it], max_length, with_completion=True) for it in load_prompts(ood_path, samples)]
    return fisher_gradient_product(model, id_b, ood, names, dtype, progress)


def fisher_projected_overlap(
    model: torch.nn.Module,
    id_batches: list[dict[str, torch.Tensor]],
    ood_batches: list[dict[str, torch.Tensor]],
    names: list[str],
    ks: list[int],
    n_random: int = 2,
    generator: torch.Generator | None = None,
    svd: str = "exact",
    dtype: torch.dtype = torch.float64,
    progress: bool = True,
) -> dict[str, dict]:
    """Share of F_ood G in each matrix's top-k block (the paper's quantity), at the model's current weights.

    G = mean over `id_batches` of the in-domain loss gradient (the SFT direction); F_ood the empirical Fisher of
    the per-example OOD gradients (`ood_batches` of batch size 1), applied matrix by matrix in one streaming
    pass (`fisher_gradient_product`: the sum above, one example at a time). Returns {name: {"shape", "grad_energy"
    (||F_ood G||_F^2), "share": {k: ..}, "random_share": {k: ..}, "expected_random": {k: ..}}}.
    """
    if not id_batches or not ood_batches:
        raise ValueError("fisher_projected_overlap needs in-domain and out-of-domain batches")
    params, ks, frames = _frames(model, names, ks, n_random, generator, svd, dtype)
    fg = fisher_gradient_product(model, id_batches, ood_batches, names, dtype, progress)
    out = {}
    for name in names:
        u, v, rand = frames[name]
        t = max(fg[name].pow(2).sum().item(), 1e-300)
        rb = [_nested(fg[name], ur, vr, ks) for ur, vr in rand]
        out[name] = _entry(params[name].shape, t, _nested(fg[name], u, v, ks), rb, ks)
    return out


def fisher_overlap(
    model: torch.nn.Module,
    batches: list[dict[str, torch.Tensor]],
    names: list[str],
    ks: list[int],
    n_random: int = 2,
    generator: torch.Generator | None = None,
    svd: str = "exact",
    dtype: torch.dtype = torch.float64,
    progress: bool = True,
) -> dict[str, dict]:
    """Fisher share of each matrix's top-k block for every k in ks, at the model's current weights.

    `batches` are model inputs with labels (batch size 1 gives the per-example empirical Fisher).
    Returns {name: {"shape", "share": {k: ..}, "random_share": {k: ..}, "expected_random": {k: ..}}}.
    """
    params, ks, frames = _frames(model, names, ks, n_random, generator, svd, dtype)
    total = dict.fromkeys(names, 0.0)
    block = {nm: [0.0] * len(ks) for nm in names}
    rblock = {nm: [[0.0] * len(ks) for _ in range(n_random)] for nm in names}
    was_training = model.training
    model.eval()  # no dropout: the gradient of the deterministic model
    for batch in tqdm(batches, desc="fisher", leave=False, disable=not progress):
        stop.check_alone()  # a safe point per example (anchorft.stop)
        for name, g in example_grads(model, batch, names, params, dtype).items():
            u, v, rand = frames[name]
            total[name] += g.pow(2).sum().item()
            for i, e in enumerate(_nested(g, u, v, ks)):
                block[name][i] += e
            for r, (ur, vr) in enumerate(rand):
                for i, e in enumerate(_nested(g, ur, vr, ks)):
                    rblock[name][r][i] += e
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return {name: _entry(params[name].shape, total[name], block[name], rblock[name], ks) for name in names}


def anchor_fisher_inputs(args, model_name_or_path: str, dataset: str | None, tok=None) -> tuple:
    """(model, tokenizer, {name: F_ood G}) for `anchorft train`'s fisher:F rank rule (`args`: its RPSFTConfig): the
    model loaded, and the product from the calibration JSONL files (`--anchor_calibration`, out of domain;
    `--anchor_calibration_id`, else the training `dataset`, in domain)."""

    if not args.anchor_calibration:
        raise UsageError("anchor_rank_rule fisher:F needs --anchor_calibration (a JSONL of out-of-domain rows)")
    id_path = args.anchor_calibration_id or dataset
    if not str(id_path).endswith(".jsonl"):
        raise UsageError("fisher:F: set --anchor_calibration_id to a JSONL of in-domain rows")
    model = load_model(model_name_or_path, args)
    tok = tok or load_tokenizer(model_name_or_path, trust_remote_code=bool(args.trust_remote_code))
    names = [n for n, _ in select_parameters(model, args.anchor_targets, args.anchor_include_embeddings)]
    names = select_layers(names, args.anchor_layers)
    fisher = fisher_product_from_files(
        model, tok, id_path, args.anchor_calibration, names, args.anchor_calibration_samples, args.max_length or 512
    )
    return model, tok, fisher
