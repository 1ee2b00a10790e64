"""What a user of `anchorft eval suite` reads, recomputed from the per-item grades, and what a rerun leaves.

The generation backend is a stand-in (`HFBackend` replaced): per (model, benchmark, item, sample) a fixed coin
says whether it answers `\\boxed{gold}` or a wrong number; it records the sampling settings and the items it was
asked for. Grading (math-verify), records.jsonl, metrics.json, table.json and table.md are the project's code,
run through `anchorft eval suite` (the command, with its run marker).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from anchorft.cli import main as cli

SYS = "Please reason step by step, and put your final answer within \\boxed{}."
FILES = {"id": {"adds": [(a, 2 * a) for a in range(1, 6)], "muls": [(a, 3 * a) for a in range(1, 5)]},
         "ood": {"subs_test": [(a, a - 1) for a in range(2, 8)]}}  # fmt: skip


def _coin(model: str, bench: str, index: int, j: int) -> bool:
    h = int(hashlib.sha256(f"{model}|{bench}|{index}|{j}".encode()).hexdigest()[:8], 16) / 16**8
    return h < {"base": 0.35, "tuned": 0.7}[model]


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory) -> Path:
    from anchorft.toy.pretrain import PretrainConfig, build_model, build_tokenizer

    tok = build_tokenizer(np.random.default_rng(0))
    cfg = PretrainConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    out = tmp_path_factory.mktemp("toy_model")
    build_model(cfg, len(tok), tok, seed=0).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture
def suite_env(toy_model, tmp_path, monkeypatch):
    import shutil

    import anchorft.eval.hf_backend as hf_backend

    root = tmp_path / "benches"
    gold: dict[tuple[str, int], int] = {}
    for dom, files in FILES.items():
        (root / dom).mkdir(parents=True)
        lines = []
        for name, rows in files.items():
            lines = []
            for i, (a, g) in enumerate(rows):
                msgs = [
                    {"role": "system", "content": SYS},
                    {"role": "user", "content": f"{name.split('_')[0]} of {a}?"},
                ]
                lines.append(json.dumps({"prompt": msgs, "reward_model": {"ground_truth": str(g)}}))
                gold[(name, i)] = g
            (root / dom / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    models = {"base": toy_model, "tuned": tmp_path / "tuned"}
    shutil.copytree(toy_model, models["tuned"])
    calls: list[dict] = []
    state = {"stop_after": None}
    names_by_path = {str(p.resolve()): n for n, p in models.items()}

    class FakeBackend:
        def __init__(self, model_dir, tokenizer, settings):
            self.name, self.tok = names_by_path[str(Path(model_dir).resolve())], tokenizer

        def generate(self, token_ids, keys, *, n, temperature, top_p, max_new_tokens, seed):
            if state["stop_after"] is not None and len(calls) >= state["stop_after"]:
                raise KeyboardInterrupt
            # the file a prompt came from, read back from its text
            texts = [re.sub(r"\s", "", self.tok.decode(t)) for t in token_ids]
            benches = [
                {"adds": "adds", "muls": "muls", "subs": "subs_test"}[re.search(r"(adds|muls|subs)of\d+\?", t)[1]]
                for t in texts
            ]
            calls.append({"model": self.name, "benches": benches, "keys": list(keys), "n": n,
                          "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
                          "seed": seed})  # fmt: skip
            out = []
            for b, i in zip(benches, keys):
                g = gold[(b, i)]
                out.append([f"so \\boxed{{{g if _coin(self.name, b, i, j) else g + 1000}}}" for j in range(n)])
            return out

        def close(self):
            pass

    monkeypatch.setattr(hf_backend, "HFBackend", FakeBackend)
    monkeypatch.delenv("ANCHORFT_DEBUG", raising=False)
    out = tmp_path / "suite"
    argv = ["eval", "suite", "--bench-dir", str(root), "--out", str(out), "--benches", "adds,muls,subs_test",
            "--models", f"base={models['base']}", f"tuned={models['tuned']}", "--backend", "hf", "--no-calibrate",
            "--n", "4", "--k", "2", "--max-new-tokens", "7", "--chunk", "2"]  # fmt: skip
    return {"argv": argv, "out": out, "calls": calls, "state": state}


def _flag(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return [*argv[: i + 1], value, *argv[i + 2 :]]


def _expected(k: int, n: int = 4) -> dict:
    """table.json's numbers from the coins alone."""
    domains = {b: dom for dom, files in FILES.items() for b in files}
    rows = {}
    for model in ("base", "tuned"):
        benches = {}
        for b in domains:
            oks = [[_coin(model, b, i, j) for j in range(n)] for i in range(len(FILES[domains[b]][b]))]
            avg = float(np.mean([x for row in oks for x in row]))
            pk = float(np.mean([1 - math.comb(n - sum(r), k) / math.comb(n, k) for r in oks]))
            benches[b] = {"avg@k": avg, "pass@k": pk}
        row = {"benches": benches}
        for dom in ("id", "ood"):
            for met in ("avg@k", "pass@k"):
                row[f"{dom}_mean_{met}"] = float(np.mean([benches[b][met] for b in domains if domains[b] == dom]))
        rows[model] = row
    for row in rows.values():
        for key in [k_ for k_ in row if "_mean_" in k_]:
            row["delta_" + key] = row[key] - rows["base"][key]
    return rows


def _check_table(out: Path, k: int) -> None:
    table = json.loads((out / "table.json").read_text())
    exp = _expected(k)
    assert table["k"] == k and table["base"] == "base"
    for model, row in exp.items():
        got = table["models"][model]
        for b, m in row["benches"].items():
            assert got["benches"][b] == pytest.approx(m), (model, b)
        for key, v in row.items():
            if key != "benches":
                assert got[key] == pytest.approx(v), (model, key)
    # table.md: each cell under its header, for both metrics
    md = (out / "table.md").read_text()
    for met, label in (("avg@k", f"Avg@{k}"), ("pass@k", f"Pass@{k}")):
        part = md.split(f"### {label} (%)")[1].split("###")[0]
        lines = [ln for ln in part.splitlines() if ln.startswith("| ")]
        head = [c.strip() for c in lines[0].strip("|").split("|")]
        for ln in lines[1:]:
            cells = [c.strip() for c in ln.strip("|").split("|")]
            row = exp[cells[0]]
            for h, cell in zip(head[1:], cells[1:]):
                if h.endswith("(ID)") or h.endswith("(OOD)"):
                    want = row["benches"][h.split(" ")[0]][met]
                elif h in ("ID mean", "OOD mean"):
                    want = row[f"{h.split()[0].lower()}_mean_{met}"]
                else:  # "ID vs base" / "OOD vs base"
                    want = row[f"delta_{h.split()[0].lower()}_mean_{met}"]
                assert float(cell) == pytest.approx(100 * want, abs=0.051), (cells[0], h, met)
    # records.jsonl: the per-item grades the table summarises are the coins
    for files in FILES.values():
        for b, rows in files.items():
            recs = [json.loads(x) for x in (out / "tuned" / b / "records.jsonl").read_text().splitlines()]
            assert [r["correct"] for r in recs] == [
                [_coin("tuned", b, i, j) for j in range(4)] for i in range(len(rows))
            ]


def _status(out: Path) -> str:
    return json.loads((out / "anchorft-run.json").read_text())["status"]


def test_suite_table_is_the_per_item_grades_summarised_with_the_asked_sampling(suite_env):
    argv, out, calls = suite_env["argv"], suite_env["out"], suite_env["calls"]
    assert cli(argv) == 0
    _check_table(out, k=2)
    # the sampling settings the backend was called with are the ones asked for
    assert {(c["n"], c["temperature"], c["top_p"], c["max_new_tokens"], c["seed"]) for c in calls} == {
        (4, 0.7, 0.95, 7, 0)
    }
    # the files scored: every item of each named file, once per model, and nothing else
    for model in ("base", "tuned"):
        asked = sorted((b, i) for c in calls if c["model"] == model for b, i in zip(c["benches"], c["keys"]))
        assert asked == sorted(
            (b, i) for files in FILES.values() for b, rows in files.items() for i in range(len(rows))
        )
    assert cli(_flag(argv, "--max-new-tokens", "9") + ["--overwrite", "--rl-checkpoint"]) == 0  # RL token limit
    assert {c["max_new_tokens"] for c in calls[-6:]} == {16384}


RERUN_MATRIX = [
    # (state before, the rerun's change, exit code, marker after, new generations, k of the table)
    ("finished", None, 0, "complete", 0, 2),
    ("finished", ("--k", "1"), 0, "complete", 0, 1),  # outside the hash: regraded from saved generations
    ("finished", ("--seed", "1"), 2, "complete", 0, 2),  # inside: refused, nothing touched
    ("interrupted", None, 0, "complete", "rest", 2),
    ("interrupted", ("--k", "1"), 0, "complete", "rest", 1),
    ("interrupted", ("--seed", "1"), 2, "interrupted", 0, None),
]


@pytest.mark.parametrize("before,change,rc,status,new,k", RERUN_MATRIX)
def test_suite_rerun_matrix(suite_env, before, change, rc, status, new, k):
    """Rerun matrix, eval suite (docs/testing.md): the marker state, the generations made and the numbers."""
    argv, out, calls, state = suite_env["argv"], suite_env["out"], suite_env["calls"], suite_env["state"]
    if before == "interrupted":
        state["stop_after"] = 2  # two chunks, then Ctrl-C
        assert cli(argv) == 130 and _status(out) == "interrupted"
        state["stop_after"] = None
    else:
        assert cli(argv) == 0 and _status(out) == "complete"
    n_before = len(calls)
    done_before = {(c["model"], b, i) for c in calls for b, i in zip(c["benches"], c["keys"])}
    rerun = argv if change is None else _flag(argv, *change) if change[0] in argv else [*argv, *change]
    assert cli(rerun) == rc
    assert _status(out) == status
    made = [(c["model"], b, i) for c in calls[n_before:] for b, i in zip(c["benches"], c["keys"])]
    if new == "rest":  # only what the interrupted run had not generated, each once
        total = sum(len(r) for files in FILES.values() for r in files.values())
        assert not set(made) & done_before and len(made) == len(set(made)) == 2 * total - len(done_before)
    else:
        assert len(made) == new
    if k is not None:
        _check_table(out, k)


def test_generation_key_is_exactly_what_the_saved_generations_depend_on():
    """settings.json holds this key; a rerun keeps a pair's generations only when it is equal (`k`, the batching
    and the calibration are outside it: they change the grading or the speed, not the samples)."""
    from anchorft.eval.protocol import SuiteSettings

    s = SuiteSettings(n=5, k=3, temperature=0.6, top_p=0.9, max_new_tokens=77, rl_max_new_tokens=99, seed=4,
                      prompt="file", chunk=2, batch_size=3, calibrate=False)  # fmt: skip
    key = {"n": 5, "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 77, "prompt": "file", "seed": 4}
    assert s.generation_key() == key
    s.rl_checkpoint = True
    assert s.generation_key() == {**key, "max_new_tokens": 99}
    s.greedy = True
    assert s.generation_key() == {**key, "max_new_tokens": 99, "greedy": True}


def test_suite_stopped_after_the_first_model_resumes_without_losing_or_repeating_a_pair(suite_env, monkeypatch):
    """A stop (Ctrl-C, anchorft.stop) that lands as the first model's cell finishes: the grid records that model in
    cells.jsonl and stops before the next loads; the rerun loads only the second model, generates each of its
    (benchmark, item) pairs once and none of the first's, and writes the table of an uninterrupted run."""
    import signal

    import anchorft.eval.hf_backend as hf_backend
    from anchorft import stop

    argv, out, calls = suite_env["argv"], suite_env["out"], suite_env["calls"]
    fake = hf_backend.HFBackend  # the fixture's stand-in
    loads: list[str] = []
    real_init = fake.__init__

    def counting_init(self, *a, **kw):
        real_init(self, *a, **kw)
        loads.append(self.name)

    monkeypatch.setattr(fake, "__init__", counting_init)
    monkeypatch.setattr(fake, "close", lambda self: stop.record(signal.SIGINT) if self.name == "base" else None)
    assert cli(argv) == 130 and _status(out) == "interrupted"
    assert loads == ["base"] and not (out / "table.json").exists()
    assert [json.loads(x)["name"] for x in (out / "cells.jsonl").read_text().splitlines()] == ["base"]
    first = [(c["model"], b, i) for c in calls for b, i in zip(c["benches"], c["keys"])]
    assert {m for m, _, _ in first} == {"base"}

    monkeypatch.setattr(fake, "close", lambda self: None)
    n_before = len(calls)
    assert cli(argv) == 0 and _status(out) == "complete"
    assert loads == ["base", "tuned"]  # the recorded model is not loaded again
    second = [(c["model"], b, i) for c in calls[n_before:] for b, i in zip(c["benches"], c["keys"])]
    every = {(m, b, i) for m in ("base", "tuned") for files in FILES.values() for b, rows in files.items()
             for i in range(len(rows))}  # fmt: skip
    assert len(first) + len(second) == len(set(first) | set(second)) == len(every)  # none twice
    assert set(first) | set(second) == every  # none lost
    _check_table(out, k=2)
    assert [json.loads(x)["name"] for x in (out / "cells.jsonl").read_text().splitlines()] == ["base", "tuned"]

    # the table equals an uninterrupted run's (provenance aside)
    whole = out.parent / "whole"
    assert cli(_flag(argv, "--out", str(whole))) == 0

    def table(folder: Path) -> dict:
        t = json.loads((folder / "table.json").read_text())
        t.pop("provenance")
        return t

    assert table(out) == table(whole)
    assert (out / "table.md").read_text() == (whole / "table.md").read_text()

    # a pair folder removed by hand: its model's record no longer stands, and only that pair is generated again
    gone = sorted(p for p in (out / "tuned").iterdir() if p.is_dir())[0]
    shutil.rmtree(gone)
    n_before = len(calls)
    assert cli(argv) == 0 and loads[-1] == "tuned" and loads.count("base") == 2  # "whole" loaded base once
    again = {(c["model"], b) for c in calls[n_before:] for b in c["benches"]}
    assert again == {("tuned", gone.name)}
    assert table(out) == table(whole)
