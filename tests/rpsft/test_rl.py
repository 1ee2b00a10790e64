"""The DAPO stage (anchorft.rpsft.rl, `anchorft rl`) on a tiny random Llama."""

from __future__ import annotations

import json

import pytest
import torch

from anchorft.rpsft.dapo_config import DAPOConfig
from anchorft.rpsft.rl import boxed_math_reward, load_rl_dataset, make_reward_func, run_rl

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def _prompts(n=4):
    return [
        {
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {i} + {i}?"}],
            "answer": str(2 * i),
        }
        for i in range(n)
    ]


def test_reward_is_math_verify_correctness_of_the_last_box():
    assert boxed_math_reward(r"... so \boxed{\frac{1}{2}}", "0.5") == 1.0
    assert boxed_math_reward(r"\boxed{3} no, \boxed{4}", "3") == 0.0
    assert boxed_math_reward("4", "4") == 0.0  # no box, no reward
    f = make_reward_func()
    conv = [[{"role": "assistant", "content": r"\boxed{4}"}], [{"role": "assistant", "content": "four"}]]
    assert f(completions=conv, answer=["4", "4"], trainer_state=None) == [1.0, 0.0]
    assert f(completions=[r"\boxed{2}", r"\boxed{2.0}"], answer=["2", "2"]) == [1.0, 1.0]


def test_load_rl_dataset_formats(tmp_path):
    f = tmp_path / "d.jsonl"
    rows = [
        {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": 2}},
        {"prompt": "2+2?", "answer": "4"},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"prompt": "x"}\n')
    with pytest.raises(ValueError) as info:
        load_rl_dataset(f)
    assert str(info.value) == (
        f"{f}: line 3: need 'prompt' (str or messages) and 'answer' or 'reward_model.ground_truth'; "
        "pass --skip-bad to skip such lines"
    )
    got = load_rl_dataset(f, skip_bad=True)
    assert got == [{"prompt": rows[0]["prompt"], "answer": "2"}, {"prompt": "2+2?", "answer": "4"}]


def test_settings_validation():
    DAPOConfig()
    for bad in (dict(num_generations=1), dict(epsilon=0.3, epsilon_high=0.2), dict(overlong_cache=2000)):
        with pytest.raises(ValueError):
            DAPOConfig(**bad)


def test_run_rl_one_step_with_dapo_settings(tiny_model_dir, tmp_path):
    s = DAPOConfig(steps=1, num_generations=2, prompts_per_step=2, max_completion_length=6, overlong_cache=2)
    m = run_rl(str(tiny_model_dir), _prompts(), tmp_path / "rl", s)
    assert m["steps"] == [1] and len(m["reward"]) == 1
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())["dapo"]
    assert cfg["loss_type"] == "dapo" and cfg["epsilon"] == 0.2 and cfg["epsilon_high"] == 0.28
    assert cfg["beta"] == 0.0 and cfg["num_generations"] == 2
    for name in ("metrics.json", "reward.png", "model/config.json"):
        assert (tmp_path / "rl" / name).is_file(), name


def test_prompts_over_max_prompt_length_are_dropped_and_counted(tiny_model_dir, tmp_path, capsys):
    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.rl import drop_long_prompts, prompt_length

    tok = load_tokenizer(tiny_model_dir)
    rows = _prompts(4)
    long = {"prompt": [{"role": "user", "content": "What is 1 + 1? " * 40}], "answer": "2"}
    n = [prompt_length(r["prompt"], tok) for r in rows + [long]]
    # counted as the trainer sees it: the chat template and its generation prompt included
    text = tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False)
    assert n[0] == len(tok(text, add_special_tokens=False)["input_ids"]) > len(tok(SYSTEM)["input_ids"])
    limit = max(n[:4])
    assert n[4] > limit
    assert drop_long_prompts(rows + [long], tok, limit) == (rows, 1)
    assert drop_long_prompts(rows + [long], tok, n[4]) == (rows + [long], 0)  # "longer than": equal is kept
    assert drop_long_prompts(rows + [long], tok, None) == (rows + [long], 0)
    s = DAPOConfig(steps=1, num_generations=2, prompts_per_step=2, max_completion_length=4, max_prompt_length=limit,
                   save_model=False)  # fmt: skip
    m = run_rl(str(tiny_model_dir), [long] + rows, tmp_path / "rl", s)
    assert m["prompts_dropped"] == 1
    assert f"dropped 1 of 5 prompts longer than {limit} tokens" in capsys.readouterr().out
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert (cfg["n_prompts"], cfg["n_prompts_dropped"], cfg["dapo"]["max_prompt_length"]) == (4, 1, limit)
    with pytest.raises(ValueError, match="every prompt is longer"):
        run_rl(str(tiny_model_dir), [long], tmp_path / "none", s)
    with pytest.raises(ValueError, match="max_prompt_length"):
        DAPOConfig(max_prompt_length=0)


def _weights(model_dir):
    from transformers import AutoModelForCausalLM

    return {n: p.detach().clone() for n, p in AutoModelForCausalLM.from_pretrained(model_dir).named_parameters()}


def test_one_dapo_step_moves_the_weights_only_when_rewards_differ(tiny_model_dir, tmp_path):
    """Rewards that differ inside a group give non-zero advantages and an update; equal rewards (beta 0) give none."""
    s = DAPOConfig(steps=1, num_generations=4, prompts_per_step=2, max_completion_length=6, learning_rate=1e-2)
    start = _weights(tiny_model_dir)
    m = run_rl(str(tiny_model_dir), _prompts(), tmp_path / "dense", s, reward_fn=_count_a)
    moved = _weights(tmp_path / "dense" / "model")
    assert max(float((moved[n] - start[n]).abs().max()) for n in start) > 1e-4, m["reward"]
    run_rl(str(tiny_model_dir), _prompts(), tmp_path / "flat", s, reward_fn=lambda completion, answer: 1.0)
    flat = _weights(tmp_path / "flat" / "model")
    assert all(torch.equal(flat[n], start[n]) for n in start)


def test_rl_command(tiny_model_dir, tmp_path, capsys):
    from anchorft.cli import command

    main = command("rl")

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": p["prompt"], "answer": p["answer"]}) + "\n" for p in _prompts(2)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("# anchorft rl ...\nnum_generations: 2\nmax_completion_length: 4\n")
    argv = ["--model", str(tiny_model_dir), "--dataset", str(data), "--out", str(tmp_path / "o"), "--config", str(cfg)]
    assert main(argv + ["--steps", "1", "--prompts_per_step", "1", "--save_model", "false"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["reward_first"] is not None  # after TRL logs
    assert not (tmp_path / "o" / "model").exists()
    cfg.write_text("num_generationz: 2\n")
    assert main(argv) == 2
    assert "unknown key" in capsys.readouterr().err


def _count_a(completion: str, answer: str) -> float:
    return completion.count("a") / max(1, len(completion))


@pytest.mark.slow
def test_reward_rises_on_a_learnable_reward(tiny_model_dir, tmp_path):
    """GRPO/DAPO machinery learns: the fraction of 'a' in the completions rises from a random start."""
    s = DAPOConfig(
        steps=30, num_generations=8, prompts_per_step=2, max_completion_length=8, learning_rate=1e-2, temperature=1.0
    )
    m = run_rl(str(tiny_model_dir), _prompts(), tmp_path / "rl", s, reward_fn=_count_a)
    r = m["reward"]
    first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
    assert last > first + 0.05, (first, last)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="fails on the testbed base the default pretraining builds now (reward 0.38 after 40 steps against 0.46 at "
    "the start; it failed the same way before the stop changes): the base moved when pretraining was pinned to 2 "
    "threads, and the RL settings were chosen on the old one; to be chosen again on the new base",
)
def test_rl_on_the_testbed_reward_rises(tmp_path):
    """DAPO from a pretrained testbed model on its ID math prompts (train split): the reward rises.

    ANCHORFT_TOY_MODEL names a pretrained testbed model (e.g. from `anchorft toy pretrain --out DIR`);
    without it a small testbed model is pretrained here (cached under .cache/anchorft/toy).
    """
    import os

    import numpy as np
    import torch

    from anchorft.eval.answers import last_boxed
    from anchorft.toy import skills as sk
    from anchorft.toy.evaluate import EvalSettings, build_eval_sets, evaluate_toy
    from anchorft.toy.pretrain import PretrainConfig, pretrained_model

    model_dir = os.environ.get("ANCHORFT_TOY_MODEL")
    if not model_dir:
        cfg = PretrainConfig(
            hidden_size=64, num_layers=3, num_heads=4, intermediate_size=256, steps=800, batch_size=32, eval_items=40
        )
        model_dir = str(pretrained_model(cfg, progress=False))
    skill = os.environ.get("ANCHORFT_TOY_RL_SKILL", "math_easy")
    steps = int(os.environ.get("ANCHORFT_TOY_RL_STEPS", "40"))
    lr = float(os.environ.get("ANCHORFT_TOY_RL_LR", "1e-4"))
    items = sk.sample_items(skill, 512, "train", np.random.default_rng(0))
    data = [{"prompt": it.prompt, "answer": last_boxed(it.answer)} for it in items]
    pps = int(os.environ.get("ANCHORFT_TOY_RL_PROMPTS", "8"))
    s = DAPOConfig(steps=steps, num_generations=8, prompts_per_step=pps, max_completion_length=16, learning_rate=lr)
    m = run_rl(model_dir, data, tmp_path / "rl", s)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    sets = build_eval_sets(["math_hard", *sk.OOD_SKILLS], 100, np.random.default_rng(5))
    es = EvalSettings(n_samples=4, k=4, id_items=100, ood_items=100)
    before = evaluate_toy(
        AutoModelForCausalLM.from_pretrained(model_dir), tok, sets, es, torch.Generator().manual_seed(0)
    )
    after = evaluate_toy(m["model"], tok, sets, es, torch.Generator().manual_seed(0))
    easy = build_eval_sets([skill], 200, np.random.default_rng(6))[skill]
    from anchorft.eval.pipeline import evaluate_prompts

    def acc(model):
        check = lambda i, c: sk.SKILLS[skill].check(easy[i], c)  # noqa: E731
        return evaluate_prompts(model, tok, [it.prompt for it in easy], check, max_new_tokens=16)["greedy"]

    r = np.asarray(m["correctness"])
    w = max(1, len(r) // 4)
    summary = {
        "model": model_dir, "skill": skill, "steps": steps, "lr": lr, "prompts_per_step": pps,
        "reward_first_quarter": float(r[:w].mean()), "reward_last_quarter": float(r[-w:].mean()),
        "reward_curve": [round(float(x), 4) for x in r],
        f"{skill}_greedy_before": acc(AutoModelForCausalLM.from_pretrained(model_dir)),
        f"{skill}_greedy_after": acc(m["model"]),
        "before": before, "after": after,
    }  # fmt: skip
    print("TESTBED_RL " + json.dumps(summary))
    assert summary["reward_last_quarter"] > summary["reward_first_quarter"]
