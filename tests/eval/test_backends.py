"""Generation backends of `eval suite`: HF samples independent of the batch size; vLLM up to the engine call."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from anchorft.eval.hf_backend import generate_sorted, length_sorted_batches, row_seed, sample_rows
from anchorft.eval.vllm_backend import VLLMBackend, VLLMOptions, build_requests, map_results, shard


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model, tok


PROMPTS = ["What is 12 + 30?", "Find x.", "Please reason step by step about the answer \\boxed{42}.", "A"]


@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.95), (1.0, 1.0)])
def test_hf_samples_do_not_depend_on_batch_size(tiny, temperature, top_p):
    model, tok = tiny
    kw = dict(n=3, temperature=temperature, top_p=top_p, max_new_tokens=8, seed=5)
    ref = generate_sorted(model, tok, PROMPTS, batch_size=1, **kw)
    for bs in (2, 5, 12):
        assert generate_sorted(model, tok, PROMPTS, batch_size=bs, **kw) == ref
    assert generate_sorted(model, tok, PROMPTS, batch_size=4, max_batch_tokens=40, **kw) == ref
    # a prompt's samples depend on its key, not on its position or the other prompts
    sub = generate_sorted(model, tok, PROMPTS[2:3], keys=[2], batch_size=3, **kw)
    assert sub == ref[2:3]
    assert generate_sorted(model, tok, PROMPTS, batch_size=3, **{**kw, "seed": 6}) != ref
    assert len({s for row in ref for s in row}) > 1  # the samples differ from each other


def test_length_sorted_batches_respect_both_limits():
    lengths = [5, 50, 7, 30, 30, 6]
    b = length_sorted_batches(lengths, max_new_tokens=10, batch_size=3, max_batch_tokens=130)
    assert sorted(r for x in b for r in x) == list(range(6))
    assert b[0] == [1, 3]  # (50 + 10) x 2 = 120 <= 130; a third row would make 180
    for batch in b:
        assert len(batch) <= 3
        widths = [lengths[r] for r in batch]
        assert widths == sorted(widths, reverse=True)
        assert len(batch) == 1 or len(batch) * (max(widths) + 10) <= 130


def test_sample_rows_draws_from_the_nucleus():
    # an independent check of inverse-CDF nucleus sampling: frequencies against the renormalised nucleus
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gens = [torch.Generator().manual_seed(row_seed(0, 0, j)) for j in range(1)]
    counts = torch.zeros(4)
    for _ in range(4000):
        counts[sample_rows(logits, 1.0, 0.7, gens)[0]] += 1
    freq = counts / counts.sum()
    assert freq[2:].sum() == 0  # 0.5 + 0.3 reach 0.7: the nucleus is {0, 1}
    assert abs(freq[0].item() - 0.5 / 0.8) < 0.03


# ---------------------------------------------------------------- vLLM with a stand-in engine


class StandInSamplingParams:
    def __init__(self, **kw):
        self.kw = kw


class StandInEngine:
    """Records its inputs; answers each request with its completions in reverse index order."""

    def __init__(self, rank: int, log: list):
        self.rank, self.log = rank, log

    def generate(self, prompts, params, use_tqdm=True):
        self.log.append((self.rank, [p["prompt_token_ids"] for p in prompts], [p.kw for p in params]))
        outs = []
        for p, sp in zip(prompts, params):
            comps = [SimpleNamespace(index=j, text=f"{p['prompt_token_ids'][-1]}:{sp.kw['seed'] % 97}:{j}")
                     for j in range(sp.kw["n"])]  # fmt: skip
            outs.append(SimpleNamespace(outputs=comps[::-1]))
        return outs


def _backend(dp: int, log: list) -> VLLMBackend:
    return VLLMBackend(
        "model", VLLMOptions(data_parallel_size=dp), engine_factory=lambda r: StandInEngine(r, log),
        sampling_cls=StandInSamplingParams,
    )  # fmt: skip


def test_vllm_requests_params_sharding_and_mapping():
    log: list = []
    be = _backend(2, log)
    ids = [[1, 10], [1, 11], [1, 12]]
    out = be.generate(ids, [7, 8, 9], n=2, temperature=0.7, top_p=0.95, max_new_tokens=10240, seed=3)
    be.close()
    seeds = {k: row_seed(3, k, 0) for k in (7, 8, 9)}
    assert out == [[f"{10 + i}:{seeds[7 + i] % 97}:{j}" for j in range(2)] for i in range(3)]
    by_rank = {r: (p, kw) for r, p, kw in log}
    assert by_rank[0][0] == [[1, 10], [1, 12]] and by_rank[1][0] == [[1, 11]]  # round robin
    kw = by_rank[1][1][0]
    assert kw == dict(n=2, temperature=0.7, top_p=0.95, max_tokens=10240, seed=seeds[8])
    # one engine draws the same as two: seeds follow the item, not the shard
    log1: list = []
    be1 = _backend(1, log1)
    assert be1.generate(ids, [7, 8, 9], n=2, temperature=0.7, top_p=0.95, max_new_tokens=10240, seed=3) == out
    be1.close()


def test_vllm_greedy_request_and_result_checks():
    ((p, kw),) = build_requests([[5]], [0], n=1, temperature=0.0, top_p=0.95, max_new_tokens=4, seed=0)
    assert p == {"prompt_token_ids": [5]} and kw["top_p"] == 1.0 and kw["temperature"] == 0.0
    with pytest.raises(RuntimeError, match="completions"):
        map_results([SimpleNamespace(outputs=[SimpleNamespace(index=0, text="a")])], n=2)
    assert shard(5, 2) == [[0, 2, 4], [1, 3]]


def test_vllm_backend_through_the_suite_resumes(toy_model_for_suite, tmp_path):
    from anchorft.eval.suite import SuiteSettings, run_suite

    root = tmp_path / "b"
    (root / "id").mkdir(parents=True)
    line = {"prompt": [{"role": "user", "content": "1 + 1?"}], "reward_model": {"ground_truth": "2"}}
    (root / "id" / "two.jsonl").write_text("".join(json.dumps(line) + "\n" for _ in range(5)))
    log: list = []

    class Interrupted(Exception):
        pass

    def factory(stop_after):
        def make(model_dir, tok, s):
            be = _backend(2, log)
            calls = {"n": 0}
            real = be.generate

            def gen(*a, **k):
                calls["n"] += 1
                if stop_after is not None and calls["n"] > stop_after:
                    raise Interrupted
                return real(*a, **k)

            be.generate = gen
            return be

        return make

    s = SuiteSettings(n=2, k=2, max_new_tokens=6, chunk=2, calibrate=False, prompt="file")
    models = {"m": toy_model_for_suite}
    with pytest.raises(Interrupted):
        run_suite(models, root, tmp_path / "o", s, benches=["two"], backend_factory=factory(1), log=lambda m: None)
    saved = (tmp_path / "o" / "m" / "two" / "generations.jsonl").read_text().splitlines()
    assert [json.loads(x)["index"] for x in saved] == [0, 1]
    log.clear()
    run_suite(models, root, tmp_path / "o", s, benches=["two"], backend_factory=factory(None), log=lambda m: None)
    asked = sorted(len(p) for _, p, _ in log)
    assert sum(asked) == 3  # items 2, 3, 4 only
    gens = [json.loads(x) for x in (tmp_path / "o" / "m" / "two" / "generations.jsonl").read_text().splitlines()]
    assert [g["index"] for g in gens] == [0, 1, 2, 3, 4]
    seeds = [int(g["responses"][0].split(":")[1]) for g in gens]
    assert seeds == [row_seed(0, i, 0) % 97 for i in range(5)]
    assert (tmp_path / "o" / "table.json").is_file()


@pytest.fixture(scope="module")
def toy_model_for_suite(tiny_model_dir):
    return tiny_model_dir


def test_rows_that_end_leave_the_batch(tiny):
    # EOS := the greedy first token of one prompt, so that row ends at once while the others go on: the
    # shrinking batch (rows and KV cache dropped) must give what the fixed-batch loop of eval.generate gives
    import copy

    from anchorft.eval.generate import generate

    model, tok = tiny
    enc = tok(PROMPTS[0], add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        first = int(model(**enc).logits[0, -1].argmax())
    tok2 = copy.deepcopy(tok)
    tok2.eos_token = tok2.convert_ids_to_tokens(first)
    assert tok2.eos_token_id == first
    ref = generate(model, tok2, PROMPTS, n=1, temperature=0, max_new_tokens=8, batch_size=8, add_special_tokens=False)
    assert ref[0] == [""] and any(r[0] for r in ref[1:])
    for bs in (1, 4):
        got = generate_sorted(model, tok2, PROMPTS, n=1, temperature=0.0, max_new_tokens=8, batch_size=bs)
        assert got == ref
    kw = dict(n=3, temperature=0.05, top_p=0.95, max_new_tokens=8, seed=2)
    assert generate_sorted(model, tok2, PROMPTS, batch_size=12, **kw) == generate_sorted(
        model, tok2, PROMPTS, batch_size=1, **kw
    )
