"""The stop in a group of processes, in one process: `distributed()` reading a stand-in `torch.distributed` module,
the agreement asked only by `check(agree=True)`, the handler that only records in a group, and each exception's
exact type (a `KeyboardInterrupt` caught as such, so that a wrong type fails the test instead of stopping pytest).
Written for the mutants of `anchorft.stop` that the other stop tests left alive (docs/testing.md); the real
2-process agreement is tests/rpsft/test_train_signals.py's (`make test-slurm`)."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from anchorft import stop

pytestmark = pytest.mark.usefixtures("stop_handlers")  # tests/conftest.py


def _returns(fn, *args) -> None:
    """`fn(*args)` must return: a KeyboardInterrupt it raises fails the test (instead of ending pytest's session)."""
    try:
        fn(*args)
    except KeyboardInterrupt as e:
        pytest.fail(f"{fn.__name__} raised {type(e).__name__}")


class _Dist:
    """A stand-in `torch.distributed` module: a group of `world` processes where the other ranks recorded `other`;
    each all-reduce is logged."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, world: int = 2, other: int = 0, available: bool = True, initialized: bool = True):
        self.world, self.other, self.available, self.initialized = world, other, available, initialized
        self.reduced: list = []

    def is_available(self) -> bool:
        return self.available

    def is_initialized(self) -> bool:
        return self.initialized

    def get_world_size(self) -> int:
        if self.world is None:
            raise RuntimeError("the group is being torn down")
        return self.world

    def get_backend(self) -> str:
        return "gloo"

    def all_reduce(self, flag, op) -> None:
        self.reduced.append((flag.dtype, str(flag.device), op))
        flag.clamp_(min=self.other)


@pytest.fixture
def group(monkeypatch):
    def set_group(**kw) -> _Dist:
        dist = _Dist(**kw)
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        return dist

    return set_group


def test_distributed_is_the_module_only_in_a_group_of_more_than_one(group, monkeypatch):
    dist = group(world=2)
    assert stop.distributed() is dist
    dist = group(world=3)
    assert stop.distributed() is dist
    for kw in (dict(world=1), dict(available=False), dict(initialized=False), dict(world=None)):
        group(**kw)
        assert stop.distributed() is None, kw
    monkeypatch.delitem(sys.modules, "torch.distributed")
    assert stop.distributed() is None


def test_agreed_reduces_this_ranks_record_by_max_on_the_cpu_and_records_the_groups(group):
    dist = group(other=signal.SIGINT)
    import torch

    assert stop.agreed() == signal.SIGINT and stop.requested() == signal.SIGINT
    assert dist.reduced == [(torch.int64, "cpu", dist.ReduceOp.MAX)]
    stop.clear()
    group(other=0)
    assert stop.agreed() == 0 and stop.requested() == 0


def test_check_agrees_only_when_asked(group):
    dist = group(other=signal.SIGTERM)  # another rank was told to stop; this one was not
    _returns(stop.check)  # not a collective: this rank's own record (none)
    assert dist.reduced == []
    with pytest.raises(KeyboardInterrupt) as e:
        stop.check(agree=True)
    assert type(e.value) is stop.Terminated and len(dist.reduced) == 1


def test_check_alone_leaves_the_stop_to_the_agreed_checks_in_a_group(group):
    stop.record(signal.SIGTERM)
    group()
    _returns(stop.check_alone)  # in a group: returns, the next agreed check stops every rank
    group(world=1)
    with pytest.raises(KeyboardInterrupt) as e:
        stop.check_alone()
    assert type(e.value) is stop.Terminated


@pytest.mark.parametrize("signum, kind", [(signal.SIGTERM, stop.Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_check_and_the_handler_raise_the_exception_of_the_signal(signum, kind):
    stop.record(signum)
    with pytest.raises(KeyboardInterrupt) as e:
        stop.check()
    assert type(e.value) is kind
    stop.clear()
    with pytest.raises(KeyboardInterrupt) as e:
        stop._handler(signum, None)
    assert type(e.value) is kind and stop.requested() == signum


def test_the_handler_records_without_raising_in_a_group_or_when_deferred(group):
    group()
    _returns(stop._handler, signal.SIGTERM, None)  # in a group: a raise mid-collective leaves the others waiting
    assert stop.requested() == signal.SIGTERM
    stop.clear()
    group(world=1)
    with stop.deferred():
        _returns(stop._handler, signal.SIGINT, None)
    assert stop.requested() == signal.SIGINT


def test_take_back_from_another_thread_after_an_install_does_nothing():
    stop.install()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a library's own handler
    errors = []

    def take_back() -> None:
        try:
            stop.take_back()
        except Exception as e:  # signal.signal off the main thread raises ValueError
            errors.append(e)

    t = threading.Thread(target=take_back)
    t.start()
    t.join()
    assert errors == [] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
