"""Signals that always stop the run: SIGTERM (a cluster's stop, before its SIGKILL) and Ctrl-C (SIGINT).

The `anchorft` command's handler does two things: it records the signal here, and (in a single process) raises
`Terminated` or `KeyboardInterrupt` where the program is, so that it unwinds at once. The raise alone is not
enough: library code with a bare `except:` or `except BaseException` between the signal and the run loop
(`datasets` hashing a `Dataset.map`'s arguments is one) swallows it, and the run would go on and be marked
complete. So the run loops also call `check()` at safe points (training steps through
`anchorft.rpsft.stopping.StopOnSignal`, data preparation, model loading, generated tokens and evaluation chunks,
each point of a w2s sweep, `anchorft.runs.finish` before a run is marked complete, `anchorft.cli.main` after a
command returns): a recorded signal raises there again, and the run is marked interrupted with exit 143 (130 for
Ctrl-C).

In a group of processes (torch.distributed) the handler only records: raising in the middle of a collective on
one rank leaves the others waiting for it. The ranks then agree at each training step's end (`agreed()`, a MAX
reduction of the recorded signal), so that every rank stops at the same step.

A ground-floor module (it imports nothing of anchorft, and torch only once a process group exists), so that library
code can check the record without importing the command line.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "record", "requested", "clear", "check", "check_alone", "agreed", "distributed", "install"]
__all__ += ["interrupt_for", "deferred", "take_back"]

_signal: int = 0  # the signal recorded (0: none); SIGTERM wins over SIGINT when both came
_deferred: int = 0  # > 0 inside `deferred()`: the handler records only
_installed: list[int] = []  # the signals `install` handles now (for `take_back`)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that it unwinds as on Ctrl-C (temporary files go, runs are
    marked interrupted)."""


def record(signum: int) -> None:
    """Record `signum` as a request to stop (the strongest one is kept: SIGTERM over SIGINT)."""
    global _signal
    _signal = max(_signal, int(signum))


def requested() -> int:
    """The signal recorded in this process (0 when none): the run must stop."""
    return _signal


def clear() -> None:
    """Forget the recorded signal (a new command in the same process starts afresh)."""
    global _signal
    _signal = 0


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """The exception that stops a run for `signum`: `Terminated` for SIGTERM, else `KeyboardInterrupt`."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def check(agree: bool = False) -> None:
    """A safe point: raise the recorded signal's exception, if one came (it may have been swallowed where it
    landed). `agree`: every process of the group calls this check at the same point, and the signal recorded on
    any of them stops them all (a collective: only where every rank passes)."""
    signum = agreed() if agree else _signal
    if signum:
        raise interrupt_for(signum)


def check_alone() -> None:
    """A safe point of code that ranks may pass unevenly (a model load, a generation batch): `check()` in a single
    process; in a group it leaves the stop to the agreed checks, since a rank that stopped alone would leave the
    others waiting in their next collective."""
    if distributed() is None:
        check()


@contextmanager
def deferred() -> Iterator[None]:
    """Inside this block the handler only records the signal, in a single process too; the code inside stops at its
    own safe points. For loops whose stop must be orderly rather than immediate: a training loop that saves a
    checkpoint at the step's end (`anchorft.rpsft.stopping.StopOnSignal`; raising mid-step would leave the step
    half applied, with nothing saved), a study that cancels its queued cells, tells the running ones to stop and
    records those that finished (`anchorft.studies.grid`). The block's code must reach a `check()` (or test
    `requested()`) within a bounded time: nothing else stops it."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1


def distributed() -> Any:
    """`torch.distributed` when this process is one of a group of more than one, else None (torch is not
    imported here: a process that has not imported it is in no group)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except (RuntimeError, ValueError):  # a group being torn down
        return None
    return None


def agreed(device: Any = None) -> int:
    """The strongest signal recorded on any process of the group (a MAX all-reduce on `device`: the group's
    backend device by default, the current CUDA device under NCCL), recorded here too; in one process, this
    process's record.

    In a group the value returned is the reduction's, the same on every rank, never this process's record read
    again afterwards: a signal landing on one rank between the reduction and the return would otherwise stop that
    rank alone, and the others would wait for it in their next collective. Such a signal stays recorded and is
    agreed on at the next call."""
    dist = distributed()
    if dist is None:
        return _signal
    import torch  # lazy: loads torch

    if device is None:
        device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([_signal], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    signum = int(flag.item())
    if signum:
        record(signum)
    return signum


def _handler(signum: int, frame) -> None:
    record(signum)
    # in a group, raising mid-collective on one rank deadlocks the others; inside `deferred()` the loop stops itself
    if not _deferred and distributed() is None:
        raise interrupt_for(signum)


def install() -> Callable[[], None]:
    """Handle SIGTERM (and SIGINT, unless the process was started with it ignored or handled by someone else):
    record, and in a single process raise. Clears any earlier record. Returns a function that puts the previous
    handlers back. Only the main thread can handle signals: elsewhere nothing is installed."""
    clear()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, _handler)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # a shell's background job ignores it
        old[signal.SIGINT] = signal.signal(signal.SIGINT, _handler)
    _installed[:] = list(old)

    def restore() -> None:
        _installed.clear()
        for signum, handler in old.items():
            signal.signal(signum, handler)

    return restore


def take_back() -> None:
    """Put anchorft's handler back on SIGTERM (and on SIGINT, where `install` took it) without clearing the record:
    after library code installed its own (`ray.init` sets one that exits with status 15, and the run would be
    marked failed, not interrupted). Only in the main thread, and only where `install` ran."""
    if threading.current_thread() is not threading.main_thread() or not _installed:
        return
    for signum in _installed:
        signal.signal(signum, _handler)
