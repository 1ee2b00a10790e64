"""What `anchorft rl` really hands to TRL's GRPOTrainer (the reward functions, the sampling and loss settings, the
anchor) against what the configuration asked for, the metrics.json it writes from the trainer's log, and its
rerun with a changed setting. TRL's trainer is a stand-in that records its arguments and logs given rewards."""

from __future__ import annotations

import json

import pytest

from anchorft.cli import main as cli

LOG = [
    {"step": 1, "reward": 0.25, "rewards/correctness_reward/mean": 0.5, "completions/mean_length": 3.0},
    {"step": 1, "loss": 0.1},
    {"step": 2, "reward": -0.5, "rewards/correctness_reward/mean": 0.0, "completions/mean_length": 6.0},
    {"step": 3, "reward": 0.75, "rewards/correctness_reward/mean": 1.0, "completions/mean_length": 2.0},
]


@pytest.fixture
def fake_grpo(monkeypatch):
    import trl

    seen: list[dict] = []

    class State:
        def __init__(self):
            self.log_history, self.global_step = [], 0

    class FakeGRPOTrainer:
        def __init__(self, model=None, reward_funcs=None, args=None, train_dataset=None, processing_class=None,
                     callbacks=None, **kw):  # fmt: skip
            self.model, self.args, self.state = model, args, State()
            self.accelerator, self.is_deepspeed_enabled = None, False  # as transformers' Trainer sets them
            seen.append({"reward_funcs": list(reward_funcs), "args": args, "data": train_dataset, "trainer": self})

        def train(self):
            self.state.log_history = [dict(h) for h in LOG]
            self.state.global_step = 3

        def save_model(self, path):
            self.model.save_pretrained(path)

    monkeypatch.setattr(trl, "GRPOTrainer", FakeGRPOTrainer)
    return seen


@pytest.fixture
def rl_files(tmp_path):
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def _run(tiny_model_dir, data, out, *flags) -> int:
    return cli(["rl", "--model", str(tiny_model_dir), "--dataset", str(data), "--out", str(out), *flags])


def test_the_trainer_gets_the_configured_rewards_and_settings(fake_grpo, tiny_model_dir, rl_files, tmp_path):
    """Each configured reward is among the functions the trainer gets and behaves as configured: correctness of
    the last box (graded by math-verify), DAPO's soft overlong punishment (eq. 13) at the configured length and
    cache; without overlong_cache, the correctness reward alone. The sampling and loss settings given on the
    command line are the trainer's."""
    flags = ["--max_completion_length", "8", "--overlong_cache", "4", "--temperature", "0.9", "--top_p", "0.8",
             "--num_generations", "2", "--prompts_per_step", "2", "--epsilon", "0.1", "--epsilon_high", "0.3",
             "--beta", "0.01", "--learning_rate", "3e-6", "--steps", "3"]  # fmt: skip
    assert _run(tiny_model_dir, rl_files, tmp_path / "a", *flags) == 0
    (call,) = fake_grpo
    funcs, args = call["reward_funcs"], call["args"]
    assert len(funcs) == 2
    correct = funcs[0](completions=["so \\boxed{4}", "\\boxed{5}", "4"], answer=["4", "4", "4"])
    assert correct == [1.0, 0.0, 0.0]
    # eq. 13 with L_max 8, L_cache 4: 0 up to 4 tokens, ((8 - 4) - L) / 4 up to 8, -1 beyond
    lengths = [3, 4, 5, 6, 8, 9]
    want = [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert funcs[1](completion_ids=[[1] * n for n in lengths]) == pytest.approx(want)
    got = {k: getattr(args, k) for k in ("temperature", "top_p", "num_generations", "max_completion_length",
                                         "epsilon", "epsilon_high", "beta", "learning_rate")}  # fmt: skip
    assert got == {"temperature": 0.9, "top_p": 0.8, "num_generations": 2, "max_completion_length": 8,
                   "epsilon": 0.1, "epsilon_high": 0.3, "beta": 0.01, "learning_rate": 3e-6}  # fmt: skip
    assert args.loss_type == "dapo" and args.max_steps == 3
    assert sorted(call["data"]["answer"]) == ["0", "2", "4", "6"]  # the prompts of the file, with their answers

    fake_grpo.clear()
    assert _run(tiny_model_dir, rl_files, tmp_path / "b", "--max_completion_length", "8") == 0
    (call,) = fake_grpo
    assert [f.__name__ for f in call["reward_funcs"]] == ["correctness_reward"]


def test_metrics_json_is_the_trainers_log(fake_grpo, tiny_model_dir, rl_files, tmp_path):
    """metrics.json: the reward curve, its first and last value and the correctness curve, recomputed from the
    trainer's log (the rows that carry a reward)."""
    assert _run(tiny_model_dir, rl_files, tmp_path / "a", "--steps", "3") == 0
    m = json.loads((tmp_path / "a" / "metrics.json").read_text())
    rows = [h for h in LOG if "reward" in h]
    assert m["steps"] == [h["step"] for h in rows]
    assert m["reward"] == [h["reward"] for h in rows]
    assert m["correctness"] == [h["rewards/correctness_reward/mean"] for h in rows]
    assert m["completion_length"] == [h["completions/mean_length"] for h in rows]
    assert (m["reward_first"], m["reward_last"]) == (rows[0]["reward"], rows[-1]["reward"])
    assert m["optimizer_steps"] == 3


def test_the_anchor_asked_for_is_the_trainers(fake_grpo, tiny_model_dir, rl_files, tmp_path):
    """--anchor_method l2 / rpsft: the trainer is the anchored one, with the configured lambda and rank."""
    assert _run(tiny_model_dir, rl_files, tmp_path / "a", "--anchor_method", "rpsft", "--anchor_rank", "2",
                "--anchor_lambda", "0.5") == 0  # fmt: skip
    tr = fake_grpo[-1]["trainer"]
    assert tr.anchor_lambda == 0.5 and set(tr.anchor.ranks.values()) == {2}
    assert _run(tiny_model_dir, rl_files, tmp_path / "b") == 0
    assert not hasattr(fake_grpo[-1]["trainer"], "anchor")


RL_RERUNS = [
    # (the rerun's flags after a finished run, exit code, trainer runs after it)
    ([], 0, 1),  # the same: reused
    (["--anchor_method", "l2"], 2, 1),  # a setting outside DAPO's summary but in the run's hash: refused
    (["--top_k", "5"], 2, 1),  # TRL's sampling field
    (["--scale_rewards", "batch"], 2, 1),  # TRL's loss field
    (["--anchor_method", "l2", "--overwrite"], 0, 2),
]


@pytest.mark.parametrize("flags,rc,runs", RL_RERUNS)
def test_rl_rerun_with_a_changed_setting_is_not_reused(fake_grpo, tiny_model_dir, rl_files, tmp_path, flags, rc, runs):
    """Rerun matrix, `anchorft rl`: every setting that changes the result is in the run's hash, so a finished run
    is reused only for the same settings."""
    out = tmp_path / "a"
    assert _run(tiny_model_dir, rl_files, out) == 0 and len(fake_grpo) == 1
    assert _run(tiny_model_dir, rl_files, out, *flags) == rc
    assert len(fake_grpo) == runs
    assert json.loads((out / "anchorft-run.json").read_text())["status"] == "complete"
