"""The mistakes users make, as a table: each is refused in one line on stderr (no traceback, no usage dump) with exit
code 2, before torch, transformers, TRL or Ray is imported (which is what keeps it under a second: the tests assert
the imports and a CPU-time bound, not the wall time a shared machine stretches).

The rows run in-process through `anchorft.cli.main`, all in one fresh interpreter (`_run_rows`): after each row the
heavy modules must still be absent, so a row that imports one is the row named. A few rows run through the real
console script (`test_the_console_script_refuses_in_under_a_second`), the whole process's imports. `EXCEPTIONS` are
the mistakes still reported only after a heavy import (one line and exit 2 all the same), each with its reason.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ("torch", "transformers", "trl", "ray")
LIMIT_S = 1.0  # per mistake, on an idle machine (measured by hand: docs/architecture.md)
# What the tests assert is the mechanism, which holds at any load: no heavy module imported, and the CPU time of a
# row (or of a whole console-script process) under CPU_LIMIT_S, which an import of torch alone (about 2 CPU seconds
# here) with transformers would pass; wall time is not asserted (a shared machine stretches it at will).
CPU_LIMIT_S = 2.0


def make_files(f: Path) -> None:
    """Bad and good inputs in the folder the rows run in."""
    (f / "bad.yaml").write_text("pretrain: [\n  steps: 3\n")
    (f / "rl_unknown.yaml").write_text("learning_ratez: 1.0e-6\n")
    (f / "recipe_typo.yaml").write_text("method: sft\nlearning_ratez: 1.0e-5\n")
    (f / "recipe_method.yaml").write_text("method: rpsfft\nlearning_rate: 1.0e-5\n")
    (f / "pointz.yaml").write_text("preset: paper\npointz: [{chi: 0.1}]\nseries: [w2s]\n")
    (f / "empty.jsonl").write_text("")
    (f / "empty.json").write_text("")
    (f / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": \n')
    (f / "good.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    (f / "afile").write_text("x")
    (f / "model").mkdir()
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 100}  # fmt: skip
    (f / "model" / "config.json").write_text(json.dumps(cfg))
    (f / "suite_model").mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (f / "suite_model" / name).write_text("{}")
    (f / "benches" / "id").mkdir(parents=True)
    (f / "benches" / "id" / "adds.jsonl").write_text("{}\n")


TRAIN = ["train", "--model_name_or_path", "model", "--dataset", "good.jsonl", "--out", "o"]
RL = ["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o"]
SUITE = ["eval", "suite", "--models", "m=suite_model", "--bench-dir", "benches", "--benches", "adds", "--out", "o"]
EVAL = ["eval", "--model", "model", "--bench", "good.jsonl", "--out", "o"]
EST = ["train", "--estimate", "--model_config", "model/config.json"]
# (command line, a piece of its one-line message)
ROWS = [
    (["trian"], "did you mean 'train'"),
    (["w2ss", "run"], "did you mean 'w2s'"),
    (["--verison"], "did you mean '--version'"),
    (["w2s", "rn", "--out", "o"], "did you mean 'run'"),
    (["w2s", "run", "--preset", "papr", "--out", "o"], "did you mean 'paper'"),
    (["w2s", "run", "--preset", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
    (["w2s", "run", "--out", "o", "--stpes", "3"], "did you mean --steps"),
    (["w2s", "run", "--preset", "paper", "--out", "o", "rho=2"], "rho=2.0: must be in [0, 1)"),
    (["w2s", "run", "--preset", "paper", "--out", "o", "link=hee4"], "unknown activation/link 'hee4'"),
    (["w2s", "run", "--out", "o", "--n-seeds", "0"], "n_seeds=0: must be a positive integer"),
    (["w2s", "theory", "--link", "hee4"], "unknown activation/link 'hee4'"),
    (["toy", "pretrain", "--preset", "smoke", "--steps", "0", "--out", "o"], "--steps: must be >= 1, got 0"),
    (["toy", "rl", "--compare", "nowhere"], "--compare: nowhere/results.json missing"),
    (["toy", "rl", "--compare", "nowhere", "--num_generations", "1"], "num_generations: must be >= 2"),
    (["toy", "rl", "--compare", "nowhere", "--anchor_method", "l3"], "invalid choice: 'l3'"),
    (["w2s", "theory", "--transform", "zexpp"], "--transform: unknown 'zexpp'"),
    (["w2s", "theory", "--preset", "paper", "transform=zexpp"], "transform='zexpp': must be one of"),
    (["w2s", "run", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "run", "--out", "afile/sub"], "afile is a file"),
    (["w2s", "run", "--steps", "abc", "--out", "o"], "invalid int value: 'abc'"),
    (["w2s", "run", "--seeds", "3", "--out", "o"], "--n-seeds 3"),
    (["w2s", "run"], "required: --out"),
    (["w2s", "sweep", "--kind", "chi", "--quick", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "sweep", "--kind", "chi", "--workers", "0", "--out", "o"], "--workers"),
    (["w2s", "theory", "--preset", "nope"], "nope"),
    (["train"], "missing --model_name_or_path --dataset"),
    (["train", "--config", "nope.yaml"], "nope.yaml"),
    (["train", "--config", "bad.yaml"], "bad.yaml:3:1: malformed YAML"),
    (["train", "--config", "rpsft/qwen2.5-3b-instruct/rpsf"], "did you mean 'rpsft/qwen2.5-3b-instruct/rpsft'"),
    (
        [
            "train",
            "--config",
            "recipe_typo.yaml",
            "--model_name_or_path",
            "model",
            "--dataset",
            "good.jsonl",
            "--out",
            "o",
        ],
        "learning_ratez",
    ),
    ([*TRAIN, "--learnig_rate", "1e-5"], "did you mean --learning_rate"),
    ([*TRAIN, "--method", "rpsfft"], "invalid choice: 'rpsfft'; did you mean 'rpsft'?"),
    ([*TRAIN, "--learning_rate", "abc"], "invalid float value: 'abc'"),
    ([*TRAIN, "--learning_rate", "0"], "learning_rate"),
    ([*TRAIN, "--max_steps", "0"], "max_steps"),
    ([*TRAIN, "--report_to", "tensorbord"], "did you mean 'tensorboard'?"),
    ([*TRAIN, "--anchor_rank", "-1"], "anchor_rank must be an integer >= 1, got -1"),
    ([*TRAIN, "--anchor_lambda", "-1"], "anchor_lambda must be >= 0, got -1.0"),
    ([*TRAIN, "--anchor_every", "0"], "anchor_every must be an integer >= 1, got 0"),
    ([*TRAIN, "--method", "lora", "--lora_rank", "0"], "lora_rank must be an integer >= 1, got 0"),
    ([*TRAIN, "--method", "lora", "--lora_dropout", "1.5"], "lora_dropout must be in [0, 1), got 1.5"),
    (["train", "--config", "recipe_method.yaml", *TRAIN[1:]], "method: unknown 'rpsfft'; did you mean 'rpsft'?"),
    (
        ["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o", "--report_to", "wandbb"],
        "did you mean 'wandb'?",
    ),  # fmt: skip
    (["toy", "pack", "--from", "nowhere", "--out", "o"], "nowhere"),
    (["eval", "score", "--bench", "nope.jsonl", "--responses", "good.jsonl"], "--bench: nope.jsonl does not exist"),
    (["analyze", "--base", "./no/base", "--out", "o"], "--base: ./no/base does not exist"),
    (["analyze", "--out", "o"], "--base is required"),
    (["analyze", "--base", "model", "--tuned", "sft=./no/sft", "--out", "o"], "--tuned sft: ./no/sft does not exist"),
    (["analyze", "--base", "model", "--prompts", "nope.jsonl", "--out", "o"], "--prompts: nope.jsonl does not exist"),
    (["analyze", "--compare", "nowhere", "--out", "o"], "--compare: nowhere is not a folder"),
    (["eval", "score", "--bench", "good.jsonl", "--responses", "model"], "--responses: model is a folder"),
    (["eval", "score", "--bench", "good.jsonl", "--responses", "good.jsonl", "--k", "0"], "--k: must be >= 1"),
    ([*TRAIN, "--lr_scheduler_type", "cosin"], "invalid choice: 'cosin'; did you mean 'cosine'?"),
    ([*TRAIN, "--optim", "adamw_torh"], "did you mean 'adamw_torch'?"),
    ([*TRAIN, "--per_device_train_batch_size", "abc"], "invalid int value: 'abc'"),
    ([*TRAIN, "--anchor_svd", "fast"], "fast"),
    ([*TRAIN, "--bf16", "maybe"], "Truthy value expected: got maybe"),
    (["train", "--model_name_or_path", "./no/such/model", "--dataset", "good.jsonl", "--out", "o"], "./no/such/model"),
    (["train", "--model_name_or_path", "model", "--dataset", "empty.jsonl", "--out", "o"], "empty.jsonl is empty"),
    (["train", "--model_name_or_path", "model", "--dataset", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["train", "--model_name_or_path", "model", "--dataset", "nope.jsonl", "--out", "o"], "nope.jsonl"),
    (
        ["train", "--model_name_or_path", "model", "--dataset", "good.jsonl", "--out", "afile"],
        "afile exists and is a file",
    ),
    (["train", "--estimate", "--model_config", "empty.json"], "empty.json is empty"),
    (["train", "--estimate", "--model_config", "nope.json"], "nope.json"),
    ([*EST, "--stage", "zero4"], "did you mean 'zero3'?"),
    ([*EST, "--seq_len", "0"], "seq_len"),
    (["train", "--estimate"], "--model_config"),
    (["train", "--dry-run", "--config", "nope.yaml"], "nope.yaml"),
    (["train", "--dry-run"], "--config"),
    (["rl"], "--model"),
    (["rl", "--max_step", "2"], "did you mean --max_steps"),
    ([*RL, "--learning_rate", "0"], "learning_rate > 0"),
    ([*RL, "--anchor_method", "nope"], "nope"),
    ([*RL, "--config", "rl_unknown.yaml"], "learning_ratez"),
    ([*RL, "--config", "bad.yaml"], "bad.yaml:3:1"),
    (["rl", "--model", "afile", "--dataset", "good.jsonl", "--out", "o"], "is a file"),
    (["rl", "--model", "model", "--dataset", "bad.jsonl", "--out", "o"], "bad.jsonl:2"),
    (["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    ([*RL, "--temperature", "0"], "temperature"),
    (["toy", "comapre", "--out", "o"], "did you mean 'compare'"),
    (["toy", "pretrain", "--preset", "smok", "--out", "o"], "did you mean 'smoke'"),
    (["toy", "compare", "--preset", "smok", "--out", "o"], "did you mean 'smoke'"),
    (["toy", "compare", "--preset", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
    (["toy", "compare", "--preset", "smoke", "--threads", "0", "--out", "o"], "--threads: must be >= 1"),
    (["toy", "compare", "--preset", "smoke", "--n-seeds", "0", "--out", "o"], "--n-seeds: must be >= 1"),
    (["toy", "compare", "--preset", "smoke", "--workers", "0", "--out", "o"], "--workers: must be >= 1"),
    (["toy", "compare", "--out", "o", "--n-seed", "2"], "did you mean --n-seeds"),
    (["toy", "compare", "--seeds", "x", "--out", "o"], "invalid int value: 'x'"),
    (["toy", "compare", "--preset", "smoke", "--out", "afile"], "afile exists and is a file"),
    (["toy", "pretrain", "--preset", "smoke", "--out", "afile"], "afile exists and is a file"),
    (["toy", "verdict", "--from", "nowhere", "--runs", "a", "--front", "b", "--out", "o"], "nowhere"),
    (["eval", "--model", "./no/such/model", "--bench", "good.jsonl", "--out", "o"], "does not exist"),
    (["eval", "--model", "model", "--bench", "nope.jsonl", "--out", "o"], "nope.jsonl does not exist"),
    (["eval", "--model", "model", "--bench", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    ([*EVAL, "--k", "5", "--n", "2"], "--k"),
    (["eval", "--model", "model", "--out", "o"], "--bench"),
    ([*EVAL, "--temprature", "1"], "did you mean --temperature"),
    ([*SUITE, "--preset", "nope"], "unknown preset 'nope'"),
    (["eval", "suite", "--models", "m", "--out", "o"], "NAME=DIR"),
    (["data", "openr1"], "did you mean 'openr1-math'"),
    (["data", "openr1-math"], "required: --out"),
    (["data", "openr1-math", "--source", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["data", "openr1-math", "--source", "empty.jsonl", "--out", "o"], "empty.jsonl is empty"),
    (["data", "openr1-math", "--source", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["data", "openr1-math", "--sampler", "nope", "--out", "o"], "invalid choice: 'nope'"),
    (["data", "openr1-math", "--sampler", "verified", "--size", "0", "--source", "good.jsonl", "--out", "o"], "size"),
    (["data", "dapo-math", "--source", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["data", "dapo-math", "--source", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["analyze", "--base", "model", "--out", "afile"], "afile exists and is a file"),
    (["analyze", "--base", "model", "--tuned", "bad", "--out", "o"], "NAME=DIR"),
    (["analyze", "--base", "model", "--tuned", "a=model", "--threads", "0", "--out", "o"], "--threads"),
    (["configs", "path", "rpsft/qwen2.5-3b-instruct/rpsf"], "did you mean 'rpsft/qwen2.5-3b-instruct/rpsft'"),
    (["configs", "list", "nope"], "no shipped config under 'nope'"),
    (["configs", "copy", "toy/smok", "dir"], "did you mean 'toy/smoke'"),
    (["configs", "render", "slurm/one-node", "--env", "FOO"], "FOO is not NAME=VALUE"),
    (["configs", "lst"], "did you mean 'list'"),
    (["train", "--estimate", "--help-me"], "did you mean --help"),
]
# (command line, piece, why it is still reported after a heavy import): one line and exit 2, not under a second
EXCEPTIONS = [
    (["w2s", "sweep", "--kind", "rac", "--out", "o"], "did you mean 'race'?",
     "the kinds are the rows of studies/w2s/sweeps.KINDS, a module that imports torch"),
    (["w2s", "sweep", "--kind", "chi", "--spec", "pointz.yaml", "--out", "o"], "unknown key 'pointz'",
     "a sweep file is read and checked by the sweep kinds' own code (studies/w2s/sweeps.py, torch)"),
    (["toy", "compare", "--preset", "smoke", "--methods", "nope", "--out", "o"], "methods: unknown ['nope']",
     "the comparison's config (studies/testbed/compare_config.py) imports torch"),
    ([*EST, "--gpus", "3", "--config", "rpsft/qwen2.5-3b-instruct/rpsft"], "batch of 16 sequences",
     "train --estimate validates the recipe through RPSFTConfig's types (rpsft/recipes.load_recipe, torch)"),
]  # fmt: skip

# the rows a test runs in one interpreter: for each, (rc, stderr, CPU seconds, heavy modules loaded by then)
RUNNER = f"""
import contextlib, io, json, sys, time
from anchorft.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    t = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(argv)
    dt = time.process_time() - t
    print(json.dumps([rc, err.getvalue(), dt, sorted(set({HEAVY!r}) & set(sys.modules))]), flush=True)
"""


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("ANCHORFT_DEBUG", None)
    return env


def _run_rows(rows: list[list[str]], folder: Path) -> list[tuple[int, str, float, list[str]]]:
    p = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(rows)], cwd=folder, env=_env(),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return [tuple(json.loads(line)) for line in p.stdout.splitlines()]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("mistakes")
    make_files(f)
    return f


def _one_line(argv: list[str], piece: str, rc: int, err: str) -> list[str]:
    """What is wrong with a refusal: [] when it is one line naming `piece` with exit code 2."""
    lines = err.strip().splitlines()
    problems = [] if rc == 2 else [f"exit {rc}"]
    problems += [] if len(lines) == 1 else [f"{len(lines)} lines"]
    problems += [] if lines and piece in lines[0] and "Traceback" not in err else [f"not {piece!r}"]
    return [f"{' '.join(argv)}: {', '.join(problems)}: {err.strip()[-300:]}"] if problems else []


def test_the_table_covers_at_least_60_mistakes_and_at_most_5_exceptions():
    assert len(ROWS) >= 60 and len(EXCEPTIONS) <= 5
    assert len({tuple(a) for a, _ in ROWS}) == len(ROWS)


def test_each_mistake_is_one_line_exit_2_under_a_second_before_heavy_imports(folder):
    results = _run_rows([argv for argv, _ in ROWS], folder)
    assert len(results) == len(ROWS)
    bad = []
    for (argv, piece), (rc, err, seconds, heavy) in zip(ROWS, results):
        bad += _one_line(argv, piece, rc, err)
        bad += [f"{' '.join(argv)}: imported {heavy}"] if heavy else []
        bad += [f"{' '.join(argv)}: {seconds:.2f} CPU s"] if seconds > CPU_LIMIT_S else []
        if heavy:
            break  # the rows after it would find it loaded too
    assert bad == []
    assert sorted(p.name for p in folder.iterdir() if p.name in ("o", "dir", "runs")) == []  # nothing written


def test_the_exceptions_are_one_line_and_exit_2(folder):
    results = _run_rows([argv for argv, _, _ in EXCEPTIONS], folder)
    bad = [
        b for (argv, piece, _), (rc, err, _, _) in zip(EXCEPTIONS, results) for b in _one_line(argv, piece, rc, err)
    ]
    assert bad == []


def _console() -> list[str]:
    script = shutil.which("anchorft", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "anchorft.cli"]


@pytest.mark.parametrize(
    "argv,piece",
    [
        (["trian"], "did you mean 'train'"),
        (["toy", "pretrain", "--preset", "smok", "--out", "o"], "did you mean 'smoke'"),
        ([*TRAIN, "--lr_scheduler_type", "cosin"], "did you mean 'cosine'"),
        (["rl", "--model", "afile", "--dataset", "good.jsonl", "--out", "o"], "is a file"),
        (["w2s", "run", "--preset", "papr", "--out", "o"], "did you mean 'paper'"),
    ],
)
def test_the_console_script_refuses_in_under_a_second(argv, piece, folder):
    """The whole process, interpreter start included: its imports (Python's import-time report) name no heavy
    module, and its CPU time stays under CPU_LIMIT_S; the wall time is printed (about 0.3-0.7 s on an idle machine)."""
    env = {**_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([*_console(), *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imports = [line for line in p.stderr.splitlines() if line.startswith("import time:")]
    err = "\n".join(line for line in p.stderr.splitlines() if not line.startswith("import time:"))
    assert _one_line(argv, piece, p.returncode, err) == []
    names = {line.rsplit("|", 1)[-1].strip() for line in imports}
    assert len(names) > 50 and not names & set(HEAVY), sorted(names & set(HEAVY))
    print(f"{' '.join(argv)}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    assert cpu < CPU_LIMIT_S, cpu


@pytest.mark.parametrize(
    "command", ["train", "rl", "train --estimate", "toy", "toy rl", "eval suite", "eval score", "w2s sweep", "analyze"]
)
def test_help_loads_no_heavy_library(command, folder):
    """`--help` of each command needs none of them (the slowest helps before: train, rl, eval suite)."""
    results = _run_rows([[*command.split(), "--help"]], folder)
    rc, err, seconds, heavy = results[0]
    assert rc == 0 and heavy == [] and seconds < CPU_LIMIT_S, (err, heavy, seconds)
