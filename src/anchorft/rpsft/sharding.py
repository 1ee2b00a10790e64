"""The anchor's view of sharded parameters. A DeepSpeed ZeRO-3 parameter (partitioned flat) is gathered one matrix
at a time, read-only, wherever a whole matrix is needed (`gathered`, `full_matrix`); an FSDP2 parameter (row-sharded
DTensor) gives each rank its rows (`local_rows`), whose partial sums one all-reduce adds (`all_reduce_sum`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

__all__ = ["unwrap", "is_zero3", "logical_shape", "gathered", "full_matrix", "local_rows", "all_reduce_sum"]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside its wrappers (DDP, DeepSpeed engine: `.module`)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def is_zero3(p: torch.Tensor) -> bool:
    """True for a DeepSpeed ZeRO-3 parameter (its `.data` is an empty placeholder outside `gathered`)."""
    return hasattr(p, "ds_id") and hasattr(p, "ds_shape")


def logical_shape(p: torch.Tensor) -> tuple[int, ...]:
    """The logical shape of a parameter, also when ZeRO-3 has partitioned it."""
    return tuple(p.ds_shape) if is_zero3(p) else tuple(p.shape)


def gathered(params: Sequence[torch.Tensor]):
    """Context in which ZeRO-3 parameters hold their whole matrix on every rank (read-only; a collective:
    every rank must enter it); a no-op for any other parameter. Parameters DeepSpeed holds whole already (small
    ones it keeps persistent, those gathered by a forward in progress) are left alone: gathering them would
    partition them on exit, under DeepSpeed's feet."""
    if not any(is_zero3(p) for p in params):
        return contextlib.nullcontext()
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    z3 = [p for p in params if is_zero3(p) and p.ds_status != ZeroParamStatus.AVAILABLE]
    if not z3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(z3, modifier_rank=None)


def full_matrix(p: torch.Tensor) -> torch.Tensor:
    """The whole matrix of a (possibly sharded DTensor or ZeRO-3 partitioned) parameter, detached."""
    if is_zero3(p):
        with gathered([p]):
            return p.detach().clone()
    p = p.detach()
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def local_rows(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, slice | None, object]:
    """(local weight, local grad, row slice of the full matrix or None if replicated, process group).

    Plain tensors and replicated DTensors are whole. A DTensor sharded on dim 0 (FSDP2's layout)
    gives its local rows, their offset and the mesh's group. Other layouts are rejected.
    """
    if not hasattr(p, "to_local"):
        return p.detach(), p.grad, None, None
    from torch.distributed.tensor import Replicate, Shard

    placements = tuple(p.placements)
    grad = p.grad.to_local() if p.grad is not None else None
    if all(isinstance(pl, Replicate) for pl in placements):
        return p.to_local().detach(), grad, None, None
    if p.device_mesh.ndim != 1 or not (len(placements) == 1 and isinstance(placements[0], Shard)):
        raise ValueError(f"anchor: unsupported DTensor layout {placements}; expected Shard(0) on a 1-D mesh (FSDP2)")
    if placements[0].dim != 0:
        raise ValueError(f"anchor: parameter sharded on dim {placements[0].dim}; only row sharding is supported")
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, placements)
    return p.to_local().detach(), grad, slice(offset[0], offset[0] + shape[0]), p.device_mesh.get_group()


def all_reduce_sum(parts: Sequence[torch.Tensor], group) -> list[torch.Tensor]:
    """Sum `parts` over the ranks of `group` with one all-reduce of their concatenation; returns views of the
    sums, each in its part's shape (an empty list for no parts, without a collective)."""
    if not parts:
        return []
    flat = torch.cat([t.reshape(-1) for t in parts])
    torch.distributed.all_reduce(flat, group=group)
    out, off = [], 0
    for t in parts:
        out.append(flat[off : off + t.numel()].reshape(t.shape))
        off += t.numel()
    return out
