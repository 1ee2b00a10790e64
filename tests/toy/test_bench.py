"""`anchorft toy bench`: the testbed's held-out math items as benchmark files, and docs/eval.md's CPU example of
`anchorft eval` on the testbed model, run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anchorft.toy import skills as sk
from anchorft.toy.bench import MATH_SKILLS, bench_rows, write_benches

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
EXAMPLE_HEADING = "### On CPU: the testbed model"


def _tiny_testbed_model(out: Path) -> Path:
    """An untrained testbed model (the testbed's tokenizer and chat template) built from a small PretrainConfig."""
    from anchorft.toy.pretrain import PretrainConfig, build_model, build_tokenizer

    cfg = PretrainConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    tok = build_tokenizer(np.random.default_rng(0))
    build_model(cfg, len(tok), tok, seed=0).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def example_lines() -> list[list[str]]:
    """The `anchorft` command lines of docs/eval.md's CPU example (continuations joined, comments dropped)."""
    text = (ROOT / "docs" / "eval.md").read_text(encoding="utf-8")
    section = text[text.index(EXAMPLE_HEADING) :]
    block = re.search(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S).group(1)
    return [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_rows_are_benchmark_items_the_testbed_prompts_as_its_own_evaluation(tmp_path):
    from anchorft.eval.benchmarks import load_bench
    from anchorft.eval.protocol import format_prompts

    tok_dir = _tiny_testbed_model(tmp_path / "m")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    paths = write_benches(tmp_path / "b", MATH_SKILLS, 30, seed=0)
    assert [p.name for p in paths] == [f"{s}.jsonl" for s in MATH_SKILLS]
    for skill, path in zip(MATH_SKILLS, paths):
        bench = load_bench(path)
        assert len(bench.items) == 30 and len({json.loads(line)["key"] for line in path.open()}) == 30
        prompts = format_prompts(tok, bench.items)
        items = {json.loads(line)["key"]: line for line in path.open()}
        for prompt, key, item in zip(prompts, items, bench.items):
            assert sk.split_of(skill, key) == "eval"  # never trained on
            assert prompt == tok.bos_token + sk.format_prompt(item.messages[0]["content"])
            assert len(tok(prompt, add_special_tokens=False)["input_ids"]) + 16 <= 128  # fits the context
            assert item.gold.isdigit()


def test_a_skill_draws_the_same_items_whatever_is_written_beside_it():
    assert bench_rows("math_word", 5, seed=3) == bench_rows("math_word", 5, seed=3)
    assert bench_rows("math_word", 5, seed=3) != bench_rows("math_word", 5, seed=4)
    with pytest.raises(ValueError, match="not a math skill of the testbed"):
        bench_rows("reverse", 5)


def test_the_documented_cpu_example_of_eval_runs_on_a_tiny_testbed_model(tmp_path):
    """docs/eval.md's lines, as written, in a fresh folder; the pretraining line's model is an untrained one built
    from a config (pretraining takes minutes), saved where that line puts it."""
    lines = example_lines()
    assert [line[:2] for line in lines] == [["anchorft", "toy"], ["anchorft", "toy"], ["anchorft", "eval"]]
    pretrain, bench, evaluate = lines
    assert pretrain[2] == "pretrain"
    _tiny_testbed_model(tmp_path / pretrain[pretrain.index("--out") + 1])
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    for argv in (bench, evaluate):
        r = subprocess.run([sys.executable, "-m", "anchorft", *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
        assert r.returncode == 0, (argv, r.stderr[-3000:])
    out = tmp_path / evaluate[evaluate.index("--out") + 1]
    metrics = json.loads(r.stdout.strip().splitlines()[-1])
    benches = [Path(evaluate[i + 1]).stem for i, a in enumerate(evaluate) if a == "--bench"]
    assert sorted(metrics) == sorted(benches) and (out / "metrics.json").is_file()
    for name in benches:
        assert metrics[name]["n_items"] == 50 and metrics[name]["n_greedy"] == 50 and metrics[name]["k"] == 4
