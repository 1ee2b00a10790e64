"""The vLLM generation backend up to the engine call, with a stand-in engine: requests, sampling parameters,
per-item seeds, sharding over data-parallel ranks, results mapped back, resuming through the suite."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from anchorft.eval.backend import row_seed
from anchorft.eval.vllm_backend import VLLMBackend, VLLMOptions, build_requests, map_results, shard


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
    from anchorft.eval.protocol import SuiteSettings
    from anchorft.studies.eval_suite import run_suite

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
