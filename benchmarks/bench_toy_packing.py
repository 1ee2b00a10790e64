"""What first-fit packing saves in testbed pretraining: seconds per document against closing rows at a misfit.

    .venv/bin/python benchmarks/bench_toy_packing.py [--steps 20] [--threads 2]

The baseline is the testbed's earlier packing: rows of 40 tokens filled in the order the documents are drawn, a row
closed as soon as the next document does not fit (its tail stays padding), 32 rows a step. The testbed now packs
first-fit (`anchorft.toy.pretrain._batch`: each document into the first row with room, the misfits carried to the
next step) into 20 rows of 64 tokens: the same 1,280 token slots a step. Same mixture, same model (default
PretrainConfig, random weights: a step's cost does not depend on them), a bare forward + backward + AdamW step. It
prints the fill, documents a step and the ratio of seconds per document, first-fit / baseline (below 1: first-fit
wins).
"""

from __future__ import annotations

import argparse
import dataclasses

from bench_toy_tokens import _step_seconds  # the same timed step


def _close_at_misfit(cfg, tok, rng):
    """The earlier packing (baseline): whole documents in drawing order, a row closed at the first misfit."""
    from anchorft.toy.pretrain import _documents, _encode_docs, _packed_tensors

    B, T, pad = cfg.batch_size, cfg.pack_len, tok.pad_token_id
    rows, used, pending = [[]], 0, []
    while True:
        if not pending:
            pending = _encode_docs(_documents(cfg.mix, 64, rng), tok, cfg.loss_on)[::-1]
        n = len(pending[-1][0])
        if used + n > T:
            if len(rows) == B:
                break
            rows.append([])
            used = 0
        rows[-1].append(pending.pop())
        used += n
    return _packed_tensors(rows, T, pad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per setting (default 20)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (pretraining uses the cores, 2 here)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from anchorft.toy.pretrain import PretrainConfig, _batch, build_model, build_tokenizer

    torch.set_num_threads(args.threads)
    tok = build_tokenizer(np.random.default_rng(0))
    cfg = PretrainConfig()
    base_cfg = dataclasses.replace(cfg, batch_size=32, pack_len=40)
    n = args.steps + 2
    rng, carry = np.random.default_rng(1), []
    settings = {
        "close at misfit, 32 x 40": [_close_at_misfit(base_cfg, tok, rng) for _ in range(n)],
        "first-fit, 20 x 64": [_batch(cfg, tok, rng, carry) for _ in range(n)],
    }
    per_doc = {}
    for name, batches in settings.items():
        model = build_model(cfg, len(tok), tok, seed=0).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        fill = np.mean([float((b[0] != tok.pad_token_id).float().mean()) for b in batches])
        docs = np.mean([int(((b[2] == 0) & (b[0] != tok.pad_token_id)).sum()) for b in batches])
        step = _step_seconds(model, batches, opt)
        per_doc[name] = step / docs
        print(f"{name:25s}: {fill * 100:.1f} % full, {docs:.1f} documents a step, ", end="")
        print(f"{step * 1e3:.0f} ms a step, {per_doc[name] * 1e3:.2f} ms a document")
    a, b = per_doc.values()
    print(f"ratio first-fit / close at misfit, seconds per document: {b / a:.2f}")


if __name__ == "__main__":
    main()
