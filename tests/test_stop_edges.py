"""The stop's small rules in one process (anchorft.stop): which exception a signal gives, what `clear` and `check`
do by default, `install` and `take_back` off the main thread and with SIGINT taken by someone else, and
`distributed` in no group. Written for the mutants the fault-injection tests left alive (docs/testing.md); the
group's agreement is the 2-process signal test's (tests/rpsft/test_train_signals.py, `make test-slurm`)."""

from __future__ import annotations

import signal
import threading

import pytest

from anchorft import stop

pytestmark = pytest.mark.usefixtures("stop_handlers")  # tests/conftest.py


def test_sigterm_gives_terminated_and_sigint_a_keyboard_interrupt():
    assert type(stop.interrupt_for(signal.SIGTERM)) is stop.Terminated
    assert type(stop.interrupt_for(signal.SIGINT)) is KeyboardInterrupt


def test_clear_forgets_and_check_without_a_record_returns():
    stop.record(signal.SIGINT)
    stop.clear()
    assert stop.requested() == 0
    stop.check()  # nothing recorded: returns


def test_check_raises_the_recorded_signals_exception_without_asking_a_group():
    stop.record(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as e:  # caught as such: a wrong type fails here, not pytest's session
        stop.check()
    assert type(e.value) is stop.Terminated


def test_install_off_the_main_thread_installs_nothing_and_returns_a_no_op():
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("restore", stop.install()))
    t.start()
    t.join()
    assert got["restore"]() is None
    assert signal.getsignal(signal.SIGTERM) is not stop._handler and stop._installed == []


def test_install_leaves_a_sigint_handled_by_someone_else():
    mine = lambda s, f: None  # noqa: E731
    signal.signal(signal.SIGINT, mine)
    restore = stop.install()
    assert signal.getsignal(signal.SIGTERM) is stop._handler and signal.getsignal(signal.SIGINT) is mine
    assert stop._installed == [signal.SIGTERM]
    restore()
    assert signal.getsignal(signal.SIGTERM) is not stop._handler and stop._installed == []


def test_take_back_only_where_install_ran_and_only_on_the_main_thread():
    stop.take_back()  # nothing installed: nothing taken
    assert signal.getsignal(signal.SIGTERM) is not stop._handler
    stop.install()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a library's own handler
    t = threading.Thread(target=stop.take_back)
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # not from another thread
    stop.take_back()
    assert signal.getsignal(signal.SIGTERM) is stop._handler


def test_distributed_is_none_in_one_process_even_with_torch_distributed_loaded():
    import torch.distributed  # noqa: F401

    assert stop.distributed() is None
    stop.record(signal.SIGTERM)
    assert stop.agreed() == signal.SIGTERM  # one process: its own record
