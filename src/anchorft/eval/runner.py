"""The one evaluation runner: every (model, benchmark) pair generated (resuming), graded and summarised.

The per-model work lives here: `prepare_run` reads and checks every input before a model loads, `run_model` loads
one model once and runs its benchmarks, `run_pair` one (model, benchmark) pair. `run_eval` (`anchorft eval`) is
this runner with one model, files given by path, each file's own prompt and a greedy pass; `anchorft eval suite`
runs several models on benchmark files named under a folder, one cell per model of a study grid
(`anchorft.studies.eval_suite`), and writes the main table. Each pair's folder holds generations.jsonl,
settings.json, records.jsonl and metrics.json (suite: `out/NAME/BENCH/`; `anchorft eval`: `out/BENCH/`).
generations.jsonl is appended after each chunk of items, so an interrupted run resumes where it stopped; samples
are seeded per (seed, item index, sample) (`backend.row_seed`), so the resumed run draws what an uninterrupted one
would have, and the two commands draw the same samples from the same file and seed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anchorft import stop
from anchorft.eval.answers import checker_for, default_checker
from anchorft.eval.backend import Backend
from anchorft.eval.benchmarks import Bench, load_bench, score_bench, summarize
from anchorft.eval.context import check_prompt_lengths, context_length
from anchorft.eval.ifeval import ifeval_available
from anchorft.eval.lm_eval_bridge import run_lm_eval
from anchorft.eval.loading import load_eval_tokenizer
from anchorft.eval.protocol import SuiteSettings, bench_names, format_prompts, token_prompts
from anchorft.eval.report import plot_metrics
from anchorft.io import write_json, write_jsonl
from anchorft.provenance import write_metrics
from anchorft.runs import run_claimed

__all__ = ["resolve_backend", "open_backend", "run_pair", "RunInputs", "prepare_run", "run_model", "run_eval"]
__all__ += ["eval_into", "RUN_EVAL_KEYS", "LM_EVAL_KEYS"]


def resolve_backend(backend: str, here: bool = True) -> str:
    """ "hf" (transformers), "vllm" (needs the `vllm` extra and a GPU), or "auto" (vLLM when both are there).
    `here=False`: the name checked only (the models load on another machine, which resolves it)."""
    if backend not in ("auto", "hf", "vllm"):
        raise ValueError(f"backend must be auto, hf or vllm, got {backend!r}")
    if backend == "hf" or not here:
        return backend
    if backend == "vllm":
        from anchorft.eval.vllm_backend import check_vllm

        check_vllm()  # one-line error without vllm or without CUDA
        return "vllm"
    import torch

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "hf"


def open_backend(kind: str, model_dir: Path, tokenizer, settings) -> Backend:
    """The backend `kind` ("hf" or "vllm") on the model in `model_dir`, with the run's settings."""
    if kind == "vllm":
        from anchorft.eval.vllm_backend import VLLMBackend, VLLMOptions

        return VLLMBackend(str(model_dir), VLLMOptions(**settings.extra.get("vllm", {})), seed=settings.seed)
    from anchorft.eval import hf_backend

    return hf_backend.HFBackend(model_dir, tokenizer, settings)


def _read_generations(path: Path, n: int, greedy: bool) -> dict[int, dict]:
    done: dict[int, dict] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:  # a line torn by an interruption: regenerated
            continue
        if isinstance(obj, dict) and isinstance(obj.get("responses"), list) and len(obj["responses"]) == n:
            if not greedy or isinstance(obj.get("greedy"), str):
                done[int(obj["index"])] = obj
    return done


def _append_lines(path: Path, rows: Sequence[dict]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
        fh.flush()
        os.fsync(fh.fileno())


def _kept(sub: Path, bench: Bench, s: SuiteSettings) -> dict | None:
    """The pair's metrics when a run with the same generation settings finished it before, else None."""
    settings_file, metrics_file = sub / "settings.json", sub / "metrics.json"
    if not (settings_file.is_file() and metrics_file.is_file()):
        return None
    if json.loads(settings_file.read_text(encoding="utf-8")) != s.generation_key():
        return None  # run_pair says why
    m = json.loads(metrics_file.read_text(encoding="utf-8"))
    return m if m.get("n_items") == len(bench.items) and m.get("k") == s.k else None


def run_pair(
    backend, tokenizer, bench: Bench, sub: Path, s: SuiteSettings, checker, log: Callable, label: str
) -> dict:
    """Generate (resuming), grade and summarise one (model, benchmark) pair into the folder `sub`."""
    sub.mkdir(parents=True, exist_ok=True)
    key = s.generation_key()
    settings_file = sub / "settings.json"
    if settings_file.is_file():
        saved = json.loads(settings_file.read_text(encoding="utf-8"))
        if saved != key:
            raise ValueError(
                f"{sub}: saved generations were made with {saved}, this run asks {key}; use another --out"
            )
    else:
        write_json(settings_file, key, indent=2)
    if (m := _kept(sub, bench, s)) is not None:
        log(f"  {label}: done before, kept")
        return m
    gen_file = sub / "generations.jsonl"
    done = _read_generations(gen_file, s.n, s.greedy)
    if gen_file.is_file():  # drop a torn or partial last line before appending
        write_jsonl(gen_file, done.values())
    todo = [it for it in bench.items if it.index not in done]
    if done:
        log(f"  {label}: resuming, {len(done)} of {len(bench.items)} items saved")
    prompts = token_prompts(tokenizer, todo, s.prompt) if todo else []
    for start in range(0, len(todo), s.chunk):
        stop.check_alone()  # safe point: the chunks saved so far are kept for the rerun
        part, ids = todo[start : start + s.chunk], prompts[start : start + s.chunk]
        keys = [it.index for it in part]
        kw = dict(top_p=s.top_p, max_new_tokens=s.new_tokens, seed=s.seed)
        t0 = time.perf_counter()
        texts = backend.generate(ids, keys, n=s.n, temperature=s.temperature, **kw)
        rows = [{"index": i, "responses": r} for i, r in zip(keys, texts)]
        if s.greedy:
            for row, g in zip(rows, backend.generate(ids, keys, n=1, temperature=0.0, **kw)):
                row["greedy"] = g[0]
        _append_lines(gen_file, rows)
        done.update({r["index"]: r for r in rows})
        log(f"  {label}: {len(done)}/{len(bench.items)} items ({time.perf_counter() - t0:.1f} s)")
    responses = {it.index: done[it.index]["responses"] for it in bench.items}
    greedy = {it.index: done[it.index]["greedy"] for it in bench.items} if s.greedy else None
    records = score_bench(bench, responses, greedy, checker)
    stop.check_alone()  # after grading (math-verify's worker), before the pair's results are written
    metrics = summarize(records, s.k)
    metrics.update(bench=str(bench.path), n_bad_lines=bench.n_bad, kind=sorted({r["kind"] for r in records}))
    write_jsonl(sub / "records.jsonl", records)
    write_metrics(sub / "metrics.json", metrics, indent=2)
    return metrics


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _calibrate(backend, tokenizer, benches: Sequence[Bench], s: SuiteSettings, n_models: int, log) -> dict:
    """Time a short generation and extrapolate (an estimate: every sample assumed to run to the token limit)."""
    items = benches[0].items[: min(4, len(benches[0].items))]
    prompts = token_prompts(tokenizer, items, s.prompt)
    n_cal, tok_cal = min(s.n, 4), min(32, s.new_tokens)
    t0 = time.perf_counter()
    backend.generate(prompts, [it.index for it in items], n=n_cal, temperature=s.temperature,
                     top_p=s.top_p, max_new_tokens=tok_cal, seed=s.seed)  # fmt: skip
    dt = time.perf_counter() - t0
    rate = len(items) * n_cal * tok_cal / max(dt, 1e-9)  # upper bound on tokens: samples may stop early
    total_tokens = n_models * sum(len(b.items) for b in benches) * s.n * s.new_tokens
    est = dict(
        calibration_seconds=dt, calibration_rows=len(items) * n_cal, calibration_new_tokens=tok_cal,
        tokens_per_second=rate, max_tokens_to_generate=total_tokens,
        estimate_hours_upper=total_tokens / rate / 3600,
        note="estimate: every sample assumed to reach the token limit, at the calibration's batch "
        "(larger batches are faster per token, early stops shorten it)",
    )  # fmt: skip
    log(
        f"calibration: {len(items) * n_cal} rows x {tok_cal} tokens in {dt:.1f} s ({rate:.0f} tokens/s); "
        f"estimate for {n_models} model(s) x {len(benches)} benchmark(s): at most "
        f"{_duration(est['estimate_hours_upper'] * 3600)} (every sample at the token limit)"
    )
    return est


@dataclass
class RunInputs:
    """What every model of a run shares, read and checked before any model loads (`prepare_run`): the benchmarks,
    the backend kind, each model's tokenizer and the grader. `backend_factory(model_dir, tokenizer, settings)`
    replaces the generation backend (tests)."""

    benches: list[Bench]
    kind: str
    tokenizers: dict[str, Any]
    checker: Any
    backend_factory: Callable | None = None

    def open(self, path: Path, tok, s: SuiteSettings) -> Backend:
        """This run's backend on the model in `path`."""
        if self.backend_factory is not None:
            return self.backend_factory(path, tok, s)
        return open_backend(resolve_backend(self.kind), path, tok, s)  # "auto" where the run was prepared elsewhere


def prepare_run(
    models: dict[str, Path],
    specs: Sequence[tuple[str, str, Path]],
    out: Path,
    s: SuiteSettings,
    config: dict,
    *,
    backend: str,
    backend_factory: Callable | None = None,
    checker=None,
    single: bool = False,
    resolve_backend_here: bool = True,
) -> RunInputs:
    """Read and check every benchmark and every model's tokenizer, then write out/config.json: a bad input fails
    here, in one line, before any model loads (minutes for a large one). `single`: `anchorft eval` (one model,
    given as --model; prompts that do not fit the model's context are refused). `resolve_backend_here=False`: the
    models load on other machines (a cluster's GPU nodes), which resolve "auto" and check vLLM themselves."""
    loaded = [load_bench(p, skip_bad=s.skip_bad, limit=s.limit, name=nm) for nm, _, p in specs]
    if any(b.items[0].kind == "ifeval" for b in loaded):
        ok, why = ifeval_available()
        if not ok:
            raise ValueError(why)
    kind = "custom" if backend_factory is not None else resolve_backend(backend, here=resolve_backend_here)
    tokenizers = {}
    for name, path in models.items():
        tok = load_eval_tokenizer(path)
        if not getattr(tok, "chat_template", None):
            who = f"--model {path}" if single else f"--models {name}={path}"
            raise ValueError(f"{who}: the tokenizer has no chat_template")
        if single:
            texts = [format_prompts(tok, b.items, s.prompt) for b in loaded]
            check_prompt_lengths(tok, texts, [b.name for b in loaded], context_length(path), s.new_tokens)
        tokenizers[name] = tok
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", {**config, "backend": kind}, indent=2)
    return RunInputs(loaded, kind, tokenizers, checker or default_checker(), backend_factory)


def run_model(
    inputs: RunInputs,
    name: str,
    path: Path,
    pair_dir: Callable[[str, str], Path],
    s: SuiteSettings,
    log: Callable[[str], None],
    *,
    calibration: Path | None = None,
    n_models: int = 1,
) -> dict[str, dict]:
    """{benchmark: metrics} of one model on every benchmark: the model loaded once for all of them (not at all when
    every pair was finished before), the pairs run in turn (`run_pair`, each resuming from its saved chunks).
    `calibration`: first time a short generation and write there the estimate for `n_models` models."""
    tok = inputs.tokenizers[name]
    kept = {b.name: _kept(pair_dir(name, b.name), b, s) for b in inputs.benches}
    if all(m is not None for m in kept.values()):  # a rerun: nothing to generate, so the model is not loaded
        log(f"  {name}: every benchmark done before, kept (model not loaded)")
        return kept
    log(f"  {name}: loading {path} ({inputs.kind} backend)")  # loading a large model takes minutes: say so first
    be = inputs.open(path, tok, s)
    try:
        if calibration is not None:
            write_json(calibration, _calibrate(be, tok, inputs.benches, s, n_models, log), indent=2)
        return {
            b.name: run_pair(be, tok, b, pair_dir(name, b.name), s, inputs.checker, log, f"{name}/{b.name}")
            for b in inputs.benches
        }
    finally:
        be.close()


def run_eval(
    model_dir: str | Path,
    bench_paths: Sequence[str | Path],
    out_dir: str | Path,
    *,
    n: int = 16,
    k: int = 16,
    temperature: float = 0.7,
    top_p: float = 0.95,
    max_new_tokens: int = 4096,
    batch_size: int = 32,
    limit: int | None = None,
    seed: int = 0,
    greedy: bool = True,
    backend: str = "auto",
    skip_bad: bool = False,
    checker=None,
    progress: bool = True,
) -> dict[str, dict]:
    """One model on benchmark files given by path, each with its own prompt: `n` samples per item (plus one
    greedy), graded; writes out_dir/{config.json, metrics.json, metrics.png, NAME/{generations.jsonl,
    settings.json, records.jsonl, metrics.json}} and returns {bench name: metrics}. Every file is read and
    checked before the model is loaded; a rerun into the same folder resumes."""
    s = SuiteSettings(
        n=n, k=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, prompt="file", seed=seed,
        limit=limit, batch_size=batch_size, greedy=greedy, calibrate=False, skip_bad=skip_bad,
    )  # fmt: skip
    s.validate()
    if not bench_paths:
        raise ValueError("no benchmark file given (--bench FILE.jsonl)")
    paths = [Path(p) for p in bench_paths]
    specs = [(nm, "", p) for nm, p in zip(bench_names(paths), paths)]
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there (a local model directory is needed)")
    out = Path(out_dir)
    config = dict(
        model=str(model_dir), benches=[str(p) for p in paths], n=n, k=k, temperature=temperature, top_p=top_p,
        max_new_tokens=max_new_tokens, batch_size=batch_size, limit=limit, seed=seed, greedy=greedy,
        backend=None, skip_bad=skip_bad,
    )  # fmt: skip
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if progress else (lambda m: None)
    inputs = prepare_run({"model": model_dir}, specs, out, s, config, backend=backend, checker=checker, single=True)
    results = run_model(inputs, "model", model_dir, lambda m, b: out / b, s, log)
    write_metrics(out / "metrics.json", results, indent=2)
    plot_metrics(results, out / "metrics.png")
    return results


# the settings of `anchorft eval` that run_eval and run_lm_eval take as keyword arguments of the same names
RUN_EVAL_KEYS = ("n", "temperature", "top_p", "max_new_tokens", "batch_size", "limit", "seed", "greedy", "backend")
LM_EVAL_KEYS = ("include_path", "limit", "batch_size", "num_fewshot", "apply_chat_template", "seed")


def eval_into(out: str | Path, spec: dict, overwrite: bool = False, timeout_s: float | None = None) -> dict | None:
    """`anchorft eval`: one model (`spec["model"]`) on benchmark files (`spec["bench"]`, `run_eval`, k
    `spec["k"]` or n) or on lm-eval tasks (`spec["lm_eval"]`, comma-separated: `run_lm_eval`), in the folder `out`
    claimed for `spec` (the same settings finished: reused, None). The command checks the model and the files
    first (`check_eval_spec`, before torch loads)."""
    k = spec["n"] if spec["k"] is None else spec["k"]

    def work(claim) -> dict:
        if spec["lm_eval"]:
            kw = {key: spec[key] for key in LM_EVAL_KEYS}
            return run_lm_eval(spec["model"], spec["lm_eval"].split(","), out, **kw)
        kw = {key: spec[key] for key in RUN_EVAL_KEYS} | {"k": k, "skip_bad": spec["skip_bad"]}
        with checker_for(timeout_s) as checker:
            return run_eval(spec["model"], spec["bench"], out, checker=checker, **kw)

    return run_claimed(out, "eval", spec, work, overwrite=overwrite)
