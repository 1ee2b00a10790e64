"""The part of W_0 each rank holds (`anchorft.rpsft.sharding.held_part`, `take_part`, `gather_whole`,
`l2_penalty_part`) when a matrix's rows (FSDP2) or elements (ZeRO-3) do not divide by the number of ranks.

The rule the code must match is the engine's, not a choice of its own:
- FSDP2 shards a parameter's rows as `torch.chunk` does (DTensor's `Shard(0)`): ceil(m / world) rows a rank, so the
  last ranks hold fewer rows, or none (7 rows over 4 ranks: 2, 2, 2, 1; 5 over 4: 2, 2, 1, 0; `torch.chunk` then
  returns fewer chunks than ranks, and FSDP2 gives the others an empty shard). The reference here is the shard
  `fully_shard` itself hands each rank;
- DeepSpeed ZeRO-3 pads the flattened matrix to a multiple of the ranks and gives each an equal slice
  (`partition_parameters._padding_size`; `ds_tensor.ds_numel` = ceil(m n / world)): rank r holds the elements
  [r size, (r + 1) size) that exist.

In-process, each rank is played in turn on torch's fake process group (a collective leaves its tensors as they
are: an all-reduce returns this rank's partial sum, which the test adds over the ranks); an all-gather is played
from what every rank sends (`_gather_everywhere`). One 2-process run (gloo, slow) builds the anchor where training
builds it, on a model FSDP2 has sharded, with a vocabulary of 301 rows, and checks it against one process.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from anchorft.rpsft.sharding import Part, gather_whole, held_part, l2_penalty_part, take_part

WORLDS = (2, 3, 4, 5, 8)
ROWS = (1, 2, 3, 4, 5, 7, 9, 11, 16, 301)  # every remainder mod the worlds above, fewer rows than ranks included
COLS = 3
_MESHES = itertools.count()


@pytest.fixture
def no_process_group():
    if dist.is_initialized():  # pragma: no cover - the tests run in a process of their own
        pytest.skip("a process group is already initialized in this process")


@contextlib.contextmanager
def _as_rank(world: int, rank: int):
    """This process as rank `rank` of `world` on torch's fake process group, with a 1-D CPU mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        # a mesh name of its own: DTensor's sharding cache compares meshes without their rank, and would hand an
        # earlier rank's mesh (so its offsets) to the shards made now
        yield init_device_mesh("cpu", (world,), mesh_dim_names=(f"rows{next(_MESHES)}",))
    finally:
        dist.destroy_process_group()


def _matrix(m: int, n: int = COLS) -> torch.Tensor:
    return torch.arange(m * n, dtype=torch.float32).view(m, n) + 0.5


def _chunk_rows(m: int, world: int, rank: int) -> range:
    """The rows `torch.chunk` gives rank `rank` of `world` (none past the chunks it returns)."""
    chunks = torch.chunk(torch.arange(m), world)
    return range(int(chunks[rank][0]), int(chunks[rank][-1]) + 1) if rank < len(chunks) else range(m, m)


def _gather_everywhere(held: list[tuple[torch.Tensor, Part]], shape, monkeypatch) -> list[torch.Tensor]:
    """`gather_whole` on every rank in turn, its all-gather played from what the ranks send: a first pass records
    each rank's buffer, the second hands every rank their concatenation (all_gather_into_tensor's result)."""
    sent: list[torch.Tensor] = []
    monkeypatch.setattr(dist, "all_gather_into_tensor", lambda out, buf, group=None: sent.append(buf.clone()))
    for local, part in held:
        gather_whole(local, part, shape)
    assert len({b.numel() for b in sent}) == 1  # all_gather_into_tensor takes one size from every rank

    def play(out, buf, group=None):
        assert out.numel() == len(sent) * buf.numel()
        out.copy_(torch.cat(sent))

    monkeypatch.setattr(dist, "all_gather_into_tensor", play)
    return [gather_whole(local, part, shape) for local, part in held]


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_parts_of_w0_are_the_rows_fully_shard_gives_each_rank(world, no_process_group, monkeypatch):
    """Each rank's part of W_0 is exactly the rows FSDP2 gave its weight (torch.chunk's, ceil(m / world) a rank,
    the last ranks short or empty), the parts laid end to end are W_0, and gathering them gives W_0 on every
    rank."""
    from torch.distributed.fsdp import fully_shard

    held: dict[int, list[tuple[torch.Tensor, Part]]] = {m: [] for m in ROWS}
    for rank in range(world):
        with _as_rank(world, rank) as mesh:
            for m in ROWS:
                w0 = _matrix(m)
                layer = nn.Linear(COLS, m, bias=False)
                with torch.no_grad():
                    layer.weight.copy_(w0)
                fully_shard(layer, mesh=mesh)
                rows = _chunk_rows(m, world, rank)
                assert torch.equal(layer.weight.to_local(), w0[rows.start : rows.stop])  # FSDP2 shards as torch.chunk
                part = held_part(layer.weight)
                assert part is not None
                assert (part.start, part.stop) == (rows.start * COLS, rows.stop * COLS), (m, rank)
                size = math.ceil(m / world) * COLS
                assert (part.size, part.numel, part.world, part.cols) == (size, m * COLS, world, COLS)
                local = take_part(w0, part)
                assert torch.equal(local, layer.weight.to_local()), (m, rank)  # W_0's rows where W's are
                held[m].append((local, part))
    for m, parts in held.items():
        w0 = _matrix(m)
        assert torch.equal(torch.cat([local for local, _ in parts]), w0), m
        for got in _gather_everywhere(parts, w0.shape, monkeypatch):
            assert torch.equal(got, w0), m


def _zero3_param(w0: torch.Tensor, world: int, rank: int) -> nn.Parameter:
    """A stand-in for a ZeRO-3 parameter as DeepSpeed partitions it: an empty placeholder, the logical shape, and
    this rank's equal slice of the flattened matrix padded to a multiple of `world` (its `ds_tensor`)."""
    size = math.ceil(w0.numel() / world)
    flat = torch.cat([w0.reshape(-1), w0.new_zeros(size * world - w0.numel())])
    p = nn.Parameter(torch.empty(0))
    p.ds_id, p.ds_shape, p.ds_process_group = 0, tuple(w0.shape), None
    p.ds_tensor = flat[rank * size : (rank + 1) * size].clone()
    p.ds_tensor.ds_numel = size
    return p


@pytest.mark.parametrize("world", WORLDS)
def test_zero3_parts_of_w0_and_their_l2_penalty(world, no_process_group, monkeypatch):
    """ZeRO-3: each rank holds the elements of its flat slice that exist (the last slices short or empty), the
    parts laid end to end are W_0 flattened and gather back to it, and `l2_penalty_part`'s per-rank sums add to
    ||W - W_0||^2 with the gradient 2 (W - W_0) on every rank."""
    shapes = [(m, COLS) for m in ROWS] + [(5, 5), (3, 1), (1, 1)]
    held: dict[tuple[int, int], list[tuple[torch.Tensor, Part]]] = {s: [] for s in shapes}
    for rank in range(world):
        with _as_rank(world, rank):
            for shape in shapes:
                w0 = _matrix(*shape)
                numel, size = w0.numel(), math.ceil(w0.numel() / world)
                p = _zero3_param(w0, world, rank)
                part = held_part(p)
                start = min(rank * size, numel)
                got = (part.start, part.stop, part.size, part.numel, part.world, part.cols)
                assert got == (start, min(start + size, numel), size, numel, world, 0), (shape, rank)
                local = take_part(w0, part)
                assert torch.equal(local, p.ds_tensor[: part.stop - part.start]), (shape, rank)  # no padding
                held[shape].append((local, part))
    g = torch.Generator().manual_seed(0)
    for shape, parts in held.items():
        w0 = _matrix(*shape)
        assert torch.equal(torch.cat([local for local, _ in parts]), w0.reshape(-1)), shape
        for got in _gather_everywhere(parts, shape, monkeypatch):
            assert torch.equal(got, w0), shape
        # the penalty: the all-reduce leaves each rank its own sum (the fake group), added here over the ranks;
        # the backward's all-gather is played as above
        w = (w0 + torch.randn(shape, generator=g)).requires_grad_()
        monkeypatch.setattr(dist, "all_reduce", lambda t, group=None: None)
        sums = []
        for local, part in parts:
            r = l2_penalty_part(w, local, part)
            (grad,) = torch.autograd.grad(r, w)
            sums.append(float(r))
            torch.testing.assert_close(grad, 2 * (w - w0).detach(), rtol=0, atol=1e-6)
        assert sum(sums) == pytest.approx(float((w - w0).pow(2).sum()), rel=1e-6), shape


@pytest.mark.parametrize("world", [2, 3, 4])
def test_l2_anchor_placed_on_fsdp2_shards_of_an_odd_vocabulary(rp, world, no_process_group):
    """The L2 anchor of a Llama with 301 vocabulary rows (and 48 MLP rows, 16 k/v rows), placed on FSDP2 shards as
    the trainer places an anchor (`to(model=)`): every rank holds W_0 for the rows of its weights, the ranks'
    penalties add to the one-process penalty and each rank's gradient is its rows of the one-process gradient."""
    from torch.distributed.fsdp import fully_shard

    from anchorft.rpsft.anchor import SubspaceAnchor

    base = rp.tiny_model("llama", 301)
    anchor = SubspaceAnchor.from_model(base, rank=10**6)  # every matrix in the L2 fallback: W_0 stored
    assert all(e.fallback for e in anchor.entries) and "model.embed_tokens.weight" in {e.name for e in anchor.entries}
    moved = copy.deepcopy(base)
    rp.perturb(moved)
    ref = copy.deepcopy(moved)
    want = copy.deepcopy(anchor).add_penalty_grad_(ref, 3.0)
    want_grads = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
    assert want["penalty"] > 0 and len(want_grads) == len(anchor.entries)
    total = 0.0
    for rank in range(world):
        with _as_rank(world, rank) as mesh:
            m = copy.deepcopy(moved)
            for layer in m.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(m, mesh=mesh)
            a = copy.deepcopy(anchor).to(model=m)
            params = dict(m.named_parameters())
            for e in a.entries:
                rows = _chunk_rows(e.shape[0], world, rank)
                assert e.w0_part is not None and e.w0_part.cols == e.shape[1], e.name
                assert torch.equal(e.w0, anchor.entries[a.entries.index(e)].w0[rows.start : rows.stop]), e.name
                params[e.name].grad = torch.zeros_like(params[e.name])
            total += a.add_penalty_grad_(m, 3.0)["penalty"]  # this rank's sum (the fake all-reduce adds nothing)
            for name, g in want_grads.items():
                rows = _chunk_rows(g.shape[0], world, rank)
                torch.testing.assert_close(params[name].grad.to_local(), g[rows.start : rows.stop], msg=name)
    assert total == pytest.approx(want["penalty"], rel=1e-5)


@pytest.mark.slow
def test_anchor_built_on_fsdp2_shards_of_an_odd_vocabulary_equals_one_process(rp, tmp_path):
    """2 processes (gloo): the anchor built from a model FSDP2 has sharded (as the trainer builds it, after
    `accelerator.prepare`), on a Llama whose 301 vocabulary rows (and 51 MLP rows) do not divide by 2: the L2
    anchor (W_0 held by rows) and a rank-5 block anchor give, once every weight moved, the penalty and gradient of
    the same anchors in one process, and the L2 anchor saved from its parts holds the whole W_0."""
    proc = rp.torchrun(__file__, str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    res = json.loads((tmp_path / "uneven.json").read_text())
    assert res["world"] == 2 and res["odd_rows"] >= 3  # embed_tokens, lm_head, gate / up projections
    for kind in ("l2", "block"):
        got, want = res[kind]["got"], res[kind]["want"]
        assert want > 0 and got == pytest.approx(want, rel=1e-5), kind
        assert res[kind]["grad_err"] < 1e-5, kind
    assert res["l2"]["held_rows_ok"] and res["l2"]["saved_err"] == 0


def _worker(out: str) -> None:
    """The 2-process run of `test_anchor_built_on_fsdp2_shards_of_an_odd_vocabulary_equals_one_process`."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from anchorft.rpsft.anchor import SubspaceAnchor
    from conftest import tiny_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    kw = dict(hidden=40, inter=51)
    delta_gen = torch.Generator().manual_seed(1)
    base = tiny_model("llama", 301, **kw)
    deltas = {n: 0.05 * torch.randn(p.shape, generator=delta_gen) for n, p in base.named_parameters()}
    res: dict = {"world": world, "odd_rows": sum(p.shape[0] % world != 0 for p in base.parameters() if p.dim() == 2)}
    for kind, k in (("l2", 10**6), ("block", 5)):
        ref = copy.deepcopy(base)
        want_anchor = SubspaceAnchor.from_model(ref, rank=k)
        m = copy.deepcopy(base)
        for layer in m.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        anchor = SubspaceAnchor.from_model(m, rank=k)  # from the shards, as on_train_begin builds it
        params = dict(m.named_parameters())
        with torch.no_grad():
            for n, p in ref.named_parameters():
                p.add_(deltas[n])
                rows = torch.chunk(deltas[n], world)
                params[n].to_local().add_(rows[rank] if rank < len(rows) else deltas[n][:0])
                params[n].grad = torch.zeros_like(params[n])
        want = want_anchor.add_penalty_grad_(ref, 3.0)
        got = anchor.add_penalty_grad_(m, 3.0)
        grad_err = 0.0
        for n, q in ref.named_parameters():
            if q.grad is not None:
                full = params[n].grad.full_tensor()
                grad_err = max(grad_err, float((full - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-12)))
        res[kind] = {"got": got["penalty"], "want": want["penalty"], "grad_err": grad_err}
        if kind == "l2":
            held_ok = True
            for e, w in zip(anchor.entries, want_anchor.entries):
                rows = torch.chunk(w.w0, world)
                held_ok &= e.w0_part is not None and torch.equal(e.w0, rows[rank] if rank < len(rows) else w.w0[:0])
            flags = torch.tensor([int(held_ok)])
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            path = os.path.join(out, "anchor_l2")
            anchor.save(path, write=rank == 0)  # the parts gathered whole: every rank joins, rank 0 writes
            dist.barrier()
            saved = SubspaceAnchor.load(path)
            res[kind]["held_rows_ok"] = bool(flags.item())
            errs = [float((s.w0 - w.w0).abs().max()) for s, w in zip(saved.entries, want_anchor.entries)]
            res[kind]["saved_err"] = max(errs)
    if rank == 0:
        with open(os.path.join(out, "uneven.json"), "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _worker(sys.argv[1])


# ---- the penalty's chain rule and dtypes, the layouts refused, the whole matrix, the wrappers ----


def test_zero3_penalty_follows_the_upstream_gradient_and_its_dtype(no_process_group, monkeypatch):
    """`l2_penalty_part` inside a larger loss (3 R: the gradient 6 (W - W_0)), summed in the dtype asked for
    (float64 here, for float32 weights: equal to a float64 sum of the same elements), its gradient in W's dtype."""
    world, shape = 3, (7, COLS)
    w0 = _matrix(*shape)
    w = (w0 + torch.randn(shape, generator=torch.Generator().manual_seed(1))).requires_grad_()

    def all_gather(out, buf, group=None):  # what the ranks send: W_0 flattened, then the padding
        out.zero_()[: w0.numel()] = w0.reshape(-1).to(out.dtype)

    monkeypatch.setattr(dist, "all_reduce", lambda t, group=None: None)  # each rank's own sum, added below
    monkeypatch.setattr(dist, "all_gather_into_tensor", all_gather)
    sums = []
    for rank in range(world):
        with _as_rank(world, rank):
            part = held_part(_zero3_param(w0, world, rank))
            r = l2_penalty_part(w, take_part(w0, part), part, dtype=torch.float64)
            assert r.dtype == torch.float64
            exact = (w.detach().double() - w0.double()).reshape(-1)[part.start : part.stop]
            assert r.item() == exact.square().sum().item()
            (grad,) = torch.autograd.grad(3 * r, w)
            assert grad.dtype == torch.float32
            torch.testing.assert_close(grad, 6 * (w - w0).detach(), rtol=0, atol=1e-5)
            sums.append(r.item())
    assert sum(sums) == pytest.approx((w.detach().double() - w0.double()).pow(2).sum().item(), rel=1e-12)


def test_layouts_other_than_fsdp2_rows_are_refused_in_one_line(no_process_group):
    from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor

    from anchorft.rpsft.sharding import local_rows

    with _as_rank(2, 0) as mesh:
        cols = distribute_tensor(_matrix(4, 4), mesh, [Shard(1)])
        with pytest.raises(ValueError) as e:
            local_rows(cols)
        assert str(e.value) == "anchor: parameter sharded on dim 1; only row sharding is supported"
        partial = DTensor.from_local(_matrix(4, 4), mesh, [Partial()], run_check=False)
        with pytest.raises(ValueError) as e:
            local_rows(partial)
        assert str(e.value) == (
            f"anchor: unsupported DTensor layout {tuple(partial.placements)}; expected Shard(0) on a 1-D mesh (FSDP2)"
        )


def test_full_matrix_of_a_sharded_tensor_is_its_whole_plain_matrix():
    """A DTensor (anything with `full_tensor`) gives its whole matrix; a plain tensor itself, detached."""
    from anchorft.rpsft.sharding import full_matrix

    w0 = _matrix(5)

    class Sharded:  # a stand-in: the fake process group's all-gather would return this rank's rows twice
        def detach(self):
            return self

        def full_tensor(self):
            return w0

    assert full_matrix(Sharded()) is w0
    p = nn.Parameter(w0.clone())
    got = full_matrix(p)
    assert not got.requires_grad and torch.equal(got, w0)


def test_unwrap_takes_the_model_out_of_every_wrapper():
    from anchorft.rpsft.sharding import unwrap

    inner = nn.Linear(2, 2)

    class Wrapper(nn.Module):
        def __init__(self, module: nn.Module):
            super().__init__()
            self.module = module

    assert unwrap(Wrapper(Wrapper(inner))) is inner and unwrap(inner) is inner
