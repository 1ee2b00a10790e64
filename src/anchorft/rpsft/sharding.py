"""The anchor's view of sharded parameters. A DeepSpeed ZeRO-3 parameter (partitioned flat) is gathered one matrix
at a time, read-only, wherever a whole matrix is needed (`gathered`, `full_matrix`); an FSDP2 parameter (row-sharded
DTensor) gives each rank its rows (`local_rows`), whose partial sums one all-reduce adds (`all_reduce_sum`).

A copy of W_0 (the L2 fallback's) is held like its parameter: each rank keeps the part of the flattened matrix
whose weights it holds (`held_part`, `take_part`), gathered whole only for a moment (`gather_whole`), and the L2
term of a ZeRO-3 parameter is summed over the parts (`l2_penalty_part`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

__all__ = [
    "unwrap", "is_zero3", "logical_shape", "gathered", "full_matrix", "local_rows", "all_reduce_sum", "Part",
    "held_part", "take_part", "gather_whole", "l2_penalty_part",
]  # fmt: skip


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
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus  # lazy: the deepspeed extra

    z3 = [p for p in params if is_zero3(p) and p.ds_status != ZeroParamStatus.AVAILABLE]
    if not z3:
        return contextlib.nullcontext()
    import deepspeed  # lazy: the deepspeed extra

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

    placements = tuple(p.placements)
    grad = p.grad.to_local() if p.grad is not None else None
    if all(isinstance(pl, Replicate) for pl in placements):
        return p.to_local().detach(), grad, None, None
    if p.device_mesh.ndim != 1 or not (len(placements) == 1 and isinstance(placements[0], Shard)):
        raise ValueError(f"anchor: unsupported DTensor layout {placements}; expected Shard(0) on a 1-D mesh (FSDP2)")
    if placements[0].dim != 0:
        raise ValueError(f"anchor: parameter sharded on dim {placements[0].dim}; only row sharding is supported")

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


@dataclass(frozen=True)
class Part:
    """The elements [start, stop) of a flattened m x n matrix (`numel` = m n) that one rank holds, when rank r of
    the `group`'s `world` ranks holds [r size, (r + 1) size) (the last ones fewer, or none): DeepSpeed ZeRO-3's flat
    partition, or FSDP2's rows (whole rows of `cols` columns, held as a (rows, cols) matrix)."""

    start: int
    stop: int
    size: int
    numel: int
    world: int
    group: object
    cols: int = 0  # FSDP2: the matrix's n (the part is whole rows); 0: a flat ZeRO-3 partition


def held_part(p: torch.Tensor) -> Part | None:
    """The part of `p`'s matrix this rank holds (None when it holds the whole): ZeRO-3's flat partition
    (`ds_tensor.ds_numel` elements at rank x that), or FSDP2's row shard (torch.chunk's rows, ceil(m / world))."""
    dist = torch.distributed
    if is_zero3(p):
        size, numel = int(p.ds_tensor.ds_numel), math.prod(p.ds_shape)
        group = p.ds_process_group
        start = min(size * dist.get_rank(group=group), numel)
        return Part(start, min(start + size, numel), size, numel, dist.get_world_size(group=group), group)
    _, _, rows, group = local_rows(p)
    if rows is None:
        return None
    (m, n), world = p.shape, dist.get_world_size(group=group)
    chunk = -(-m // world)
    if rows.start != min(chunk * dist.get_rank(group=group), m):
        raise ValueError(f"anchor: rows {rows} are not torch.chunk's shard of {m} rows; cannot hold W_0 like them")
    return Part(rows.start * n, rows.stop * n, chunk * n, m * n, world, group, cols=n)


def take_part(whole: torch.Tensor, part: Part) -> torch.Tensor:
    """This rank's part of `whole` (a copy, so that the whole can be freed): (rows, n) for FSDP2, flat for ZeRO-3."""
    flat = whole.reshape(-1)[part.start : part.stop].clone()
    return flat.view(-1, part.cols) if part.cols else flat


def gather_whole(local: torch.Tensor, part: Part, shape: Sequence[int]) -> torch.Tensor:
    """The whole matrix from every rank's `local` part (a collective: every rank of `part.group` calls it, in the
    same order): one all-gather into the one new whole-sized buffer."""
    buf = local.new_zeros(part.size)
    buf[: part.stop - part.start] = local.reshape(-1)
    out = local.new_empty(part.size * part.world)
    torch.distributed.all_gather_into_tensor(out, buf, group=part.group)
    return out[: part.numel].view(*shape)


class _PartL2(torch.autograd.Function):
    """||W - W_0||_F^2 of a whole (gathered) ZeRO-3 weight against this rank's part of W_0 (`l2_penalty_part`)."""

    @staticmethod
    def forward(ctx, w, w0_part, part, dtype, regather):
        ctx.part, ctx.dtype, ctx.regather = part, dtype, regather
        ctx.save_for_backward(w, w0_part)  # the weight and the part itself: no new tensor is kept
        d = w.detach().reshape(-1)[part.start : part.stop].to(dtype, copy=True).sub_(w0_part.reshape(-1))
        total = d.square_().sum()
        torch.distributed.all_reduce(total, group=part.group)  # the parts' sums: the whole matrix's
        return total

    @staticmethod
    def backward(ctx, grad):
        with ctx.regather() if ctx.regather is not None else contextlib.nullcontext():
            w, w0_part = ctx.saved_tensors  # unpacked while whole
            d = gather_whole(w0_part.to(ctx.dtype), ctx.part, w.shape)  # W_0, then D in place: one new matrix
            d.neg_().add_(w.detach())
        d.mul_(2.0 * grad.to(ctx.dtype))
        return (d if d.dtype == w.dtype else d.to(w.dtype)), None, None, None, None


def l2_penalty_part(
    w: torch.Tensor,
    w0_part: torch.Tensor,
    part: Part,
    dtype: torch.dtype = torch.float32,
    regather: Callable[[], AbstractContextManager] | None = None,
) -> torch.Tensor:
    """R = ||W - W_0||_F^2 (`anchorft.subspace.l2_penalty`) for a ZeRO-3 weight W, whole here, while this rank holds
    only `part` of W_0: the forward sums each rank's part and all-reduces (every rank gets R); the backward, inside
    `regather` (W whole again), all-gathers W_0 into one transient matrix, turns it into D = W - W_0 in place and
    returns dR/dW = 2 D, the same on every rank, as DeepSpeed expects of a gradient it reduce-scatters."""
    return _PartL2.apply(w, w0_part, part, dtype, regather)
