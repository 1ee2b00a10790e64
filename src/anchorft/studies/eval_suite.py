"""`anchorft eval suite` as a study on the grid runner: one cell per model, run on every benchmark, then the main
table (`out/table.{json,md,png}`).

Why one cell per model: loading a model is the expensive step (minutes for a 7B model, a GPU's memory), so a model
is loaded once for all its benchmarks, as the suite always did; a cell is also the unit an executor can hand to
another process or a cluster's node, and a (model, benchmark) cell would load its model again there. Nothing is
lost by the coarser record: inside a cell, the library's runner (`anchorft.eval.runner.run_model`) keeps every
finished pair (its folder's metrics.json) and resumes an interrupted pair from its saved chunks.

- The record: OUT/cells.jsonl, one line per finished model ({benchmark: metrics}); a rerun does not run (or load)
  a recorded model again. The grid's context is what every pair's metrics depend on beyond the model (the
  generation settings, `k`, `--limit`, `--skip-bad`); a cell's spec is its model folder and its benchmarks (file,
  number of items). Another `k` or a model given new benchmarks runs the cell again: its finished pairs are
  regraded from their saved generations or kept, only what is missing is generated.
- The folder: the command claims it once (`anchorft.runs.run_claimed`); the grid works inside it.
- Executors: in this process by default (the models one after another, on this process's torch threads); on a Ray
  cluster (`cluster`) each model is a task holding `threads` CPUs and `cluster.gpus` GPUs, which starts its own
  math-verify worker and resolves `backend="auto"` where it runs (the node with the GPUs, not this one). The pair
  folders are written where the cells run: `out` must be on a filesystem every node shares.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from anchorft.errors import UsageError
from anchorft.eval.answers import MathChecker, checker_for
from anchorft.eval.protocol import SuiteSettings, check_models, resolve_benches
from anchorft.eval.report import main_table, write_table
from anchorft.eval.runner import RunInputs, prepare_run, run_model
from anchorft.runs import config_hash, read_marker, run_claimed
from anchorft.studies.grid import Cell, Grid, InProcess, RayCluster, RayTasks

__all__ = ["suite_context", "suite_cells", "run_suite", "suite_identity", "suite_into"]


def suite_context(s: SuiteSettings) -> dict:
    """What every cell's metrics depend on beyond its model and benchmarks: the generated samples' settings, the
    k they are graded at, and which items are read (`--limit`, `--skip-bad`)."""
    return {"generation": s.generation_key(), "k": s.k, "limit": s.limit, "skip_bad": s.skip_bad}


def suite_cells(models: dict[str, Path], inputs: RunInputs) -> list[Cell]:
    """One cell per model, in `models` order (the first is the table's base)."""
    benches = [[b.name, str(Path(b.path).resolve()), len(b.items)] for b in inputs.benches]
    return [Cell(name, {"model": str(Path(path).resolve()), "benches": benches}) for name, path in models.items()]


def _model_cell(
    inputs: RunInputs, models: dict[str, Path], out: Path, s: SuiteSettings, log: Callable[[str], None], cell: Cell
) -> dict:
    name = cell.name
    first = next(iter(models))
    calibration = out / "calibration.json" if name == first and s.calibrate else None
    return run_model(inputs, name, models[name], lambda m, b: out / m / b, s, log,
                     calibration=calibration, n_models=len(models))  # fmt: skip


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _model_cell_on_worker(
    inputs: RunInputs, models: dict[str, Path], out: Path, s: SuiteSettings, timeout_s: float, cell: Cell
) -> dict:
    """A model's cell on a cluster's worker: its own math-verify worker process (a checker is a process of the
    machine that started it, not something a task can carry), its log in the worker's output."""
    with MathChecker(timeout_s=timeout_s) as checker:
        return _model_cell(dataclasses.replace(inputs, checker=checker), models, out, s, _stderr, cell)


def run_suite(
    models: dict[str, Path],
    bench_dir: str | Path,
    out_dir: str | Path,
    settings: SuiteSettings | None = None,
    *,
    benches: Sequence[str] | None = None,
    backend: str = "auto",
    backend_factory: Callable | None = None,
    checker=None,
    log: Callable[[str], None] = print,
    cluster: RayCluster | None = None,
    threads: int = 1,
) -> dict:
    """Every (model, benchmark) pair, one grid cell per model, then the main table (`out/table.{json,md,png}`);
    returns the table. Every input is checked before a model loads.

    `backend_factory(model_dir, tokenizer, settings)` replaces the generation backend (tests). `cluster`: each model
    a Ray task of `threads` CPUs and `cluster.gpus` GPUs (module docstring); `checker`'s timeout is the workers'."""
    import torch  # lazy: the command reports a bad flag before torch loads

    s = settings or SuiteSettings()
    s.validate()
    specs = resolve_benches(bench_dir, benches)
    domains = {nm: dom for nm, dom, _ in specs}
    out = Path(out_dir)
    config = dict(
        models={k: str(v) for k, v in models.items()}, bench_dir=str(bench_dir), benches=list(domains),
        domains=domains, backend=None, settings=dataclasses.asdict(s), max_new_tokens_used=s.new_tokens,
    )  # fmt: skip
    inputs = prepare_run(models, specs, out, s, config, backend=backend, backend_factory=backend_factory,
                         checker=checker, resolve_backend_here=cluster is None)  # fmt: skip
    grid = Grid(out, context=suite_context(s))
    cells = suite_cells(models, inputs)
    recorded = grid.finished()

    def kept(cell: Cell, result: dict) -> bool:
        """A recorded model stands while every pair folder still holds its metrics (a pair's folder removed by
        hand is generated again, as before the record)."""
        return all((out / cell.name / b[0] / "metrics.json").is_file() for b in cell.spec["benches"])

    for c in cells:
        key = c.key(grid.context)
        if key in recorded and kept(c, recorded[key]):
            log(f"  {c.name}: every benchmark done before, kept (model not loaded)")
    if cluster is None:
        # in this process, on its own torch threads: the checker's worker, the log and the tests' backend factory
        # are this process's objects
        fn = functools.partial(_model_cell, inputs, models, out, s, log)
        executor = InProcess(torch.get_num_threads())
    else:
        timeout_s = (checker or MathChecker()).timeout_s  # a MathChecker starts its process on first use only
        fn = functools.partial(_model_cell_on_worker, dataclasses.replace(inputs, checker=None), models, out, s,
                               timeout_s)  # fmt: skip
        executor = RayTasks(cluster, threads)
    got = grid.run(cells, fn, executor, progress=False, desc="eval suite", kept=kept)
    results = {name: {b.name: got[name][b.name] for b in inputs.benches} for name in models}
    table = main_table(results, domains, base=next(iter(models)))
    write_table(table, out)
    return table


def suite_identity(
    out: str | Path, settings: SuiteSettings, models: dict, overwrite: bool = False
) -> tuple[dict, dict]:
    """The run `out` is claimed for (its hash, its notes): the hash is what every saved generation depends on
    (sampling settings, prompt, token limit, seed, --limit), so a folder of the same protocol keeps its finished
    (model, benchmark) pairs and takes new models and benchmarks; another protocol is refused unless `overwrite`.
    A model name already in the folder must name the same model folder."""

    protocol = {"generation": settings.generation_key(), "limit": settings.limit}
    dirs = {name: str(Path(path).resolve()) for name, path in models.items()}
    marker = read_marker(out)
    known = {}
    if marker and not overwrite and marker.get("command") == "eval suite":
        if marker.get("config_hash") == config_hash(protocol):
            known = dict((marker.get("notes") or {}).get("models", {}))
    for name, path in dirs.items():
        if known.get(name, path) != path:
            raise UsageError(
                f"--models {name}={path}: {out} holds results of {name}={known[name]}; "
                "give this model another name, or use another --out"
            )
    return protocol, {"models": {**known, **dirs}}


def suite_into(
    named: dict[str, str],
    bench_dir: str | Path,
    out: str | Path,
    settings: SuiteSettings,
    *,
    benches: Sequence[str] | None = None,
    backend: str = "auto",
    timeout_s: float | None = None,
    cluster: RayCluster | None = None,
    threads: int = 1,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """`anchorft eval suite`: `run_suite` in the folder `out`, claimed for the generation protocol
    (`suite_identity`): the models (`named`: NAME -> folder or hub id) and benchmarks checked first, the folder
    then takes new models and benchmarks; returns the main table. `timeout_s`: math-verify's time per check."""
    settings.validate()
    if settings.limit is not None and settings.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {settings.limit}")
    models = check_models(named)
    resolve_benches(bench_dir, benches)
    protocol, notes = suite_identity(out, settings, models, overwrite)

    def suite(claim) -> dict:
        with checker_for(timeout_s) as checker:
            return run_suite(models, bench_dir, out, settings, benches=benches, backend=backend, checker=checker,
                             log=log, cluster=cluster, threads=threads)  # fmt: skip

    return run_claimed(out, "eval suite", protocol, suite, overwrite=overwrite, notes=notes, rerun_finished=True)
