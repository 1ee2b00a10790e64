"""LoRA (Hu et al. 2021): W = W_0 + (alpha / r) B A on the adapted modules, A (r x n) random, B (m x r) zero at the
start; only A and B train. The release's LoRA baseline: r = 32, alpha = 64, dropout 0."""

from __future__ import annotations

from anchorft.rpsft.adapters import Adapter, register
from anchorft.rpsft.sharding import logical_shape


def check_rank(rank: int, layers: list, flag: str) -> None:
    """One line when `rank` exceeds the smaller side of every adapted matrix: no update B A can have that rank (a
    rank past some matrices only, as for GQA's k/v projections, is left to PEFT)."""
    if not layers:
        return
    largest = max(min(logical_shape(m.weight)) for _, m in layers)  # ZeRO-3 partitions: their whole shape
    if rank > largest:
        raise ValueError(
            f"{flag}={rank} exceeds the smaller side of every adapted matrix (at most {largest}): no update can have "
            f"that rank; use {flag} <= {largest}"
        )


def config(args, targets, layers):
    from peft import LoraConfig  # lazy: the peft extra

    check_rank(args.lora_rank, layers, "lora_rank")
    return LoraConfig(
        r=args.lora_rank,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )


def owns(layer) -> bool:
    return hasattr(layer, "lora_A")


def delta(layer, name: str, adapter: str, state: dict):
    """Delta = scaling B A (scaling = alpha / r, the value PEFT's layer uses in its forward), transposed for a
    `fan_in_fan_out` layer and for an embedding (whose weight is (vocabulary, hidden)); plain LoRA only."""
    if adapter in getattr(layer, "lora_embedding_A", {}):  # an nn.Embedding: Delta = scaling (B A)^T
        a = state[f"{name}.lora_embedding_A.{adapter}"].float()  # (r, num_embeddings)
        b = state[f"{name}.lora_embedding_B.{adapter}"].float()  # (embedding_dim, r)
        return (b @ a).T * float(layer.scaling[adapter])
    if adapter not in layer.lora_A:
        return None
    if getattr(layer, "use_dora", {}).get(adapter) or getattr(layer, "lora_bias", {}).get(adapter):
        raise ValueError(f"{name}: DoRA and LoRA biases are not merged here (plain LoRA only)")
    a = state[f"{name}.lora_A.{adapter}.weight"].float()
    b = state[f"{name}.lora_B.{adapter}.weight"].float()
    d = (b @ a) * float(layer.scaling[adapter])
    return d.T if getattr(layer, "fan_in_fan_out", False) else d


LORA = register(Adapter("lora", config, owns, delta))
