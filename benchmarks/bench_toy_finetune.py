"""Where a testbed fine-tuning step's time goes: the trainer against a bare loop, the model against matmul.

    .venv/bin/python benchmarks/bench_toy_finetune.py [--steps 40] [--threads 1]

One `toy compare` job fine-tunes the 1.08M-parameter testbed model (default PretrainConfig, random
weights here: the cost of a step does not depend on them) for 300 steps of 32 word problems on one thread.
This script times, on the same batches and in one process:
- `anchorft.rpsft.train.train` (TRL's SFTTrainer through RPSFTTrainer, method sft), per step;
- a bare loop (forward, backward, AdamW) over the trainer's own batches;
- `torch.mm` at the model's largest shape (tokens x 128 @ 128 x 512) and at 1024^3.
It prints the ratios trainer / bare step and achieved model FLOP rate (6 x parameters x tokens per second)
/ matmul rate: when the first is near 1 and the second near the matmul's own efficiency at these shapes,
a fine-tune is compute-bound and only fewer tokens make it faster.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _mm_rate(m: int, k: int, n: int, reps: int) -> float:
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * m * k * n * reps / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="trainer steps to time (default 40)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a compare worker uses 1)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from anchorft.rpsft.train import train
    from anchorft.studies.testbed.compare import _train_args, finetune_dataset
    from anchorft.studies.testbed.compare_config import RunSpec, load_config
    from anchorft.toy.pretrain import build_model, build_tokenizer

    torch.set_num_threads(args.threads)
    cfg = load_config("default")
    cfg.max_steps = args.steps
    tok = build_tokenizer(np.random.default_rng(cfg.pretrain.seed))
    model = build_model(cfg.pretrain, len(tok), tok, seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    data = finetune_dataset(cfg.finetune_items, np.random.default_rng(1000), cfg.id_skill)
    with tempfile.TemporaryDirectory() as tmp:
        targs = _train_args(cfg, RunSpec("sft", "sft"), 0, Path(tmp))
        trainer = train(targs, model, data, tokenizer=tok)
    trainer_step = trainer.state.log_history[-1]["train_runtime"] / args.steps

    # the bare loop: the trainer's own batches, forward + backward + AdamW, nothing else
    batches = [b for _, b in zip(range(args.steps), trainer.get_train_dataloader())]
    m = trainer.model.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    tokens = 0
    for i, b in enumerate(batches):
        if i == 3:  # warm-up steps excluded
            t, tokens = time.perf_counter(), 0
        loss = m(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += b["input_ids"].numel()
    elapsed = time.perf_counter() - t
    bare_step = elapsed / (len(batches) - 3)
    model_rate = 6 * n_params * tokens / elapsed
    T = batches[0]["input_ids"].numel()
    mm_model = _mm_rate(T, 128, 512, 200)
    mm_big = _mm_rate(1024, 1024, 1024, 20)

    shape = tuple(batches[0]["input_ids"].shape)
    print(f"testbed model {n_params:,} parameters, {args.threads} thread(s), batch {shape}")
    print(f"trainer step {trainer_step * 1e3:.0f} ms, bare step {bare_step * 1e3:.0f} ms")
    print(f"ratio trainer / bare step: {trainer_step / bare_step:.2f}x")
    print(
        f"model rate {model_rate / 1e9:.1f} GFLOP/s; torch.mm {T}x128@128x512 {mm_model / 1e9:.1f} GFLOP/s, ", end=""
    )
    print(f"1024^3 {mm_big / 1e9:.1f} GFLOP/s")
    print(f"ratio model rate / mm, model shape: {model_rate / mm_model:.2f}; at 1024^3: {model_rate / mm_big:.2f}")


if __name__ == "__main__":
    main()
