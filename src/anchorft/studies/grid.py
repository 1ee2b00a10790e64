"""One grid runner for the studies: cells (points x seeds, x pretrained bases where a study has them), each run
once, recorded as it finishes, resumed after a stop.

A study lists its `Cell`s and gives one top-level function `fn(cell) -> dict` (picklable: worker processes are
spawned); `Grid(folder, context).run(cells, fn, executor)` runs the cells not yet recorded and returns
{cell name: result} for all of them, in the cells' order.

- The record: FOLDER/cells.jsonl, one line per finished cell {"key", "name", "result"}, appended and flushed when
  the cell returns. A cell's key hashes the grid's `context` (what every cell's result depends on: the study's
  config) with the cell's own spec, so a record is reused only for the same computation; a line cut short by a
  kill is ignored (that cell runs again).
- Lost cells: a cell an executor loses with its worker (a cluster's node gone, after its retries) is recorded as
  {"key", "name", "failed": why}; the study runs every other cell, then stops with one line naming the lost ones
  (`CellLost`). A failed line is not a result: the same command reruns exactly the lost cells.
- Threads: the executor runs every cell on `threads` torch threads (`anchorft.threads.pinned_threads`), whatever
  the number of workers or the machine's cores: a cell's numbers do not depend on how many run at once.
- Signals (`anchorft.stop`): at a SIGTERM or Ctrl-C the queued cells do not start, the cells in flight are told
  to stop (a worker process gets the signal, a Ray task sees a flag it watches; each stops at its cell's next safe
  point, and a Ray task that has not within 10 s is cancelled), and every cell that finished before its worker
  stopped is recorded; then the study raises the signal (exit 143 or 130). The worker processes handle the signal
  themselves (the pool's initializer), so a signal sent to the whole process group (SLURM's
  `scancel --signal=TERM`, Ctrl-C in a terminal) stops them as cleanly as one sent to the parent: temporary
  folders removed, nothing half written.
- Executors: `InProcess` (one cell at a time, in this process), `LocalProcesses` (`workers` spawned processes) and
  `RayTasks` (each cell a Ray task on a cluster, `RayCluster`). Another executor only has to implement
  `Executor.map`. The record stays with the grid, in its folder, whichever executor ran a cell: a study started
  with one executor resumes with another.

The run folder's life cycle (claim, reuse, finish, interrupt) stays with `anchorft.runs`: the command claims the
folder once, and the grid works inside it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import multiprocessing as mp
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from anchorft import stop
from anchorft.errors import CellLost
from anchorft.runs import config_hash
from anchorft.threads import pinned_threads

__all__ = [
    "Cell", "Lost", "Executor", "InProcess", "LocalProcesses", "RayCluster", "RayTasks", "Grid", "RECORD",
    "executor_for", "check_workers", "ExecutorArguments",
]  # fmt: skip

RECORD = "cells.jsonl"
CellFn = Callable[["Cell"], dict]


@dataclass(frozen=True)
class Cell:
    """One unit of a study: `name` unique in its grid (e.g. "sft-seed0"), `spec` JSON-able, everything the cell's
    result depends on beyond the grid's context."""

    name: str
    spec: dict[str, Any] = field(default_factory=dict)

    def key(self, context: Any = None) -> str:
        """Hash of the grid's context and this cell (name and spec): the record's key."""
        return config_hash({"context": context, "name": self.name, "spec": self.spec})


@dataclass(frozen=True)
class Lost:
    """What an executor yields for a cell it lost with its worker (after its retries): why, in one line."""

    why: str


_WORKER_DEFERRAL: list = []  # a spawned worker's `stop.deferred()`, entered once by `_worker_init`
_POLL = 0.25  # seconds between looks at the signal record while cells run elsewhere (the stop's latency)
_GRACE = 10.0  # seconds a Ray task has to reach a safe point after a stop before it is cancelled


def _run_pinned(fn: CellFn, threads: int, cell: Cell) -> dict:
    stop.check()  # a signal that came while this process waited for the cell: it does not start
    with pinned_threads(threads):
        return fn(cell)


def _worker_init() -> None:
    """A spawned worker's handler (the pool's initializer): SIGTERM and Ctrl-C recorded (`anchorft.stop`), and the
    cell stops at its next safe point: every long loop of the library has one (tests/test_stop_loops.py). Record
    only, never a raise where the signal lands: a worker between cells waits in the pool's own queue code, where a
    raise would crash it with a traceback; a worker's stop never needs to be faster than a step."""
    stop.install()
    _WORKER_DEFERRAL.append(stop.deferred())  # held (and so in force) for the life of the worker
    _WORKER_DEFERRAL[-1].__enter__()


def _tell(pids: list[int], signum: int) -> None:
    """Send `signum` to the worker processes `pids` that are still there."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class Executor(Protocol):
    def map(self, fn: CellFn, cells: list[Cell]) -> Iterator[tuple[Cell, dict | Lost]]:
        """Run `fn` on every cell; yield (cell, result) as each finishes (any order), (cell, Lost) for a cell lost
        with its worker; an error raised by a cell itself propagates."""
        ...


@dataclass
class InProcess:
    """Every cell in this process, one at a time, on `threads` torch threads."""

    threads: int = 1

    def map(self, fn: CellFn, cells: list[Cell]) -> Iterator[tuple[Cell, dict]]:
        for cell in cells:  # the cell's own loops are the safe points (anchorft.stop); and one before each cell
            yield cell, _run_pinned(fn, self.threads, cell)


@dataclass
class LocalProcesses:
    """`workers` spawned processes, each cell on `threads` torch threads; `fn` must be picklable (a top-level
    function, or a functools.partial of one)."""

    workers: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1 or self.threads < 1:
            raise ValueError(f"workers and threads must be >= 1, got {self.workers} and {self.threads}")

    def map(self, fn: CellFn, cells: list[Cell]) -> Iterator[tuple[Cell, dict]]:
        run = functools.partial(_run_pinned, fn, self.threads)
        pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"), initializer=_worker_init)
        stopping = False
        try:
            # the handler records only while the workers run the cells: the stop is this loop's (module docstring)
            with stop.deferred():
                pending = {pool.submit(run, c): c for c in cells}
                while pending:
                    if stop.requested() and not stopping:
                        stopping = True
                        for fut in pending:  # queued cells never start; a running one is not cancelled here
                            fut.cancel()
                        _tell([p.pid for p in (pool._processes or {}).values()], stop.requested())
                    done, _ = wait(pending, timeout=_POLL, return_when=FIRST_COMPLETED)
                    for fut in done:
                        cell = pending.pop(fut)
                        if fut.cancelled():
                            continue
                        err = fut.exception()
                        if err is None:
                            yield cell, fut.result()  # finished (before or after the signal): recorded
                        elif not (stopping or stop.requested()):
                            raise err
                        # else: stopped by the signal, or lost with a worker it killed: runs again on resume
        finally:
            # stopped (a signal, a failed cell) or done: the queued cells are dropped, not run unrecorded (the
            # executor's own exit would wait for every one of them); after a failed cell the running ones finish
            pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class RayCluster:
    """Where `RayTasks` runs a study's cells: the Ray cluster at `address` ("HOST:PORT" of its head, "auto" for the
    one this machine has joined, None for a Ray instance started on this machine for the study and stopped after
    it); a cell whose worker process or node dies is run again up to `retries` times. `gpus`: the GPUs each cell
    holds (Ray places a cell only where they are free and shows it only those, through CUDA_VISIBLE_DEVICES; 0: a
    CPU cell, which sees no GPU). `anchorft.studies.ray_probe.probe` checks the address before a study claims its
    folder (`anchorft.commands.flags.cluster_from`)."""

    address: str | None = None
    retries: int = 3
    gpus: float = 0.0
    local: bool = False  # `ray_probe.probe` found no cluster to join: start an instance of its own (address "local")

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries: must be >= 0, got {self.retries}")
        if self.gpus < 0:
            raise ValueError(f"gpus: must be >= 0, got {self.gpus}")
        if importlib.util.find_spec("ray") is None:
            raise ValueError("the ray executor needs Ray: pip install 'anchorft[ray]'")


@dataclass
class ExecutorArguments:
    """Where a study's cells run: the `--executor`, `--address` and `--retries` flags of every study command."""

    executor: str = field(
        default="local",
        metadata={
            "help": "where the cells run: local (this machine's processes) or ray (each cell a Ray task on a cluster; "
            "pip install 'anchorft[ray]'); the record, and so resuming, is the same for both",
            "choices": ("local", "ray"),
        },
    )
    address: str | None = field(
        default=None,
        metadata={
            "help": "with --executor ray: the cluster's head (HOST:PORT), auto (the cluster this machine joined), or "
            "none given: a Ray instance started on this machine for the study"
        },
    )
    retries: int | None = field(
        default=None,
        metadata={"help": "with --executor ray: times a cell lost with its worker or node runs again (default 3)"},
    )

    def cluster(
        self, gpus: float = 0.0, local_only: dict[str, Any] | None = None, **ray_only: Any
    ) -> RayCluster | None:
        """The `RayCluster` of --executor ray, each cell holding `gpus` GPUs (None for local); ValueError for
        --address, --retries or a flag of `ray_only` ({flag: value, None when not given}) without it, a flag of
        `local_only` (same form: `--workers`) with it, or a negative --retries or `gpus`, or Ray not installed."""
        if self.executor == "ray":
            given = [f for f, v in (local_only or {}).items() if v is not None]
            if given:
                raise ValueError(
                    f"{' and '.join(given)}: not with --executor ray (the cluster's free CPUs decide how many cells "
                    "run at once)"
                )
        if self.executor != "ray":
            flags = {"--address": self.address, "--retries": self.retries, **ray_only}
            given = [f for f, v in flags.items() if v is not None]
            if given:
                raise ValueError(f"{' and '.join(given)}: only with --executor ray")
            return None
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"--retries: must be >= 0, got {self.retries}")
        return RayCluster(self.address, 3 if self.retries is None else self.retries, gpus)


class _StopFlag:
    """A study's stop request as a Ray actor (`RayTasks`): the driver raises it at a signal, each running task
    watches it and stops at its cell's next safe point, as a local worker process does at the signal itself."""

    def __init__(self) -> None:
        self.raised = False

    def raise_(self) -> None:
        self.raised = True

    def is_raised(self) -> bool:
        return self.raised


def _run_in(folder: str, fn: CellFn, threads: int, cell: Cell, flag: Any = None) -> dict:
    """A cell on a Ray worker: in the driver's working folder (relative output paths mean the same there; the
    folder must exist at the same path on every node, as on a shared filesystem), on `threads` torch threads. With
    `flag` (a `_StopFlag` actor), a thread looks at it every `_POLL` seconds and, once it is raised, records a
    SIGTERM in this worker (`anchorft.stop`): the cell stops at its next safe point (a queued cell at its start)."""
    import ray

    try:
        os.chdir(folder)
    except OSError as e:
        raise ValueError(f"cell {cell.name}: the study's folder {folder} is not on this node ({e.strerror})") from None
    stop.clear()  # a Ray worker runs task after task: a stop recorded for an earlier one is not this one's
    done = threading.Event()

    def raised() -> bool:
        try:
            return bool(ray.get(flag.is_raised.remote(), timeout=30))
        except Exception:  # the flag gone with its driver: the driver's end cancels this task
            return False

    def watch() -> None:
        while not done.wait(_POLL):
            if raised():
                stop.record(signal.SIGTERM)
                return

    if flag is not None:
        if raised():
            stop.record(signal.SIGTERM)
        threading.Thread(target=watch, daemon=True).start()
    try:
        return _run_pinned(fn, threads, cell)
    finally:
        done.set()
        stop.clear()


@dataclass
class RayTasks:
    """Each cell a Ray task of `threads` CPUs and `cluster.gpus` GPUs (Ray sets OMP_NUM_THREADS to the CPUs in the
    worker, and the cell pins torch's threads to them too), on `cluster`; every cell is submitted at once and Ray
    places them as resources free up. A task lost with its worker or node is retried `cluster.retries` times by
    Ray, then yielded as `Lost` (the other cells go on); an error raised by the cell itself is not retried (it would
    repeat): it stops the study as it does in this process. Cells finished before it are in the record."""

    cluster: RayCluster
    threads: int = 1

    def map(self, fn: CellFn, cells: list[Cell]) -> Iterator[tuple[Cell, dict]]:
        import ray  # lazy: an optional extra, needed only here

        started = not ray.is_initialized()
        restore_env = _own_token() if started and self.cluster.local else (lambda: None)
        if started:  # worker output stays in the cluster's logs (the command's stdout is its results)
            try:
                ray.init(address="local" if self.cluster.local else self.cluster.address, log_to_driver=False,
                         include_dashboard=False, configure_logging=False)  # fmt: skip
            except SystemExit as e:  # ray.init's own SIGTERM handler, installed inside it, exits with status 15
                restore_env()
                if e.code != signal.SIGTERM:
                    raise
                stop.record(signal.SIGTERM)
                raise stop.Terminated() from None
            except BaseException:
                restore_env()
                raise
            finally:
                stop.take_back()  # anchorft's handler: with Ray's a run is marked failed, not interrupted
        task = ray.remote(_run_in).options(
            num_cpus=self.threads, num_gpus=self.cluster.gpus, max_retries=self.cluster.retries, retry_exceptions=False
        )
        # a stop is asked through this flag, not by cancelling the tasks: Ray's own cancel can race a task's reply
        # and crash the driver's core worker (a RAY_CHECK, exit 1); it stays the fallback for a cell that does not
        # stop within _GRACE seconds
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        flag = ray.remote(num_cpus=0)(_StopFlag).options(scheduling_strategy=here).remote()  # on the driver's node
        refs = {task.remote(os.getcwd(), fn, self.threads, c, flag): c for c in cells}
        stopping, cancelled = 0.0, False
        try:
            with stop.deferred():  # the handler records only while the cluster runs the cells (module docstring)
                while refs:
                    if stop.requested() and not stopping:
                        stopping = time.monotonic()
                        flag.raise_.remote()  # running cells stop at their next safe point, queued ones at start
                    if stopping and not cancelled and time.monotonic() - stopping > _GRACE:
                        cancelled = True
                        for ref in refs:  # cells past the grace get a KeyboardInterrupt where they are
                            ray.cancel(ref, force=False)
                    done, _ = ray.wait(list(refs), num_returns=1, timeout=_POLL)
                    if not done:
                        continue
                    cell = refs.pop(done[0])
                    try:
                        result = ray.get(done[0])
                    except (ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError) as e:
                        if stopping or stop.requested():  # stopped by the signal: runs again on resume
                            continue
                        if isinstance(e, ray.exceptions.TaskCancelledError):
                            raise
                        raise (e.cause if isinstance(e.cause, BaseException) else e) from None  # the cell's own
                    except ray.exceptions.RayError as e:  # its worker or node lost, retries spent: the others go on
                        if stopping or stop.requested():
                            continue
                        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                        result = Lost(f"lost after {self.cluster.retries} retries ({type(e).__name__}: {first})")
                    yield cell, result
        finally:  # stopped, failed or done: nothing of this study keeps running on the cluster
            for ref in refs:
                ray.cancel(ref, force=True)
            ray.kill(flag)
            if started:
                ray.shutdown()
                stop.take_back()
                restore_env()


def _own_token() -> Callable[[], None]:
    """A Ray instance of its own: Ray turns token authentication on for it and, unless a token is set, writes one to
    ~/.ray/auth_token, which every later `ray start` of this user then enables (and a driver given an explicit
    address lacks): a one-off token in RAY_AUTH_TOKEN instead (the instance's processes inherit it), no file. Returns
    the function that puts the environment back."""
    keys = ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
    if any(os.environ.get(k) for k in (*keys, "RAY_AUTH_TOKEN_PATH")) or (Path.home() / ".ray/auth_token").exists():
        return lambda: None  # the user's own token or mode: Ray's rules apply
    old = {k: os.environ.get(k) for k in keys}
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

    def restore() -> None:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return restore


def check_workers(workers: int, threads: int = 1) -> None:
    """A clear error for a worker or thread count below 1 (what `executor_for` refuses), before any work."""
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    if threads < 1:
        raise ValueError(f"threads: must be >= 1, got {threads}")


def executor_for(workers: int, threads: int = 1, cluster: RayCluster | None = None) -> Executor:
    """`RayTasks` on `cluster` when given (where the cluster's CPUs, not `workers`, bound the cells at once);
    otherwise `InProcess` for one worker, else `LocalProcesses`."""
    check_workers(workers, threads)
    if cluster is not None:
        return RayTasks(cluster, threads)
    return InProcess(threads) if workers == 1 else LocalProcesses(workers, threads)


class Grid:
    """The cells of one study in `folder`, recorded in FOLDER/cells.jsonl (module docstring)."""

    def __init__(self, folder: str | os.PathLike, context: Any = None):
        self.folder, self.context = Path(folder), context
        self.path = self.folder / RECORD

    def finished(self) -> dict[str, dict]:
        """{key: result} of the cells recorded in the folder (a torn last line ignored)."""
        out: dict[str, dict] = {}
        if not self.path.is_file():
            return out
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "key" in rec and "result" in rec:
                out[rec["key"]] = rec["result"]
        return out

    def _append(self, cell: Cell, result: dict | Lost) -> None:
        rec = {"failed": result.why} if isinstance(result, Lost) else {"result": result}
        line = json.dumps({"key": cell.key(self.context), "name": cell.name, **rec}, default=str)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def run(
        self,
        cells: list[Cell],
        fn: CellFn,
        executor: Executor | None = None,
        *,
        resume: bool = True,
        progress: bool = True,
        desc: str = "grid",
        on_result: Callable[[Cell, dict], None] | None = None,
        kept: Callable[[Cell, dict], bool] | None = None,
    ) -> dict[str, dict]:
        """Run the cells not recorded yet (all of them without `resume`, the record started afresh); call
        `on_result(cell, result)` for each recorded and each new result; return {name: result} in `cells` order.
        `kept(cell, result)`, when given, says whether a recorded cell still stands (for example, its output files
        are still there): a cell it rejects runs again."""
        names = [c.name for c in cells]
        if len(set(names)) != len(names):
            raise ValueError(f"grid: cell names must be unique, got {names}")
        self.folder.mkdir(parents=True, exist_ok=True)
        if not resume:
            self.path.unlink(missing_ok=True)
        done = self.finished()
        results: dict[str, dict] = {}
        todo = []
        for c in cells:
            key = c.key(self.context)
            if key in done and (kept is None or kept(c, done[key])):
                results[c.name] = done[key]
                if on_result:
                    on_result(c, done[key])
            else:
                todo.append(c)

        bar = tqdm(total=len(todo), desc=desc, disable=not progress or not todo)
        lost: dict[str, str] = {}
        for cell, res in (executor or InProcess()).map(fn, todo):  # stop: the executors check (module docstring)
            self._append(cell, res)
            if isinstance(res, Lost):
                lost[cell.name] = res.why
            else:
                results[cell.name] = res
                if on_result:
                    on_result(cell, res)
            bar.update()
        bar.close()
        # a safe point (anchorft.stop): after a signal the executor yields every cell that finished, then ends
        stop.check()
        if lost:
            first, why = next(iter(lost.items()))
            others = f" and {len(lost) - 1} more ({', '.join(list(lost)[1:])})" if len(lost) > 1 else ""
            raise CellLost(
                f"cell {first}{others} {why}; the other cells are recorded in {self.path}: rerun the same command "
                "to run the lost ones"
            )
        return {n: results[n] for n in names}
