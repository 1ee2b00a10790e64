"""The evaluation commands' arguments (`anchorft eval`, `eval score`, `eval suite`): dataclasses whose fields are
the flags (`anchorft.dataclass_flags.add_field_flags`); `eval` and `eval suite` add `SamplingArguments`' too, with
each command's own sampling defaults (`run_eval`'s, `SuiteSettings`') given to the parser, not restated here.
Light on purpose: a mistake is reported before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from anchorft.dataclass_flags import OVERWRITE, keyword_defaults, meta
from anchorft.eval.answers import MathChecker
from anchorft.eval.vllm_backend import VLLMOptions

__all__ = ["SamplingArguments", "EvalArguments", "ScoreArguments", "SuiteArguments", "SUITE_PRESETS", "pass_k"]

SUITE_PRESETS = ("paper",)


SKIP_BAD = meta("skip and count malformed lines instead of failing")
TIMEOUT = meta("math-verify timeout per check, seconds")
TIMEOUT_S = keyword_defaults(MathChecker)["timeout_s"]


@dataclass(kw_only=True)
class SamplingArguments:
    """The generation and grading flags of `anchorft eval` and `anchorft eval suite`: samples, k, sampling, token
    limit, seed, item limit, backend, batch size, bad lines, math-verify timeout."""

    n: int | None = field(default=None, **meta("samples per item"))
    k: int | None = field(default=None, **meta("k of Avg@k / Pass@k (<= n; default: n)"))
    temperature: float | None = field(default=None, **meta("sampling temperature"))
    top_p: float | None = field(default=None, **meta("nucleus sampling"))
    max_new_tokens: int | None = field(default=None, **meta("per response"))
    seed: int | None = field(default=None, **meta("sampling seed"))
    limit: int | None = field(default=None, **meta("first N items of each file (lm-eval: per task)"))
    backend: str = field(default="auto", **meta("auto: vLLM if installed + GPU", choices=("auto", "hf", "vllm")))
    batch_size: int | None = field(default=None, **meta("rows per batch"))
    skip_bad: bool = field(default=False, **SKIP_BAD)
    timeout: float = field(default=TIMEOUT_S, **TIMEOUT)


@dataclass(kw_only=True)
class EvalArguments:
    """Evaluate a local model on the paper's JSONL benchmarks (Avg@k, unbiased Pass@k, greedy accuracy), or run
    lm-evaluation-harness tasks with --lm-eval. `anchorft eval score --help` scores responses produced elsewhere;
    `anchorft eval suite --help` evaluates several models on the paper's whole ID / OOD suite with one table."""

    model: str = field(**meta("local model directory (config.json, weights, tokenizer)"))
    bench: list[str] = field(default_factory=list, **meta("benchmark JSONL file; repeat for several", repeat=True))
    lm_eval: str | None = field(default=None, **meta("comma-separated lm-eval task names or YAML files"))
    include_path: list[str] = field(default_factory=list, **meta("folder of custom lm-eval task YAMLs", repeat=True))
    out: str = field(**meta("output directory"))
    greedy: bool = field(default=True, **meta("skip the greedy pass", flag="--no-greedy"))
    num_fewshot: int | None = field(default=None, **meta("lm-eval: few-shot examples"))
    apply_chat_template: bool = field(default=False, **meta("lm-eval: apply the model's chat template"))
    overwrite: bool = field(default=False, **OVERWRITE)


@dataclass(kw_only=True)
class ScoreArguments:
    """Score responses produced elsewhere. RESPONSES: one JSON line per item, {"index": i, "responses": [str, ...]}
    (optional "greedy": str); i is the 0-based item position in the benchmark file. Prints the metrics as one JSON
    object."""

    bench: str = field(**meta("benchmark JSONL file (the paper's format)"))
    responses: str = field(**meta("responses JSONL file"))
    k: int | None = field(default=None, **meta("k of Pass@k (default: fewest samples of any item)"))
    skip_bad: bool = field(default=False, **SKIP_BAD)
    records: str | None = field(default=None, **meta("also write per-item records (JSONL) here"))
    timeout: float = field(default=TIMEOUT_S, **TIMEOUT)


@dataclass(kw_only=True)
class SuiteArguments:
    """Run every model on every benchmark of the RPSFT paper's protocol (resumable: rerun the same command after an
    interruption) and write the main table (table.json, table.md, table.png)."""

    models: list[str] = field(
        **meta(
            "a model folder or a hub id (e.g. Qwen/Qwen2.5-3B-Instruct); the first is the base of the deltas",
            metavar="NAME=HUB_ID_OR_DIR",
        )
    )
    bench_dir: str | None = field(
        default=None,
        **meta(
            "folder with id/ and ood/ JSONL files in the paper's format (default: $ANCHORFT_BENCHMARKS, else the "
            "user's data folder, where `anchorft data benchmarks` writes them)"
        ),
    )
    out: str = field(**meta("output folder (reuse it to resume, or to add models or benchmarks)"))
    overwrite: bool = field(default=False, **OVERWRITE)
    preset: str = field(default="paper", **meta(f"the release's protocol (the defaults): {', '.join(SUITE_PRESETS)}"))
    benches: str | None = field(default=None, **meta("comma-separated file names instead of the preset's list"))
    rl_checkpoint: bool = field(default=False, **meta("RL checkpoints: the longer token limit (rl_max_new_tokens)"))
    prompt: str | None = field(default=None, **meta("system prompt", choices=("boxed-fewshot", "file")))
    chunk: int | None = field(default=None, **meta("items between two saves of generations"))
    max_batch_tokens: int | None = field(default=None, **meta("hf: padded tokens"))
    tp: int = field(default=VLLMOptions().tensor_parallel_size, **meta("vllm: GPUs per engine",
                                                                        flag="--tensor-parallel"))  # fmt: skip
    dp: int | None = field(default=None, **meta("vllm: engines (default: GPUs // tp)", flag="--data-parallel"))
    prefix_caching: bool = field(default=True, **meta("vllm", flag="--no-prefix-caching"))
    calibrate: bool = field(default=True, **meta("skip the timing estimate", flag="--no-calibrate"))
    cell_cpus: int | None = field(
        default=None, **meta("with --executor ray: the CPUs (torch threads) each model's task holds (default 1)")
    )
    cell_gpus: float | None = field(
        default=None,
        **meta(
            "with --executor ray: the GPUs each model's task holds (default: --tensor-parallel x --data-parallel (1 "
            "when not given) with --backend vllm, else 0: give 1 for the hf backend on GPU nodes)"
        ),
    )


def pass_k(args) -> int:
    """k of Avg@k / Pass@k: --k, or --n when not given."""
    return args.n if args.k is None else args.k
