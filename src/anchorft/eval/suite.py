"""`anchorft eval suite`: every (model, benchmark) of the RPSFT paper's evaluation, resumable, and its main table.

The paper preset follows the public release's protocol (its README and `evaluation/`): in-domain sets
aime-24, aime-25, amc, math500, minerva, olympiadBench, whole; out-of-domain sets mmlu_pro and the
`*_test` files (about 50 items each; gpqa_test when the user has put it beside them); every prompt's
system message replaced by the release's boxed few-shot prompt (`boxed_system_prompt`); 10,240 new
tokens at most (16,384 for RL checkpoints); temperature 0.7, top_p 0.95, n = 16 samples; Avg@16 (mean
correctness) and Pass@16 (here the unbiased estimator from n = 16 samples, i.e. any of the 16 correct).

Layout of `out`: config.json, calibration.json, table.{json,md,png}, and per model and benchmark
`NAME/BENCH/{generations.jsonl, settings.json, records.jsonl, metrics.json}`. generations.jsonl is
appended after each chunk of items, so an interrupted run resumes where it stopped; samples are seeded
per (seed, item index, sample), so the resumed run draws what an uninterrupted one would have.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from anchorft.eval.benchmarks import Bench, load_bench, resolve_backend, score_bench, summarize
from anchorft.io import save_figure, write_json, write_jsonl, write_text
from anchorft.provenance import write_metrics

__all__ = [
    "PAPER_ID",
    "PAPER_OOD",
    "BOXED_FEWSHOT_PROMPT",
    "SuiteSettings",
    "boxed_system_prompt",
    "resolve_benches",
    "check_model_dir",
    "check_models",
    "run_suite",
    "main_table",
]

PAPER_ID = ("aime-24", "aime-25", "amc", "math500", "minerva", "olympiadBench")
PAPER_OOD = ("mmlu_pro",)  # plus every ood/*_test.jsonl present (gpqa_test when supplied)
GPQA_NOTE = (
    "GPQA is not shipped with the evaluation files (its authors ask that its items not be redistributed "
    "in plain text): put gpqa_test.jsonl in the paper's format in {dir}"
)

# The protocol's system prompt (the release's `evaluation/prompt_utils.py`): a boxed instruction, one worked
# example, and a closing rule. The sentence that marks a prompt as already converted is the last one.
_FINAL_RULE = "Always finish your response by repeating only the final answer inside a single \\boxed{}."
BOXED_FEWSHOT_PROMPT = "\n\n".join(
    [
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "Example:\nUser: If 2 apples plus 3 apples equals how many apples?\n"
        "Assistant: We add 2 + 3 = 5, so the final answer is \\boxed{5}.",
        _FINAL_RULE,
    ]
)


def boxed_system_prompt(messages: Sequence[dict]) -> list[dict]:
    """The messages with the system message set to BOXED_FEWSHOT_PROMPT (inserted when there is none; a
    system message that already ends in the protocol's closing rule is kept as it is)."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system":
        if "Always finish your response" not in msgs[0].get("content", ""):
            msgs[0]["content"] = BOXED_FEWSHOT_PROMPT
        return msgs
    return [{"role": "system", "content": BOXED_FEWSHOT_PROMPT}] + msgs


@dataclass
class SuiteSettings:
    """The protocol; defaults are the paper preset."""

    n: int = 16
    k: int = 16
    temperature: float = 0.7
    top_p: float = 0.95
    max_new_tokens: int = 10240
    rl_max_new_tokens: int = 16384  # used instead with rl_checkpoint
    rl_checkpoint: bool = False
    prompt: str = "boxed-fewshot"  # or "file": each file's own messages
    seed: int = 0
    limit: int | None = None  # first N items of each file (smoke runs)
    chunk: int = 64  # items generated between two appends to generations.jsonl
    batch_size: int = 64  # HF backend: rows per batch at most
    max_batch_tokens: int | None = None  # HF backend: rows x (prompt + new tokens) per batch at most
    calibrate: bool = True
    skip_bad: bool = False
    extra: dict = field(default_factory=dict)

    def _new_tokens(self) -> int:
        return self.rl_max_new_tokens if self.rl_checkpoint else self.max_new_tokens

    new_tokens = property(_new_tokens)  # an undecorated body: mutation testing reaches it

    def validate(self) -> None:
        if self.n < 1 or not 1 <= self.k <= self.n:
            raise ValueError(f"need n >= 1 and 1 <= k <= n, got n={self.n}, k={self.k}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")
        if min(self.max_new_tokens, self.rl_max_new_tokens, self.chunk, self.batch_size) < 1:
            raise ValueError("max new tokens, chunk and batch size must be >= 1")
        if self.prompt not in ("boxed-fewshot", "file"):
            raise ValueError(f"prompt must be 'boxed-fewshot' or 'file', got {self.prompt!r}")

    def generation_key(self) -> dict:
        """What the saved generations depend on: a resumed run must match it."""
        return dict(
            n=self.n, temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.new_tokens,
            prompt=self.prompt, seed=self.seed,
        )  # fmt: skip


# ---------------------------------------------------------------- inputs, checked before any model loads


def resolve_benches(bench_dir: str | Path, names: Sequence[str] | None = None) -> list[tuple[str, str, Path]]:
    """(name, "id" | "ood", path) of each benchmark: the paper preset's list when `names` is None,
    else the named files (NAME or NAME.jsonl under DIR/id or DIR/ood)."""
    root = Path(bench_dir)
    if not root.is_dir():
        raise ValueError(
            f"--bench-dir {root}: no such folder (`anchorft data benchmarks --out {root}` fetches the files)"
        )
    if names is None:
        out = []
        for nm in PAPER_ID:
            out.append((nm, "id", root / "id" / f"{nm}.jsonl"))
        ood = list(PAPER_OOD) + sorted(p.stem for p in (root / "ood").glob("*_test.jsonl"))
        out += [(nm, "ood", root / "ood" / f"{nm}.jsonl") for nm in ood]
        missing = [str(p) for _, _, p in out if not p.is_file()]
        if missing:
            raise ValueError(
                f"--bench-dir {root}: the paper preset's file(s) {missing} are missing "
                f"(`anchorft data benchmarks --out {root}` fetches them)"
            )
        return out
    out = []
    for raw in names:
        nm = raw[: -len(".jsonl")] if raw.endswith(".jsonl") else raw
        hits = [
            (nm, dom, root / dom / f"{nm}.jsonl") for dom in ("id", "ood") if (root / dom / f"{nm}.jsonl").is_file()
        ]
        if not hits:
            if nm.startswith("gpqa"):
                raise ValueError(f"--benches {nm}: not found. " + GPQA_NOTE.format(dir=root / "ood"))
            raise ValueError(f"--benches {nm}: no {nm}.jsonl under {root}/id or {root}/ood")
        out.append(hits[0])
    if len({nm for nm, _, _ in out}) != len(out):
        raise ValueError("--benches: a benchmark is named twice")
    return out


_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_model_dir(name: str, path: str | Path) -> Path:
    """A local model folder with config.json, weights and a tokenizer; a one-line ValueError otherwise."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"--models {name}={p}: no such folder")
    if not (p / "config.json").is_file():
        raise ValueError(f"--models {name}={p}: no config.json there")
    if not any((p / w).is_file() for w in _WEIGHTS):
        raise ValueError(f"--models {name}={p}: no weights there (model.safetensors or its index)")
    if not any((p / t).is_file() for t in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ValueError(f"--models {name}={p}: no tokenizer files there")
    return p


def check_models(named: dict[str, str]) -> dict[str, Path]:
    """{NAME: folder} (the first is the base of the deltas): each NAME a folder name in --out, each value a local
    model folder or a hub id (resolved to its snapshot in the hub cache, downloaded when the hub is reachable;
    offline and not cached: a one-line error naming the id and HF_HUB_OFFLINE)."""
    from anchorft.preflight import resolve_model_folder

    out: dict[str, Path] = {}
    for name, path in named.items():
        if "/" in name or name.startswith("."):
            raise ValueError(f"--models {name}={path}: NAME is a folder name in --out (no '/')")
        out[name] = check_model_dir(name, resolve_model_folder(path, f"--models {name}"))
    if not out:
        raise ValueError("--models: give at least one NAME=DIR")
    return out


def _token_prompts(tokenizer, bench: Bench, prompt_mode: str) -> list[list[int]]:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat_template: the benchmarks' prompts are chat messages")
    out = []
    for it in bench.items:
        msgs = boxed_system_prompt(it.messages) if prompt_mode == "boxed-fewshot" else it.messages
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])  # the template holds BOS
    return out


# ---------------------------------------------------------------- backends


class HFBackend:
    """transformers, length-sorted batches, one random stream per sample (`hf_backend.generate_sorted`)."""

    def __init__(self, model_dir: Path, tokenizer, settings: SuiteSettings) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, trust_remote_code=False).to(device)
        self.tokenizer, self.s = tokenizer, settings

    def generate(self, token_ids, keys, *, n, temperature, top_p, max_new_tokens, seed) -> list[list[str]]:
        from anchorft.eval.hf_backend import generate_sorted

        return generate_sorted(
            self.model, self.tokenizer, token_ids, keys=keys, n=n, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, seed=seed, batch_size=self.s.batch_size,
            max_batch_tokens=self.s.max_batch_tokens,
        )  # fmt: skip

    def close(self) -> None:
        self.model = None


# ---------------------------------------------------------------- running


def _read_generations(path: Path, n: int) -> dict[int, list[str]]:
    done: dict[int, list[str]] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:  # a line torn by an interruption: regenerated
            continue
        if isinstance(obj, dict) and isinstance(obj.get("responses"), list) and len(obj["responses"]) == n:
            done[int(obj["index"])] = obj["responses"]
    return done


def _append_lines(path: Path, rows: Sequence[dict]) -> None:
    import os

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
        return None  # _run_pair says why
    m = json.loads(metrics_file.read_text(encoding="utf-8"))
    return m if m.get("n_items") == len(bench.items) and m.get("k") == s.k else None


def _run_pair(backend, tokenizer, bench: Bench, sub: Path, s: SuiteSettings, checker, log: Callable) -> dict:
    """Generate (resuming), grade and summarise one (model, benchmark) pair."""
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
        log(f"  {sub.parent.name}/{bench.name}: done before, kept")
        return m
    gen_file = sub / "generations.jsonl"
    done = _read_generations(gen_file, s.n)
    if gen_file.is_file():  # drop a torn or partial last line before appending
        write_text(gen_file, "".join(json.dumps({"index": i, "responses": r}) + "\n" for i, r in done.items()))
    todo = [it for it in bench.items if it.index not in done]
    if done:
        log(f"  {sub.parent.name}/{bench.name}: resuming, {len(done)} of {len(bench.items)} items saved")
    if todo:
        prompts = _token_prompts(tokenizer, Bench(bench.path, bench.name, todo), s.prompt)
        for start in range(0, len(todo), s.chunk):
            part = todo[start : start + s.chunk]
            t0 = time.perf_counter()
            texts = backend.generate(
                prompts[start : start + s.chunk], [it.index for it in part], n=s.n, temperature=s.temperature,
                top_p=s.top_p, max_new_tokens=s.new_tokens, seed=s.seed,
            )  # fmt: skip
            rows = [{"index": it.index, "responses": r} for it, r in zip(part, texts)]
            _append_lines(gen_file, rows)
            done.update({r["index"]: r["responses"] for r in rows})
            dt = time.perf_counter() - t0
            log(f"  {sub.parent.name}/{bench.name}: {len(done)}/{len(bench.items)} items ({dt:.1f} s)")
    responses = {it.index: done[it.index] for it in bench.items}
    records = score_bench(bench, responses, None, checker)
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
    bench = benches[0]
    items = bench.items[: min(4, len(bench.items))]
    prompts = _token_prompts(tokenizer, Bench(bench.path, bench.name, items), s.prompt)
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
) -> dict:
    """Every (model, benchmark) pair, then the main table. Inputs are all checked before a model loads.

    `backend_factory(model_dir, tokenizer, settings)` replaces the generation backend (tests)."""
    from anchorft.eval.answers import default_checker
    from anchorft.eval.loading import load_eval_tokenizer

    s = settings or SuiteSettings()
    s.validate()
    specs = resolve_benches(bench_dir, benches)
    loaded = [load_bench(p, skip_bad=s.skip_bad, limit=s.limit, name=nm) for nm, _, p in specs]
    domains = {nm: dom for nm, dom, _ in specs}
    if any(b.items[0].kind == "ifeval" for b in loaded):
        from anchorft.eval.ifeval import ifeval_available

        ok, why = ifeval_available()
        if not ok:
            raise ValueError(why)
    kind = "custom" if backend_factory is not None else resolve_backend(backend)
    tokenizers = {}
    for name, path in models.items():
        tok = load_eval_tokenizer(path)
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"--models {name}={path}: the tokenizer has no chat_template")
        tokenizers[name] = tok
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = dict(
        models={k: str(v) for k, v in models.items()}, bench_dir=str(bench_dir), benches=[nm for nm, _, _ in specs],
        domains=domains, backend=kind, settings=asdict(s), max_new_tokens_used=s.new_tokens,
    )  # fmt: skip
    write_json(out / "config.json", config, indent=2)
    checker = checker or default_checker()
    results: dict[str, dict[str, dict]] = {}
    for mi, (name, path) in enumerate(models.items()):
        tok = tokenizers[name]
        kept = {b.name: _kept(out / name / b.name, b, s) for b in loaded}
        if all(m is not None for m in kept.values()):  # a rerun: nothing to generate, so the model is not loaded
            log(f"  {name}: every benchmark done before, kept (model not loaded)")
            results[name] = kept
            continue
        log(f"  {name}: loading {path} ({kind} backend)")  # loading a large model takes minutes: say so first
        if backend_factory is not None:
            be = backend_factory(path, tok, s)
        elif kind == "vllm":
            from anchorft.eval.vllm_backend import VLLMBackend, VLLMOptions

            be = VLLMBackend(str(path), VLLMOptions(**s.extra.get("vllm", {})), seed=s.seed)
        else:
            be = HFBackend(path, tok, s)
        try:
            if mi == 0 and s.calibrate:
                write_json(out / "calibration.json", _calibrate(be, tok, loaded, s, len(models), log), indent=2)
            results[name] = {}
            for bench in loaded:
                results[name][bench.name] = _run_pair(be, tok, bench, out / name / bench.name, s, checker, log)
        finally:
            be.close()
    table = main_table(results, domains, base=next(iter(models)))
    write_metrics(out / "table.json", table, indent=2)
    write_text(out / "table.md", table_markdown(table))
    plot_table(table, out / "table.png")
    return table


# ---------------------------------------------------------------- the main table


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def main_table(results: dict[str, dict[str, dict]], domains: dict[str, str], base: str) -> dict:
    """Per model: each benchmark's Avg@k and Pass@k, the ID and OOD means (unweighted over benchmarks),
    and their differences from the base model."""
    rows = {}
    for model, per in results.items():
        row = {"benches": {b: {"avg@k": m["avg@k"], "pass@k": m["pass@k"]} for b, m in per.items()}}
        for dom in ("id", "ood"):
            for met in ("avg@k", "pass@k"):
                row[f"{dom}_mean_{met}"] = _mean([m[met] for b, m in per.items() if domains[b] == dom])
        rows[model] = row
    for row in rows.values():
        for key in [k for k in row if k.endswith("@k") and "_mean_" in k]:
            b, r = rows[base][key], row[key]
            row["delta_" + key] = None if b is None or r is None else r - b
    k = next(iter(next(iter(results.values())).values()))["k"]
    return {"base": base, "k": k, "domains": domains, "models": rows}


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def table_markdown(table: dict) -> str:
    k, doms = table["k"], table["domains"]
    benches = [b for b in doms if doms[b] == "id"] + [b for b in doms if doms[b] == "ood"]
    lines = []
    for met, label in (("avg@k", f"Avg@{k}"), ("pass@k", f"Pass@{k}")):
        head = ["model"] + [f"{b} ({doms[b].upper()})" for b in benches]
        head += ["ID mean", "OOD mean", f"ID vs {table['base']}", f"OOD vs {table['base']}"]
        lines += [f"### {label} (%)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for model, row in table["models"].items():
            cells = [model] + [_pct(row["benches"].get(b, {}).get(met)) for b in benches]
            cells += [_pct(row[f"id_mean_{met}"]), _pct(row[f"ood_mean_{met}"])]
            cells += [_pct(row[f"delta_id_mean_{met}"], True), _pct(row[f"delta_ood_mean_{met}"], True)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot_table(table: dict, path: Path) -> None:
    import numpy as np

    from anchorft.io import pyplot

    plt = pyplot()
    doms = table["domains"]
    benches = [b for b in doms if doms[b] == "id"] + [b for b in doms if doms[b] == "ood"] + ["ID mean", "OOD mean"]
    models = list(table["models"])
    x = np.arange(len(benches))
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(benches) + 2), 3.8))
    for j, m in enumerate(models):
        row = table["models"][m]
        vals = [row["benches"].get(b, {}).get("avg@k") for b in benches[:-2]]
        vals += [row["id_mean_avg@k"], row["ood_mean_avg@k"]]
        ax.bar(x + j * width, [0.0 if v is None else 100 * v for v in vals], width, label=m)
    ax.set_xticks(x + width * (len(models) - 1) / 2, benches, rotation=35, ha="right")
    ax.set_ylabel(f"Avg@{table['k']} (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
