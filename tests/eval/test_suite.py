"""`anchorft eval suite` end to end on a tiny testbed model, resumption, the main table, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from anchorft.eval.protocol import BOXED_FEWSHOT_PROMPT, SuiteSettings, boxed_system_prompt, resolve_benches
from anchorft.eval.report import main_table, table_markdown

SYS = "Please reason step by step, and put your final answer within \\boxed{}."


def _line(user: str, gold, **extra) -> str:
    return json.dumps({"prompt": [{"role": "system", "content": SYS}, {"role": "user", "content": user}],
                       "reward_model": {"ground_truth": gold, **extra}})  # fmt: skip


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory) -> Path:
    """A tiny untrained testbed model (anchorft.toy's tokenizer and Llama builder) saved to a folder."""
    import torch

    from anchorft.toy.pretrain import PretrainConfig, build_model, build_tokenizer

    torch.set_num_threads(1)
    tok = build_tokenizer(np.random.default_rng(0))
    cfg = PretrainConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    model = build_model(cfg, len(tok), tok, seed=0)
    out = tmp_path_factory.mktemp("toy_model")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture
def bench_dir(tmp_path) -> Path:
    root = tmp_path / "benches"
    (root / "id").mkdir(parents=True)
    (root / "ood").mkdir()
    (root / "id" / "adds.jsonl").write_text("\n".join(_line(f"what is {a} + {a}?", 2 * a) for a in range(1, 4)) + "\n")
    (root / "id" / "olymp.jsonl").write_text(_line("what is 1 + 1?", ["2"]) + "\n")
    mc = "Which is a fruit?\n\nChoices:\nA. apple\nB. stone\n\nAnswer with the option letter."
    (root / "ood" / "pick_test.jsonl").write_text(
        _line(mc, "A") + "\n" + _line(mc.replace("apple", "rock"), "B") + "\n"
    )
    return root


def _run(argv: list[str]) -> int:
    from anchorft.cli import command

    main = command("eval")

    return main(argv)


def test_boxed_prompt_replaces_inserts_and_keeps():
    msgs = [{"role": "system", "content": "x"}, {"role": "user", "content": "q"}]
    assert boxed_system_prompt(msgs) == [{"role": "system", "content": BOXED_FEWSHOT_PROMPT}, msgs[1]]
    assert msgs[0]["content"] == "x"  # the input is not changed
    assert boxed_system_prompt(msgs[1:]) == [{"role": "system", "content": BOXED_FEWSHOT_PROMPT}, msgs[1]]
    kept = [{"role": "system", "content": "Always finish your response my way."}, msgs[1]]
    assert boxed_system_prompt(kept) == kept


def test_boxed_prompt_is_the_one_in_the_release_files(bench_root):
    # several shipped OOD files already carry the release's converted system prompt: ours must equal it
    path = bench_root / "ood" / "safety_benchmark_test.jsonl"
    first = json.loads(path.read_text().splitlines()[0])["prompt"][0]
    assert first["role"] == "system" and first["content"] == BOXED_FEWSHOT_PROMPT


def test_paper_preset_file_list(bench_root):
    specs = resolve_benches(bench_root)
    names = [n for n, _, _ in specs]
    assert names[:6] == ["aime-24", "aime-25", "amc", "math500", "minerva", "olympiadBench"]
    ood = {n for n, d, _ in specs if d == "ood"}
    assert "mmlu_pro" in ood and "arc_c_test" in ood and "ifeval_loose_test" in ood and "supergpqa_test" in ood
    assert "arc_c" not in ood and "aime-2025" not in names
    assert ("gpqa_test" in ood) == (bench_root / "ood" / "gpqa_test.jsonl").is_file()


def test_settings_token_limits():
    assert SuiteSettings().new_tokens == 10240
    assert SuiteSettings(rl_checkpoint=True).new_tokens == 16384
    s = SuiteSettings()
    assert (s.n, s.k, s.temperature, s.top_p, s.prompt) == (16, 16, 0.7, 0.95, "boxed-fewshot")


def test_suite_end_to_end_resumes_and_writes_the_table(toy_model, bench_dir, tmp_path, capsys):
    out = tmp_path / "suite"
    argv = ["suite", "--models", f"base={toy_model}", f"tuned={toy_model}", "--bench-dir", str(bench_dir),
            "--out", str(out), "--benches", "adds,olymp,pick_test", "--n", "3", "--max-new-tokens", "5",
            "--chunk", "2", "--backend", "hf", "--batch-size", "4"]  # fmt: skip
    assert _run(argv) == 0
    err = capsys.readouterr().err
    assert "calibration:" in err and "estimate" in err
    table = json.loads((out / "table.json").read_text())
    assert (out / "table.md").is_file() and (out / "table.png").stat().st_size > 0
    assert table["base"] == "base" and table["k"] == 3
    assert table["provenance"]["anchorft"] and "git_commit" in table["provenance"]
    row = table["models"]["tuned"]
    assert set(row["benches"]) == {"adds", "olymp", "pick_test"}
    m_adds = json.loads((out / "tuned" / "adds" / "metrics.json").read_text())
    m_olymp = json.loads((out / "tuned" / "olymp" / "metrics.json").read_text())
    assert m_adds["provenance"]["torch"] and "git_dirty" in m_olymp["provenance"]
    assert row["id_mean_avg@k"] == pytest.approx((m_adds["avg@k"] + m_olymp["avg@k"]) / 2)
    assert row["delta_id_mean_avg@k"] == pytest.approx(row["id_mean_avg@k"] - table["models"]["base"]["id_mean_avg@k"])
    gens = (out / "tuned" / "adds" / "generations.jsonl").read_text().splitlines()
    assert [json.loads(g)["index"] for g in gens] == [0, 1, 2]
    assert all(len(json.loads(g)["responses"]) == 3 for g in gens)
    # same weights, same seeds: both models draw the same samples
    assert gens == (out / "base" / "adds" / "generations.jsonl").read_text().splitlines()

    # interrupted after the first chunk: the rerun regenerates only the rest, and draws what it drew before (an
    # interrupted model is not in the grid's record, cells.jsonl: only finished models are)
    cells = (out / "cells.jsonl").read_text().splitlines()
    assert [json.loads(c)["name"] for c in cells] == ["base", "tuned"]
    (out / "cells.jsonl").write_text(cells[0] + "\n")
    pair = out / "tuned" / "adds"
    (pair / "metrics.json").unlink()
    (pair / "generations.jsonl").write_text(gens[0] + "\n" + gens[1][: len(gens[1]) // 2])  # a torn line
    assert _run(argv + ["--no-calibrate"]) == 0
    assert "resuming, 1 of 3 items saved" in capsys.readouterr().err
    assert (pair / "generations.jsonl").read_text().splitlines()[-2:] == gens[1:]

    # other sampling settings on the same folder: refused (the run marker's protocol hash)
    assert _run(argv + ["--temperature", "0.5"]) == 2
    assert "holds another run" in capsys.readouterr().err


def test_suite_rerun_keeps_finished_pairs(toy_model, bench_dir, tmp_path, capsys, monkeypatch):
    """Same protocol: finished (model, benchmark) pairs are kept, new models and benchmarks added to the folder;
    a name bound to another model folder and another protocol are refused; --overwrite starts afresh."""
    out = tmp_path / "suite"
    base = ["suite", "--bench-dir", str(bench_dir), "--out", str(out), "--n", "2", "--max-new-tokens", "3",
            "--backend", "hf", "--no-calibrate"]  # fmt: skip
    assert _run([*base, "--models", f"a={toy_model}", "--benches", "adds"]) == 0
    marker = json.loads((out / "anchorft-run.json").read_text())
    assert marker["status"] == "complete" and marker["notes"]["models"] == {"a": str(toy_model.resolve())}
    gens = (out / "a" / "adds" / "generations.jsonl").read_bytes()
    capsys.readouterr()

    import anchorft.eval.hf_backend as hf_backend

    made = []
    real = hf_backend.HFBackend.generate

    def counting(self, token_ids, keys, **kw):
        made.append((self, list(keys)))
        return real(self, token_ids, keys, **kw)

    monkeypatch.setattr(hf_backend.HFBackend, "generate", counting)
    loads = []
    real_init = hf_backend.HFBackend.__init__

    def counting_init(self, path, *a, **kw):
        loads.append(Path(path).name)
        real_init(self, path, *a, **kw)

    monkeypatch.setattr(hf_backend.HFBackend, "__init__", counting_init)
    # the same run again, plus a model and a benchmark: only the new pairs generate
    twin = tmp_path / "twin"
    shutil.copytree(toy_model, twin)
    assert _run([*base, "--models", f"a={toy_model}", f"b={twin}", "--benches", "adds,olymp"]) == 0
    assert "a/adds: done before, kept" in capsys.readouterr().err
    assert (out / "a" / "adds" / "generations.jsonl").read_bytes() == gens
    assert sorted(len(k) for _, k in made) == [1, 1, 3]  # a/olymp, b/olymp, b/adds
    # every pair done: the same run again loads no model
    loads.clear()
    assert _run([*base, "--models", f"a={toy_model}", f"b={twin}", "--benches", "adds,olymp"]) == 0
    assert loads == [] and "b: every benchmark done before, kept (model not loaded)" in capsys.readouterr().err
    assert set(json.loads((out / "table.json").read_text())["models"]) == {"a", "b"}
    marker = json.loads((out / "anchorft-run.json").read_text())
    assert marker["status"] == "complete" and set(marker["notes"]["models"]) == {"a", "b"}
    # a name already in the folder bound to another model folder: refused, nothing changed
    assert _run([*base, "--models", f"b={toy_model}", "--benches", "adds"]) == 2
    assert "holds results of b=" in _err_line(capsys)
    assert json.loads((out / "anchorft-run.json").read_text())["status"] == "complete"
    # another protocol: refused unless --overwrite, which starts the folder afresh
    other = [*base, "--models", f"a={toy_model}", "--benches", "adds", "--seed", "1"]
    assert _run(other) == 2
    assert "holds another run" in _err_line(capsys)
    assert _run([*other, "--overwrite"]) == 0
    assert not (out / "b").exists() and (out / "a" / "adds" / "metrics.json").is_file()


def test_suite_paper_preset_smoke(toy_model, bench_root, tmp_path):
    out = tmp_path / "paper"
    argv = ["suite", "--models", f"base={toy_model}", "--bench-dir", str(bench_root), "--out", str(out),
            "--limit", "1", "--n", "2", "--max-new-tokens", "3", "--backend", "hf", "--no-calibrate"]  # fmt: skip
    assert _run(argv) == 0
    table = json.loads((out / "table.json").read_text())
    assert len(table["models"]["base"]["benches"]) == len(resolve_benches(bench_root))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["max_new_tokens_used"] == 3 and cfg["settings"]["prompt"] == "boxed-fewshot"
    rec = json.loads((out / "base" / "ifeval_loose_test" / "records.jsonl").read_text().splitlines()[0])
    assert rec["kind"] == "ifeval"


def test_table_markdown_lists_means_and_deltas():
    res = {
        "base": {"a": {"avg@k": 0.5, "pass@k": 0.75, "k": 4}, "b": {"avg@k": 0.2, "pass@k": 0.4, "k": 4}},
        "sft": {"a": {"avg@k": 0.6, "pass@k": 0.8, "k": 4}, "b": {"avg@k": 0.1, "pass@k": 0.3, "k": 4}},
    }
    t = main_table(res, {"a": "id", "b": "ood"}, base="base")
    assert t["models"]["sft"]["delta_id_mean_avg@k"] == pytest.approx(0.1)
    assert t["models"]["sft"]["delta_ood_mean_pass@k"] == pytest.approx(-0.1)
    md = table_markdown(t)
    assert "| sft | 60.0 | 10.0 | 60.0 | 10.0 | +10.0 | -10.0 |" in md and "Pass@4" in md


# ---------------------------------------------------------------- bad input: one line, exit 2, no model loaded


@pytest.fixture
def no_model_load(monkeypatch):
    import transformers

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_unknown_schema_is_one_line_error(toy_model, bench_dir, tmp_path, capsys, no_model_load):
    (bench_dir / "id" / "weird.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    argv = ["suite", "--models", f"m={toy_model}", "--bench-dir", str(bench_dir), "--out", str(tmp_path / "o"),
            "--benches", "weird", "--backend", "hf"]  # fmt: skip
    assert _run(argv) == 2
    assert "weird.jsonl: line 1" in _err_line(capsys)


def test_model_without_weights_is_one_line_error(toy_model, bench_dir, tmp_path, capsys, no_model_load):
    bare = tmp_path / "bare"
    shutil.copytree(toy_model, bare)
    (bare / "model.safetensors").unlink()
    argv = ["suite", "--models", f"m={bare}", "--bench-dir", str(bench_dir), "--out", str(tmp_path / "o"),
            "--benches", "adds", "--backend", "hf"]  # fmt: skip
    assert _run(argv) == 2
    assert "no weights there" in _err_line(capsys)


def test_gpqa_asked_but_absent_is_one_line_error(toy_model, bench_dir, tmp_path, capsys, no_model_load):
    argv = ["suite", "--models", f"m={toy_model}", "--bench-dir", str(bench_dir), "--out", str(tmp_path / "o"),
            "--benches", "adds,gpqa_test", "--backend", "hf"]  # fmt: skip
    assert _run(argv) == 2
    assert "GPQA is not shipped" in _err_line(capsys)


def test_vllm_without_vllm_or_cuda_is_one_line_error(
    toy_model, bench_dir, tmp_path, capsys, no_model_load, monkeypatch
):
    import importlib.util

    import torch

    argv = ["suite", "--models", f"m={toy_model}", "--bench-dir", str(bench_dir), "--out", str(tmp_path / "o"),
            "--benches", "adds", "--backend", "vllm"]  # fmt: skip
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert _run(argv) == 2
    assert "vllm is not installed" in _err_line(capsys)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _run(argv) == 2
    assert "no CUDA device" in _err_line(capsys)


def test_same_file_and_seed_same_samples_through_every_command(toy_model, bench_dir, tmp_path):
    """`anchorft eval` and `anchorft eval suite` (other batch sizes and chunks) draw the same samples from the same
    file and seed: both run the one runner, whose HF backend seeds sample j of item i from row_seed(seed, i, j)
    (the vLLM backend seeds item i's request from row_seed(seed, i, 0)); another seed draws others."""
    from anchorft.eval.backend import row_seed
    from anchorft.eval.vllm_backend import build_requests

    def eval_cmd(out, seed):
        assert _run(["--model", str(toy_model), "--bench", str(bench_dir / "id" / "adds.jsonl"), "--out", str(out),
                     "--n", "4", "--max_new_tokens", "6", "--seed", seed, "--backend", "hf", "--no-greedy",
                     "--batch_size", "3"]) == 0  # fmt: skip
        return (out / "adds" / "generations.jsonl").read_text().splitlines()

    suite_argv = ["suite", "--models", f"m={toy_model}", "--bench-dir", str(bench_dir), "--benches", "adds",
                  "--prompt", "file", "--n", "4", "--max-new-tokens", "6", "--seed", "7", "--backend", "hf",
                  "--no-calibrate", "--batch-size", "16", "--chunk", "2", "--out", str(tmp_path / "s")]  # fmt: skip
    assert _run(suite_argv) == 0
    by_suite = (tmp_path / "s" / "m" / "adds" / "generations.jsonl").read_text().splitlines()
    by_eval = eval_cmd(tmp_path / "e", "7")
    assert by_eval == by_suite and len(by_eval) == 3
    samples = [s for line in by_eval for s in json.loads(line)["responses"]]
    assert len(set(samples)) > 1  # sampled, not one repeated string
    records = [
        json.loads(x)["responses"] for x in (tmp_path / "e" / "adds" / "records.jsonl").read_text().splitlines()
    ]
    assert records == [json.loads(x)["responses"] for x in by_suite]
    assert eval_cmd(tmp_path / "e8", "8") != by_eval
    reqs = build_requests([[1], [2]], [0, 2], n=4, temperature=0.7, top_p=0.95, max_new_tokens=6, seed=7)
    assert [kw["seed"] for _, kw in reqs] == [row_seed(7, 0, 0), row_seed(7, 2, 0)]
