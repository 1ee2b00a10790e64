"""What the testbed tokenizer's whole words save: a step's time per document, words against letters.

    .venv/bin/python benchmarks/bench_toy_tokens.py [--steps 20] [--threads 1]

The testbed tokenizer reads the templates' words ("reverse", "colour", "pens", ...) and format markers
("Q:", "\\nA:", "\\boxed{") as one token each and spells random strings letter by letter; the baseline is the
same BPE without them (one token per character, the testbed's earlier tokenizer). On the same documents and
the same model (default PretrainConfig, random weights: a step's cost does not depend on them), this times a
bare forward + backward + AdamW step:
- pretraining: packed batches of `batch_size` rows (`pack_len` 40 with words, 64 with letters: about the
  same number of documents a row), reported per document;
- fine-tuning: 32 word problems of the ID task, padded to the batch's longest (as TRL's collator does).
It prints tokens per document and the ratio of seconds per document, words / letters (below 1: words win).
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def _step_seconds(model, batches, opt) -> float:
    """Mean seconds of forward + backward + AdamW over `batches` (the first two are warm-up)."""
    for i, (ids, labels, pos, mask) in enumerate(batches):
        if i == 2:
            t = time.perf_counter()
        loss = model(input_ids=ids, labels=labels, position_ids=pos, attention_mask=mask).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t) / (len(batches) - 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per setting (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a compare worker uses 1)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from anchorft.toy import skills as sk
    from anchorft.toy.pretrain import PretrainConfig, _batch, build_model, build_tokenizer

    torch.set_num_threads(args.threads)
    words = build_tokenizer(np.random.default_rng(0))
    letters = build_tokenizer(np.random.default_rng(0), whole_words=False)
    cfg = PretrainConfig()
    items = sk.sample_items("math_word", 32 * (args.steps + 2), "train", np.random.default_rng(1))
    per_doc = {}
    for name, tok, pack_len in (("letters", letters, 64), ("words", words, 40)):
        model = build_model(cfg, len(tok), tok, seed=0).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        pcfg = dataclasses.replace(cfg, pack_len=pack_len)
        rng = np.random.default_rng(2)  # the same documents for both tokenizers
        packed = [_batch(pcfg, tok, rng) for _ in range(args.steps + 2)]
        docs = np.mean([int(((b[2] == 0) & (b[0] != tok.pad_token_id)).sum()) for b in packed])
        pre = _step_seconds(model, packed, opt) / docs
        ft = []
        for j in range(args.steps + 2):
            enc = tok([it.prompt + it.answer + tok.eos_token for it in items[32 * j : 32 * (j + 1)]], padding=True,
                      return_tensors="pt")  # fmt: skip
            labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
            ft.append((enc["input_ids"], labels, None, enc["attention_mask"]))
        n_tok = np.mean([int(b[3].sum()) / 32 for b in ft])
        fine = _step_seconds(model, ft, opt) / 32
        per_doc[name] = (pre, fine)
        print(f"{name:7s}: pretraining {docs / cfg.batch_size:.1f} documents a row of {pack_len}, ", end="")
        print(
            f"{pre * 1e3:.2f} ms a document; fine-tuning {n_tok:.1f} tokens a problem, {fine * 1e3:.2f} ms a problem"
        )
    (pw, fw), (pl, fl) = per_doc["words"], per_doc["letters"]
    print(f"ratio words / letters, seconds per document: pretraining {pw / pl:.2f}, fine-tuning {fw / fl:.2f}")


if __name__ == "__main__":
    main()
