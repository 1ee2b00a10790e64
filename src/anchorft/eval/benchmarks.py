"""The RPSFT paper's evaluation sets (JSONL, its own format): reading, scoring, sampling, metrics.

One line per item: `prompt` (chat messages), `reward_model.ground_truth` (LaTeX string, number or
option letter); extra keys are ignored. An item whose user message lists "Choices:" labelled A., B., ...
(or 1., 2., ...) and whose gold is one of the labels is multiple choice (graded by label); every
other item is math (the last \\boxed{} checked with math-verify, gold first).

Metrics follow the paper: Avg@k = mean correctness over all samples of all problems, Pass@k = the
unbiased estimator of Chen et al. (2021, eq. 1) from n >= k samples, and greedy accuracy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from anchorft.eval.answers import MathChecker, default_checker, grade, parse_choices
from anchorft.eval.metrics import mean_pass_at_k
from anchorft.eval.pipeline import Sampler, prompt_metrics, score_prompts
from anchorft.io import iter_jsonl, save_figure, write_json, write_jsonl
from anchorft.provenance import write_metrics

__all__ = [
    "BenchItem",
    "Bench",
    "benchmarks_dir",
    "load_bench",
    "read_responses",
    "score_bench",
    "summarize",
    "format_prompts",
]


@dataclass
class BenchItem:
    index: int  # 0-based position among the file's non-blank lines (bad lines keep their place)
    line: int  # 1-based line number in the file
    messages: list[dict]
    gold: str
    choices: dict[str, str] = field(default_factory=dict)  # label -> text; {} for a math item
    solution: str | None = None
    instructions: list[dict] | None = None  # IFEval items: reward_model.instructions
    alt_golds: list[str] = field(default_factory=list)  # further answers of a list ground_truth (olympiadBench)

    @property
    def kind(self) -> str:
        return "ifeval" if self.instructions is not None else "choice" if self.choices else "math"


@dataclass
class Bench:
    path: Path
    name: str
    items: list[BenchItem]
    n_bad: int = 0
    bad: list[str] = field(default_factory=list)  # "line N: reason" for each skipped line


def benchmarks_dir() -> Path:
    """Where the paper's evaluation files are: $ANCHORFT_BENCHMARKS, else the user's data folder
    (~/.local/share/anchorft/benchmarks on Linux; platformdirs), where `anchorft data benchmarks` writes them."""
    env = os.environ.get("ANCHORFT_BENCHMARKS")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("anchorft")) / "benchmarks"


def _item(index: int, lineno: int, obj: dict) -> BenchItem:
    msgs = obj.get("prompt")
    if isinstance(msgs, str):
        msgs = [{"role": "user", "content": msgs}]
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("field 'prompt' must be a non-empty list of chat messages")
    for m in msgs:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ValueError("field 'prompt' must hold {'role': str, 'content': str} messages")
    rm = obj.get("reward_model")
    if isinstance(rm, dict) and isinstance(rm.get("instructions"), list) and rm["instructions"]:
        ok = all(isinstance(i, dict) and isinstance(i.get("instruction_id"), str) for i in rm["instructions"])
        if not ok:
            raise ValueError("field 'reward_model.instructions' must hold {'instruction_id': str, 'kwargs': {}}")
        return BenchItem(index=index, line=lineno, messages=msgs, gold="", instructions=rm["instructions"])
    golds: list[str] = []
    if isinstance(rm, dict) and isinstance(rm.get("ground_truth"), list):  # olympiadBench: a list of answers
        golds = [str(g).strip() for g in rm["ground_truth"] if isinstance(g, (str, int, float))]
        if not golds or len(golds) != len(rm["ground_truth"]):
            raise ValueError("field 'reward_model.ground_truth' is an empty list or holds non-scalars")
        rm = {**rm, "ground_truth": golds[0]}
    if not isinstance(rm, dict) or rm.get("ground_truth") is None or isinstance(rm["ground_truth"], (dict, list)):
        raise ValueError("field 'reward_model.ground_truth' is missing or not a string/number")
    gold = str(rm["ground_truth"]).strip()
    user = "\n".join(m["content"] for m in msgs if m["role"] == "user")
    choices = parse_choices(user)
    if gold not in choices:
        choices = {}
    solution = obj.get("solution") if isinstance(obj.get("solution"), str) else None
    return BenchItem(
        index=index, line=lineno, messages=msgs, gold=gold, choices=choices, solution=solution, alt_golds=golds[1:]
    )


def load_bench(path: str | Path, skip_bad: bool = False, limit: int | None = None, name: str | None = None) -> Bench:
    """Read one of the paper's JSONL files (first `limit` items). Bad lines raise, or are skipped and counted."""
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    bad: list[str] = []
    items: list[BenchItem] = []
    for index, lineno, obj in iter_jsonl(path, skip_bad=skip_bad, bad=bad):
        try:
            items.append(_item(index, lineno, obj))
        except ValueError as e:
            if not skip_bad:
                raise ValueError(f"{path}: line {lineno}: {e}; pass --skip-bad to skip such lines") from None
            bad.append(f"line {lineno}: {e}")
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{path}: no valid items")
    return Bench(path=path, name=name or path.stem, items=items, n_bad=len(bad), bad=bad)


def read_responses(path: str | Path, skip_bad: bool = False) -> tuple[dict[int, dict], list[str]]:
    """Responses produced elsewhere: one line per item, {"index": i, "responses": [str, ...]} and
    optionally "greedy": str. Returns ({index: record}, bad lines)."""
    bad: list[str] = []
    out: dict[int, dict] = {}
    for _, lineno, obj in iter_jsonl(path, skip_bad=skip_bad, bad=bad):
        try:
            idx = obj.get("index")
            if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
                raise ValueError("field 'index' must be a non-negative integer")
            resp = obj.get("responses")
            if not isinstance(resp, list) or not resp or not all(isinstance(r, str) for r in resp):
                raise ValueError("field 'responses' must be a non-empty list of strings")
            if "greedy" in obj and not isinstance(obj["greedy"], str):
                raise ValueError("field 'greedy' must be a string")
            if idx in out:
                raise ValueError(f"duplicate index {idx}")
        except ValueError as e:
            if not skip_bad:
                raise ValueError(f"{path}: line {lineno}: {e}; pass --skip-bad to skip such lines") from None
            bad.append(f"line {lineno}: {e}")
            continue
        out[idx] = obj
    return out, bad


def _grade_item(it: BenchItem, response: str, checker: MathChecker) -> tuple[str | None, bool]:
    """(answer, correct): IFEval items by lm-eval's loose checkers (answer: the response itself, or None
    when empty), the others by `grade`; a list of golds counts any of them."""
    if it.kind == "ifeval":
        from anchorft.eval.ifeval import ifeval_follows

        user = "\n".join(m["content"] for m in it.messages if m["role"] == "user")
        return (response if response.strip() else None), ifeval_follows(response, it.instructions, user)[0]
    answer, ok = grade(it.gold, response, it.choices, checker)
    for g in it.alt_golds:
        if ok or answer is None:
            break
        ok = grade(g, response, it.choices, checker)[1]
    return answer, ok


def _record(
    it: BenchItem,
    responses: Sequence[str],
    graded: Sequence[tuple[str | None, bool]],
    greedy: str | None = None,
    greedy_graded: tuple[str | None, bool] | None = None,
) -> dict:
    """One item's record: its responses with their answers and correctness (and the greedy one's)."""
    rec = {
        "index": it.index,
        "kind": it.kind,
        "gold": it.gold,
        "responses": list(responses),
        "answers": [a for a, _ in graded],
        "correct": [c for _, c in graded],
        "n_correct": sum(c for _, c in graded),
    }
    if greedy_graded is not None:
        rec.update(greedy=greedy, greedy_answer=greedy_graded[0], greedy_correct=greedy_graded[1])
    return rec


def score_bench(
    bench: Bench,
    responses: dict[int, Sequence[str]],
    greedy: dict[int, str] | None = None,
    checker: MathChecker | None = None,
) -> list[dict]:
    """Grade each item's responses; one record per item present in `responses` (by item index)."""
    by_index = {it.index: it for it in bench.items}
    unknown = sorted(set(responses) - set(by_index))
    if unknown:
        raise ValueError(f"responses name indices not in {bench.path}: {unknown[:10]}")
    checker = checker or default_checker()
    records = []
    for idx in sorted(responses):
        it = by_index[idx]
        graded = [_grade_item(it, r, checker) for r in responses[idx]]
        g = greedy[idx] if greedy is not None and idx in greedy else None
        records.append(_record(it, responses[idx], graded, g, None if g is None else _grade_item(it, g, checker)))
    return records


def summarize(records: Sequence[dict], k: int | None = None) -> dict:
    """Avg@k, Pass@k (unbiased; k defaults to the fewest samples of any item), greedy accuracy."""
    if not records:
        raise ValueError("no records to summarize")
    correct = [r["correct"] for r in records]
    n_min = min(len(c) for c in correct)
    k = n_min if k is None else k
    if not 1 <= k <= n_min:
        raise ValueError(f"k must be in [1, {n_min}] (the fewest samples of any item), got {k}")
    greedy = [r["greedy_correct"] for r in records if "greedy_correct" in r]
    m = prompt_metrics(correct, k, greedy or None)
    out = {
        "n_items": len(records),
        "n_samples": n_min,
        "k": k,
        "avg@k": m["avg@k"],
        "pass@k": m["pass@k"],
        "pass@1": mean_pass_at_k(correct, 1),
        "no_answer_rate": sum(a is None for r in records for a in r["answers"]) / sum(len(c) for c in correct),
    }
    if greedy:
        out["greedy_acc"] = m["greedy"]
        out["n_greedy"] = len(greedy)
    return out


def format_prompts(tokenizer, items: Sequence[BenchItem]) -> list[str]:
    """Apply the tokenizer's chat template (generation prompt added) to each item's messages."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat_template: the benchmarks' prompts are chat messages; "
            "save a chat template with the model (tokenizer_config.json / chat_template.jinja)"
        )
    return [tokenizer.apply_chat_template(it.messages, tokenize=False, add_generation_prompt=True) for it in items]


# ---------------------------------------------------------------- running a model on the sets


def _bench_names(paths: Sequence[Path]) -> list[str]:
    """File stems, prefixed with the parent folder where two files share a stem."""
    stems = [p.stem for p in paths]
    names = [f"{p.parent.name}_{p.stem}" if stems.count(p.stem) > 1 else p.stem for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark files must be distinct, got {[str(p) for p in paths]}")
    return names


def resolve_backend(backend: str) -> str:
    """ "hf" (transformers, the default), "vllm" (needs the `vllm` extra and a GPU), or "auto"."""
    if backend not in ("auto", "hf", "vllm"):
        raise ValueError(f"backend must be auto, hf or vllm, got {backend!r}")
    if backend == "hf":
        return "hf"
    import importlib.util

    import torch

    has_vllm = importlib.util.find_spec("vllm") is not None
    if backend == "vllm":
        from anchorft.eval.vllm_backend import check_vllm

        check_vllm()  # one-line error without vllm or without CUDA
        return "vllm"
    return "vllm" if has_vllm and torch.cuda.is_available() else "hf"


def plot_metrics(all_metrics: dict[str, dict], path: Path) -> None:
    from anchorft.io import pyplot

    plt = pyplot()
    import numpy as np

    names = list(all_metrics)
    keys = [key for key in ("avg@k", "pass@k", "greedy_acc") if any(key in m for m in all_metrics.values())]
    x = np.arange(len(names))
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(names) + 2), 3.5))
    for j, key in enumerate(keys):
        ax.bar(x + j * width, [all_metrics[n].get(key, 0.0) for n in names], width, label=key)
    ax.set_xticks(x + width * (len(keys) - 1) / 2, names, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


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
    checker: MathChecker | None = None,
    progress: bool = True,
) -> dict[str, dict]:
    """Sample `n` responses per item of each benchmark file (plus one greedy), grade, and write
    out_dir/{config.json, metrics.json, metrics.png, NAME/records.jsonl, NAME/metrics.json}.

    Returns {bench name: metrics}. Every file is read and checked before the model is loaded.
    """
    if n < 1 or not 1 <= k <= n:
        raise ValueError(f"need n >= 1 and 1 <= k <= n, got n={n}, k={k}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError("max_new_tokens and batch_size must be >= 1")
    if not bench_paths:
        raise ValueError("no benchmark file given (--bench FILE.jsonl)")
    paths = [Path(p) for p in bench_paths]
    names = _bench_names(paths)
    benches = [load_bench(p, skip_bad=skip_bad, limit=limit, name=nm) for p, nm in zip(paths, names)]
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there (a local model directory is needed)")
    backend = resolve_backend(backend)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = dict(
        model=str(model_dir), benches=[str(p) for p in paths], n=n, k=k, temperature=temperature, top_p=top_p,
        max_new_tokens=max_new_tokens, batch_size=batch_size, limit=limit, seed=seed, greedy=greedy,
        backend=backend, skip_bad=skip_bad,
    )  # fmt: skip
    write_json(out_dir / "config.json", config, indent=2)

    from anchorft.eval.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompts_by_bench = [format_prompts(tokenizer, b.items) for b in benches]
    from anchorft.eval.context import check_prompt_lengths, context_length

    check_prompt_lengths(tokenizer, prompts_by_bench, names, context_length(model_dir), max_new_tokens)
    if backend == "vllm":
        from anchorft.eval.vllm_backend import VLLMBackend

        engine = VLLMBackend(str(model_dir), seed=seed)

        def sampler(bench: Bench) -> Sampler:  # one seed per (seed, item index), as in `eval suite`
            def sample(prompts, n_: int, temp: float) -> list[list[str]]:
                ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]  # the template holds BOS
                keys = [it.index for it in bench.items]
                return engine.generate(
                    ids, keys, n=n_, temperature=temp, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
                )

            return sample
    else:
        import torch
        from transformers import AutoModelForCausalLM

        from anchorft.eval.pipeline import hf_sampler

        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, trust_remote_code=False).to(device)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        hf = hf_sampler(
            model, tokenizer, top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size,
            generator=torch.Generator(device=device).manual_seed(seed), progress=progress, add_special_tokens=False,
        )  # fmt: skip
        engine = None

        def sampler(bench: Bench) -> Sampler:
            return hf

    checker = checker or default_checker()
    all_metrics: dict[str, dict] = {}
    try:
        for bench, prompts in zip(benches, prompts_by_bench):
            items = bench.items
            scored = score_prompts(
                sampler(bench), prompts, lambda i, r, items=items: _grade_item(items[i], r, checker), greedy=greedy,
                n_samples=n, k=k, temperature=temperature,
            )  # fmt: skip
            records = [
                _record(
                    it,
                    scored.samples[i],
                    list(zip(scored.answers[i], scored.correct[i])),
                    scored.greedy[i] if greedy else None,
                    (scored.greedy_answers[i], scored.greedy_correct[i]) if greedy else None,
                )  # fmt: skip
                for i, it in enumerate(items)
            ]
            metrics = summarize(records, k)
            metrics.update(bench=str(bench.path), n_bad_lines=bench.n_bad)
            all_metrics[bench.name] = metrics
            sub = out_dir / bench.name
            sub.mkdir(exist_ok=True)
            write_jsonl(sub / "records.jsonl", records)
            write_json(sub / "metrics.json", metrics, indent=2)
    finally:
        if engine is not None:
            engine.close()
    write_metrics(out_dir / "metrics.json", all_metrics, indent=2)
    plot_metrics(all_metrics, out_dir / "metrics.png")
    return all_metrics
