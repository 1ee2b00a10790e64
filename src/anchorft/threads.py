"""The CPU thread policy of the `anchorft` command: runs that share a machine do not collapse.

Applied once at the command's entry (`anchorft.cli.main`), before torch is imported; library code sets threads
only through `pinned_threads` (below). OpenMP reads both settings once, when it loads, so they are chosen at start
from the `anchorft` processes of this user live then (counted through one file per process in a folder of the temp
directory, pruned of dead processes):

- torch's intra-op thread count (OMP_NUM_THREADS): the usable cores divided by those processes, at least 1. A
  process started while another runs takes its share; the one already running keeps its count.
- OpenMP's wait policy PASSIVE, only when another `anchorft` process is live: an idle worker thread then sleeps
  instead of spinning, so the threads of two processes on the same cores do not burn each other's time waiting at
  every parallel region. A run alone keeps OpenMP's default (spin, then sleep), which is faster when nothing
  else wants the cores.

A computation whose result is cached or compared across runs (the testbed's pretraining, each fine-tune of a
comparison) runs under `pinned_threads(n)` with the count its config names: torch's CPU kernels split their sums
by thread, so the weights after a 1,700-step pretraining differ between one and two threads; pinned, the same
config gives the same weights on any machine and at any load (slower when the cores are oversubscribed).

Values the user set (OMP_WAIT_POLICY, OMP_NUM_THREADS, a command's --threads) win. ANCHORFT_THREAD_POLICY=off
leaves torch's and OpenMP's defaults. benchmarks/bench_concurrent_pretrain.py measures the effect (docs/toy.md).
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["POLICY_ENV", "available_cores", "choose_threads", "count_processes", "apply_thread_policy"]
__all__ += ["keep_torch_threads", "pinned_threads"]

POLICY_ENV = "ANCHORFT_THREAD_POLICY"


def available_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def choose_threads(cores: int, processes: int) -> int:
    """Intra-op threads for one of `processes` concurrent runs on `cores` cores: an equal share, at least 1."""
    return max(1, cores // max(1, processes))


def _registry() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"anchorft-{uid}" / "procs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def count_processes(register: bool = True, folder: Path | None = None) -> int:
    """The live `anchorft` processes of this user, this one included when `register` (it is then listed until it
    exits); stale entries of processes that died are removed."""
    folder = folder or _registry()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        me = folder / str(os.getpid())
        if register:
            me.touch()
            atexit.register(lambda: me.unlink(missing_ok=True))
        live = 0
        for p in folder.iterdir():
            if not p.name.isdigit():
                continue
            if _alive(int(p.name)):
                live += 1
            else:
                p.unlink(missing_ok=True)
        return max(live, 1)
    except OSError:  # an unwritable temp directory: assume this process runs alone
        return 1


def apply_thread_policy(
    environ: dict | None = None, *, cores: int | None = None, registry: Path | None = None
) -> dict | None:
    """Set torch's thread count, and the OpenMP wait policy when another run is live, for this process (module
    docstring); returns what was chosen ({"cores", "processes", "threads", "wait"}), or None when
    ANCHORFT_THREAD_POLICY=off. `cores` and `registry` replace the machine's core count and the process
    registry's folder (tests)."""
    env = os.environ if environ is None else environ
    if env.get(POLICY_ENV, "").lower() == "off" or "torch" in sys.modules:
        return None  # torch already started (a program calling cli.main): its owner chose the threads
    cores = available_cores() if cores is None else cores
    procs = count_processes(folder=registry)
    if procs > 1:
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("OMP_NUM_THREADS", str(choose_threads(cores, procs)))
    return {
        "cores": cores,
        "processes": procs,
        "threads": int(env["OMP_NUM_THREADS"]),
        "wait": env.get("OMP_WAIT_POLICY"),
    }


def keep_torch_threads() -> Callable[[], None]:
    """A function that puts torch's intra-op thread count back to what it is now (before torch is loaded: the count
    it will take from OMP_NUM_THREADS). A command that sets its own count (`--threads`) then leaves the next command
    run in the same process (`python -m anchorft.demo`, a program calling `anchorft.cli.main`) the count it found,
    not its own: the W2S commands' one thread would otherwise become the testbed's pretraining and worker count."""
    torch = sys.modules.get("torch")
    n = torch.get_num_threads() if torch is not None else int(os.environ.get("OMP_NUM_THREADS", "") or 0)

    def restore() -> None:
        loaded = sys.modules.get("torch")
        if n > 0 and loaded is not None and loaded.get_num_threads() != n:
            loaded.set_num_threads(n)

    return restore


@contextmanager
def pinned_threads(n: int) -> Iterator[None]:
    """Run the block with torch's intra-op thread count set to `n` (>= 1), then put the previous count back: for a
    computation whose numbers must not depend on the machine's cores or load (module docstring)."""
    import torch  # lazy: loads torch

    if n < 1:
        raise ValueError(f"threads: must be >= 1, got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
