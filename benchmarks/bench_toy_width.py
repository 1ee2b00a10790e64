"""What a larger testbed costs a pretraining step: seconds per step of wider / deeper Llamas against the default.

    .venv/bin/python benchmarks/bench_toy_width.py [--steps 20] [--threads 2]

A testbed of "a few million" parameters is a natural next size; the default (hidden 128, 4 layers, MLP 512) has 1.08M
because `make demo` must finish in 20 minutes on two cores. This times the same packed batches (default
PretrainConfig: first-fit rows of 20 x 64 tokens) through a bare forward + backward + AdamW step on each shape,
random weights (a step's cost does not depend on them), and prints the parameters and the ratio of seconds per step
to the default's. `--threads 1` is what one `toy compare` worker gets. configs/toy/large.yaml uses 192 x 4.
"""

from __future__ import annotations

import argparse
import dataclasses

from bench_toy_tokens import _step_seconds  # the same timed step

# (hidden, layers, MLP): the default first, then the shapes of about 2-3.4M parameters tried
SHAPES = [(128, 4, 512), (192, 4, 768), (256, 2, 1024), (256, 3, 768), (256, 3, 1024), (320, 2, 1280)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per shape (default 20)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (pretraining uses the cores, 2 here)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from anchorft.toy.pretrain import PretrainConfig, _batch, build_model, build_tokenizer

    torch.set_num_threads(args.threads)
    tok = build_tokenizer(np.random.default_rng(0))
    rng, carry = np.random.default_rng(1), []
    batches = [_batch(PretrainConfig(), tok, rng, carry) for _ in range(args.steps + 2)]  # shared by every shape
    base = None
    for hidden, layers, mlp in SHAPES:
        cfg = dataclasses.replace(PretrainConfig(), hidden_size=hidden, num_layers=layers, intermediate_size=mlp)
        model = build_model(cfg, len(tok), tok, seed=0).train()
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        step = _step_seconds(model, batches, opt)
        base = base or (params, step)
        print(
            f"hidden {hidden:3d} x {layers} layers, MLP {mlp:4d}: {params / 1e6:.2f}M parameters "
            f"({params / base[0]:.2f}x), {step * 1e3:.0f} ms a step, ratio to the default {step / base[1]:.2f}"
        )


if __name__ == "__main__":
    main()
