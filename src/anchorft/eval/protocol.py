"""The evaluation protocol: the RPSFT paper's benchmark lists, its system prompt, the settings a run's samples
depend on, and the inputs checked before any model loads.

The paper preset follows the public release's protocol (its README and `evaluation/`): in-domain sets
aime-24, aime-25, amc, math500, minerva, olympiadBench (1,547 items); out-of-domain sets mmlu_pro and the
`*_test` files (about 50 items each; gpqa_test when the user has put it beside them); every prompt's
system message replaced by the release's boxed few-shot prompt (`boxed_system_prompt`); 10,240 new
tokens at most (16,384 for RL checkpoints); temperature 0.7, top_p 0.95, n = 16 samples; Avg@16 (mean
correctness) and Pass@16 (here the unbiased estimator from n = 16 samples, i.e. any of the 16 correct).
`anchorft eval` runs the same settings with its own defaults (each file's own prompt, 4,096 new tokens, a
greedy pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from anchorft.eval.benchmarks import BenchItem
from anchorft.preflight import resolve_model_folder

__all__ = [
    "PAPER_ID",
    "PAPER_OOD",
    "BOXED_FEWSHOT_PROMPT",
    "SuiteSettings",
    "boxed_system_prompt",
    "format_prompts",
    "token_prompts",
    "bench_names",
    "resolve_benches",
    "check_model_dir",
    "check_models",
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
    greedy: bool = False  # also one greedy (temperature 0) completion per item: greedy_acc
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
        key = dict(
            n=self.n, temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.new_tokens,
            prompt=self.prompt, seed=self.seed,
        )  # fmt: skip
        return {**key, "greedy": True} if self.greedy else key


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
        ood = list(PAPER_OOD) + sorted(p.stem for p in (root / "ood").glob("*_test.jsonl"))
        out = [(nm, dom, root / dom / f"{nm}.jsonl") for dom, nms in (("id", PAPER_ID), ("ood", ood)) for nm in nms]
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
    out: dict[str, Path] = {}
    for name, path in named.items():
        if "/" in name or name.startswith("."):
            raise ValueError(f"--models {name}={path}: NAME is a folder name in --out (no '/')")
        out[name] = check_model_dir(name, resolve_model_folder(path, f"--models {name}"))
    if not out:
        raise ValueError("--models: give at least one NAME=DIR")
    return out


def format_prompts(tokenizer, items: Sequence[BenchItem], prompt: str = "file") -> list[str]:
    """Each item's messages (the system message set to the protocol's with `prompt` "boxed-fewshot") through the
    tokenizer's chat template, generation prompt added."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat_template: the benchmarks' prompts are chat messages; "
            "save a chat template with the model (tokenizer_config.json / chat_template.jinja)"
        )
    msgs = [boxed_system_prompt(it.messages) if prompt == "boxed-fewshot" else it.messages for it in items]
    return [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in msgs]


def token_prompts(tokenizer, items: Sequence[BenchItem], prompt: str) -> list[list[int]]:
    """`format_prompts` as token ids (the template holds BOS: no special tokens added)."""
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in format_prompts(tokenizer, items, prompt)]


def bench_names(paths: Sequence[Path]) -> list[str]:
    """File stems, prefixed with the parent folder where two files share a stem."""
    stems = [p.stem for p in paths]
    names = [f"{p.parent.name}_{p.stem}" if stems.count(p.stem) > 1 else p.stem for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark files must be distinct, got {[str(p) for p in paths]}")
    return names
