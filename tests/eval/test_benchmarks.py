"""The paper's JSONL benchmarks: reading, scoring, metrics, end-to-end evaluation of a tiny model."""

from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path

import numpy as np
import pytest

from anchorft.eval.answers import MathChecker, last_boxed, parsed_equal
from anchorft.eval.benchmarks import load_bench, read_responses, score_bench, summarize
from anchorft.eval.metrics import accuracy, avg_at_k, mean_pass_at_k, pass_at_k
from anchorft.eval.runner import run_eval

ID_FILES = ["id/math500.jsonl", "id/aime-24.jsonl", "id/aime-25.jsonl", "id/amc.jsonl"]
OOD_FILES = [
    "ood/mmlu_pro.jsonl",
    "ood/truthful_qa_mc.jsonl",
    "ood/arc_c.jsonl",
    "ood/arc_c_test.jsonl",
    "ood/commonsenseqa.jsonl",
    "ood/commonsenseqa_test.jsonl",
]


# ---------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    "n, c, k", [(16, 0, 16), (16, 1, 1), (16, 3, 4), (10, 5, 3), (20, 19, 2), (5, 5, 5), (8, 2, 8)]
)
def test_pass_at_k_closed_form(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_is_the_subset_average():
    """The estimator is the mean over all k-subsets of the n samples of 'some sample correct'."""
    correct = [1, 0, 0, 1, 0, 0, 0]
    for k in range(1, len(correct) + 1):
        brute = np.mean([any(s) for s in itertools.combinations(correct, k)])
        assert pass_at_k(len(correct), sum(correct), k) == pytest.approx(brute, abs=1e-12)


def test_accuracy_and_empty_inputs():
    assert accuracy([True]) == 1.0 and accuracy([True, False, False, True]) == 0.5
    assert avg_at_k([[True]]) == 1.0 and mean_pass_at_k([[True]], 1) == 1.0
    for score in (accuracy, avg_at_k, lambda c: mean_pass_at_k(c, 1)):
        with pytest.raises(ValueError, match="^no problems to score$"):
            score([])
    with pytest.raises(ValueError, match=r"^need 0 <= c <= n, got c=4, n=3$"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match=r"^need 1 <= k <= n, got k=4, n=3$"):
        pass_at_k(3, 1, 4)


def test_summarize_known_counts():
    records = [
        {"correct": [True, False, False, False], "answers": ["1", "2", None, "3"], "greedy_correct": True},
        {"correct": [True, True, False, False], "answers": ["1", "1", "2", "2"], "greedy_correct": False},
    ]
    m = summarize(records, k=2)
    assert m["n_items"] == 2 and m["k"] == 2
    assert m["avg@k"] == pytest.approx(3 / 8)
    assert m["pass@k"] == pytest.approx(np.mean([1 - comb(3, 2) / comb(4, 2), 1 - comb(2, 2) / comb(4, 2)]))
    assert m["pass@k"] == pytest.approx(mean_pass_at_k([r["correct"] for r in records], 2))
    assert m["greedy_acc"] == 0.5
    assert m["no_answer_rate"] == pytest.approx(1 / 8)
    with pytest.raises(ValueError, match="k must be"):
        summarize(records, k=5)


# ---------------------------------------------------------------- reading JSONL


def _line(q="What is 1+1?", gold="2"):
    return json.dumps({"prompt": [{"role": "user", "content": q}], "reward_model": {"ground_truth": gold}})


def test_malformed_line_is_an_error_with_its_line_number(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text(_line() + "\n" + "\n" + '{"prompt": [oops\n' + _line() + "\n")
    with pytest.raises(ValueError, match=r"line 3: malformed JSON"):
        load_bench(f)
    bench = load_bench(f, skip_bad=True)
    assert len(bench.items) == 2 and bench.n_bad == 1 and bench.bad[0].startswith("line 3")
    assert [it.index for it in bench.items] == [0, 2]  # a skipped line keeps its place


def test_missing_field_names_it(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text(_line() + "\n" + json.dumps({"prompt": [{"role": "user", "content": "x"}]}) + "\n")
    with pytest.raises(ValueError, match=r"line 2: field 'reward_model.ground_truth'"):
        load_bench(f)
    assert load_bench(f, skip_bad=True).n_bad == 1
    f.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1"):
        load_bench(f)


def test_read_responses_validates(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text('{"index": 0, "responses": ["a"]}\n{"index": 0, "responses": ["b"]}\n')
    with pytest.raises(ValueError, match="line 2: duplicate index 0"):
        read_responses(f)
    f.write_text('{"index": 0, "responses": ["a"]}\n{"index": 1, "responses": "b"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2: field 'responses'"):
        read_responses(f)
    resp, bad = read_responses(f, skip_bad=True)
    assert list(resp) == [0] and len(bad) == 2


def test_item_kinds(tmp_path):
    f = tmp_path / "b.jsonl"
    mc = "Q?\n\nChoices:\nA. x\nB. y\n\nPlease answer with the single correct option letter (e.g., A)."
    f.write_text(_line() + "\n" + _line(mc, "B") + "\n" + _line(mc, "42") + "\n")
    kinds = [it.kind for it in load_bench(f).items]
    assert kinds == ["math", "choice", "math"]  # a gold that is not a label is graded as math


# ---------------------------------------------------------------- the paper's files


@pytest.fixture(scope="module")
def parse_checker():
    """math-verify for every answer: no string shortcut, so identical strings are parsed too."""
    with MathChecker(timeout_s=30, check_fn="anchorft.eval.answers:parsed_equal", string_shortcut=False) as c:
        yield c


def test_math500_reference_solutions_graded_by_math_verify(bench_root, parse_checker):
    """The `solution` field as the response: its last \\boxed{} against the gold, parsed by math-verify alone.

    Every last box is also the gold string (so `math_equal`'s string shortcut would decide all 500); this test
    never takes it. Measured with math-verify 0.9: 500 / 500."""
    bench = load_bench(bench_root / "id/math500.jsonl")
    boxes = [last_boxed(it.solution) or "" for it in bench.items]
    ok = [parsed_equal(it.gold, box) for it, box in zip(bench.items, boxes)]
    assert len(ok) == 500
    assert np.mean(ok) >= 0.99, f"accuracy {np.mean(ok):.3f}"
    # the same through the scoring path (records, metrics) with the parse-only worker, first 100 items
    part = load_bench(bench_root / "id/math500.jsonl", limit=100)
    records = score_bench(part, {it.index: [it.solution] for it in part.items}, checker=parse_checker)
    assert summarize(records)["avg@k"] >= 0.99


@pytest.mark.parametrize("rel", ID_FILES)
def test_boxed_gold_is_parsed_equal_to_itself_on_id_files(bench_root, rel, parse_checker):
    bench = load_bench(bench_root / rel)
    assert all(it.kind == "math" for it in bench.items)
    records = score_bench(
        bench, {it.index: [f"So the answer is \\boxed{{{it.gold}}}."] for it in bench.items}, checker=parse_checker
    )
    assert summarize(records)["avg@k"] == 1.0


@pytest.mark.parametrize("rel", ["id/aime-24.jsonl", "id/aime-25.jsonl", "id/amc.jsonl"])
def test_integer_golds_equivalents_pass_and_near_misses_fail(bench_root, rel, parse_checker):
    """Each integer gold written three other ways is right; one off, or the wrong sign, is wrong."""
    bench = load_bench(bench_root / rel)
    golds = [int(it.gold) for it in bench.items]  # every gold of these files is an integer
    forms = ["x = {g}", "{g}.0", "\\frac{{{g2}}}{{2}}"]
    for form in forms:
        resp = {it.index: [f"\\boxed{{{form.format(g=g, g2=2 * g)}}}"] for it, g in zip(bench.items, golds)}
        assert summarize(score_bench(bench, resp, checker=parse_checker))["avg@k"] == 1.0, form
    for miss in (lambda g: g + 1, lambda g: -g if g else 1):
        resp = {it.index: [f"\\boxed{{{miss(g)}}}"] for it, g in zip(bench.items, golds)}
        assert summarize(score_bench(bench, resp, checker=parse_checker))["avg@k"] == 0.0


@pytest.mark.parametrize("rel", OOD_FILES)
def test_gold_letter_extracted_on_ood_files(bench_root, rel):
    bench = load_bench(bench_root / rel)
    assert all(it.kind == "choice" for it in bench.items), "every OOD item should be multiple choice"
    for form in ("\\boxed{{{g}}}", "{g}", "Reasoning first. The answer is ({g})."):
        resp = {it.index: [form.format(g=it.gold)] for it in bench.items}
        records = score_bench(bench, resp)
        assert summarize(records)["avg@k"] == 1.0, form
    # a wrong letter is wrong
    other = {it.index: [f"\\boxed{{{next(lab for lab in it.choices if lab != it.gold)}}}"] for it in bench.items}
    assert summarize(score_bench(bench, other))["avg@k"] == 0.0


def test_tiny_model_end_to_end_on_10_item_slices(bench_root, tiny_model_dir, tmp_path, checker):
    files = [bench_root / rel for rel in ID_FILES + OOD_FILES]
    metrics = run_eval(
        tiny_model_dir, files, tmp_path / "out", n=2, k=2, temperature=0.7, top_p=0.95, max_new_tokens=4,
        batch_size=20, limit=10, seed=0, backend="hf", checker=checker, progress=False,
    )  # fmt: skip
    assert len(metrics) == len(files)
    for name, m in metrics.items():
        assert m["n_items"] == 10 and m["k"] == 2 and m["n_greedy"] == 10, name
        for key in ("avg@k", "pass@k", "greedy_acc"):
            assert 0.0 <= m[key] <= 1.0
        recs = [json.loads(line) for line in (tmp_path / "out" / name / "records.jsonl").read_text().splitlines()]
        assert len(recs) == 10 and all(len(r["responses"]) == 2 for r in recs)
    on_disk = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert on_disk.pop("provenance")["anchorft"] and on_disk == metrics
    assert (tmp_path / "out" / "metrics.png").stat().st_size > 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["limit"] == 10


def test_same_seed_same_samples(tiny_model_dir, tmp_path, checker):
    f = tmp_path / "b.jsonl"
    f.write_text("".join(_line(f"What is {i}+{i}?", str(2 * i)) + "\n" for i in range(3)))
    runs = []
    for r in range(2):
        run_eval(
            tiny_model_dir,
            [f],
            tmp_path / f"o{r}",
            n=3,
            k=2,
            max_new_tokens=5,
            seed=7,
            progress=False,
            checker=checker,
        )
        runs.append((tmp_path / f"o{r}" / "b" / "records.jsonl").read_text())
    assert runs[0] == runs[1]
    recs = [json.loads(line) for line in runs[0].splitlines()]
    assert len({s for r in recs for s in r["responses"]}) > 1  # sampling, not one repeated string


def test_run_eval_rejects_bad_arguments_before_loading(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text(_line() + "\n")
    with pytest.raises(ValueError, match="1 <= k <= n"):
        run_eval(tmp_path, [f], tmp_path / "o", n=2, k=4)
    with pytest.raises(ValueError, match="no config.json"):
        run_eval(tmp_path / "nowhere", [f], tmp_path / "o", n=2, k=2)
    assert not Path(tmp_path / "o").exists()


def test_format_prompts_needs_a_chat_template(tmp_path):
    from types import SimpleNamespace

    from anchorft.eval.protocol import format_prompts

    f = tmp_path / "b.jsonl"
    f.write_text(_line() + "\n")
    with pytest.raises(ValueError, match="chat_template"):
        format_prompts(SimpleNamespace(chat_template=None), load_bench(f).items)


def test_run_eval_through_the_vllm_backend_with_a_stand_in_engine(tiny_model_dir, tmp_path, checker, monkeypatch):
    """--backend vllm: token ids of the chat-formatted prompt (no second BOS), one seed per item index,
    a greedy request at temperature 0, results mapped back to their items."""
    from types import SimpleNamespace

    from anchorft.eval import runner, vllm_backend
    from anchorft.eval.backend import row_seed

    log: list = []
    heads: list = []

    class Engine:
        def generate(self, prompts, params, use_tqdm=True):
            log.append([p.kw for p in params])
            heads.extend(p["prompt_token_ids"][:2] for p in prompts)
            return [
                SimpleNamespace(outputs=[SimpleNamespace(index=j, text=f"\\boxed{{{sp.kw['seed'] % 97}}}") for j in
                                         range(sp.kw["n"])])
                for sp in params
            ]  # fmt: skip

    class Params:
        def __init__(self, **kw):
            self.kw = kw

    real = vllm_backend.VLLMBackend
    monkeypatch.setattr(runner, "resolve_backend", lambda b, here=True: "vllm")
    monkeypatch.setattr(
        vllm_backend, "VLLMBackend", lambda model_dir, options, seed: real(model_dir, options, seed=seed,
                                                                           engine_factory=lambda r: Engine(),
                                                                           sampling_cls=Params)
    )  # fmt: skip
    f = tmp_path / "b.jsonl"
    f.write_text("".join(_line(f"What is {i}+{i}?", str(row_seed(5, i, 0) % 97)) + "\n" for i in range(3)))
    metrics = run_eval(tiny_model_dir, [f], tmp_path / "o", n=2, k=1, seed=5, backend="vllm", checker=checker)
    assert [kw["temperature"] for kw in log[0]] == [0.7] * 3 and [kw["temperature"] for kw in log[1]] == [0.0] * 3
    assert [kw["seed"] for kw in log[0]] == [row_seed(5, i, 0) for i in range(3)]
    assert metrics["b"]["avg@k"] == 1.0 and metrics["b"]["greedy_acc"] == 1.0  # each item got its own seed's text
    from transformers import AutoTokenizer

    bos = AutoTokenizer.from_pretrained(tiny_model_dir).bos_token_id
    assert heads and all(h[0] == bos and h[1] != bos for h in heads)
