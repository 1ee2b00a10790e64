"""A mistake that needs no model is reported before torch, transformers or TRL is imported (seconds sooner), with
the message the full parse gives; the flags read from the configs' source are TrlParser's own."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anchorft.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ("torch", "transformers", "trl", "datasets", "deepspeed", "peft")
# runs the command line given after the script's name; prints the heavy modules loaded by the time it returned
PROBE = f"import sys, anchorft.cli as c; rc = c.main(sys.argv[1:]); print(sorted(set({HEAVY!r}) & set(sys.modules)))"
MISSING_INTEGRATION = next(
    (n for n in ("tensorboard", "wandb", "mlflow", "comet_ml", "trackio") if importlib.util.find_spec(n) is None), None
)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Inputs in a folder of their own, the current directory of the tests."""
    (tmp_path / "good.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    (tmp_path / "bad.yaml").write_text("learning_rate: [\n  1\n")
    (tmp_path / "typo.yaml").write_text("model_name_or_path: model\ndataset: good.jsonl\nlearnig_rate: 1.0e-5\n")
    (tmp_path / "lr0.yaml").write_text("model_name_or_path: model\ndataset: good.jsonl\nlearning_rate: 0\n")
    (tmp_path / "rl_typo.yaml").write_text("learning_ratez: 1.0e-6\n")
    model = tmp_path / "model"
    model.mkdir()
    llama = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
    (model / "config.json").write_text(json.dumps(llama))
    monkeypatch.chdir(tmp_path)
    return tmp_path


TRAIN = ["train", "--model_name_or_path", "model", "--dataset", "good.jsonl", "--out", "o"]
RL = ["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o"]
# (argv, a piece of the one-line message)
CASES = [
    (["train", "--config", "missing.yaml"], "missing.yaml is neither a file nor a shipped config"),
    (["train", "--config", "bad.yaml"], "bad.yaml:3:1: malformed YAML"),
    (["train", "--config", "typo.yaml"], "unknown field 'learnig_rate' in"),
    (["train", "--config", "lr0.yaml"], "learning_rate must be a finite number > 0, got 0"),
    (["train"], "missing --model_name_or_path --dataset"),
    ([*TRAIN, "--learning_rate", "0"], "learning_rate must be a finite number > 0, got 0.0"),
    ([*TRAIN, "--learnig_rate", "1e-4"], "--learnig_rate (did you mean --learning_rate?)"),
    ([*TRAIN, "--max_steps", "0"], "max_steps must be >= 1"),
    ([*TRAIN, "--method", "lora", "--lora_rank", "64"], "lora_rank=64 exceeds the smaller side"),
    (["train", "--config", "missing.yaml", "--dry-run"], "missing.yaml is neither a file nor a shipped config"),
    (["train", "--estimate", "--config", "missing.yaml"], "missing.yaml is neither a file nor a shipped config"),
    (["rl", "--config", "missing.yaml"], "missing.yaml is neither a file nor a shipped config"),
    ([*RL, "--config", "rl_typo.yaml"], "unknown key 'learning_ratez'"),
    ([*RL, "--learning_rate", "-1"], "learning_rate > 0"),
    ([*RL, "--learning_rate", "inf"], "learning_rate must be a finite number > 0, got inf"),
    ([*RL, "--lerning_rate", "3"], "--lerning_rate (did you mean --learning_rate?)"),
    # values converted and choices checked as TrlParser does: the project's fields from source, TRL's from its table
    ([*TRAIN, "--method", "rpsfft"], "invalid choice: 'rpsfft'; did you mean 'rpsft'?"),
    ([*TRAIN, "--learning_rate", "abc"], "invalid float value: 'abc'"),
    ([*TRAIN, "--lr_scheduler_type", "cosin"], "invalid choice: 'cosin'; did you mean 'cosine'?"),
    ([*TRAIN, "--bf16", "maybe"], "Truthy value expected: got maybe"),
    ([*RL, "--anchor_method", "rpsfft"], "invalid choice: 'rpsfft'; did you mean 'rpsft'?"),
    (["toy", "pretrain", "--preset", "nope", "--out", "o"], "preset: not found: 'nope'"),
    (["toy", "compare", "--preset", "nope", "--out", "o"], "preset: not found: 'nope'"),
    (["eval", "--model", "./no/such/model", "--bench", "good.jsonl", "--out", "o"], "does not exist"),
]
if MISSING_INTEGRATION:
    CASES += [([*TRAIN, "--report_to", MISSING_INTEGRATION], f"report_to='{MISSING_INTEGRATION}'")]
    CASES += [([*RL, "--report_to", MISSING_INTEGRATION], f"report_to='{MISSING_INTEGRATION}'")]


@pytest.mark.parametrize("argv,piece", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_mistakes_are_reported_before_torch_transformers_and_trl_load(files, argv, piece):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "[]", (argv, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert piece in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 or lines[1].startswith("Run `"), r.stderr


@pytest.mark.parametrize(
    "argv",
    [a for a, _ in CASES if a[0] in ("train", "rl") and "--dry-run" not in a and "--estimate" not in a],
    ids=lambda a: " ".join(a),
)
def test_the_early_message_is_the_full_parse_s(files, argv, monkeypatch, capsys):
    """Each pre-checked mistake gets, word for word, the message the full parse (TrlParser, the configs' checks,
    the loaded model's rank check) gives with the pre-checks off."""
    import anchorft.rpsft.prechecks as pc

    assert main(list(argv)) == 2
    early = capsys.readouterr().err
    off: list = []  # the pre-checks the command called, turned off (so the full parse below is not pre-checked)
    monkeypatch.setattr(pc, "check_train_argv", lambda argv: off.append(argv))
    monkeypatch.setattr(pc, "check_rl_argv", lambda argv: off.append(argv))
    if "lora" in argv:  # the full path reports the rank after loading the model: build it from its config
        pytest.importorskip("peft")
        from transformers import LlamaConfig, LlamaForCausalLM

        from anchorft.rpsft.peft_methods import peft_config_for

        cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=1)
        from anchorft.rpsft.config import RPSFTConfig

        args = RPSFTConfig(output_dir="o", method="lora", lora_rank=64, report_to="none")
        with pytest.raises(ValueError) as err:
            peft_config_for(args, LlamaForCausalLM(cfg))
        assert early.strip() == f"anchorft train: error: {err.value}"
        return
    assert main(list(argv)) == 2
    assert early == capsys.readouterr().err
    assert off, "the command did not call the pre-check that was turned off: the comparison above proves nothing"


@pytest.mark.parametrize("command", ["train", "rl"])
def test_the_flags_read_from_source_are_trlparser_s(command):
    """Every flag TrlParser makes of the config dataclasses, with as many values, from their source alone."""
    from trl import TrlParser

    from anchorft.rpsft.prechecks import source_fields, trl_flags_parser

    if command == "train":
        from anchorft.rpsft.config import RPSFTConfig as Config
        from anchorft.rpsft.config import ScriptArguments as Script

        specs = [("anchorft.rpsft.config", "ScriptArguments"), ("anchorft.rpsft.config", "RPSFTConfig")]
    else:
        from anchorft.rpsft.dapo_config import DAPOConfig as Config
        from anchorft.rpsft.dapo_config import RLScriptArguments as Script

        specs = [("anchorft.rpsft.dapo_config", "RLScriptArguments"), ("anchorft.rpsft.dapo_config", "DAPOConfig")]
    read = [source_fields(*spec) for spec in specs]
    assert all(r is not None for r in read)
    for fields, cls in zip(read, (Script, Config)):
        assert [n for n, f in fields.items() if f.init] == [f.name for f in dataclasses.fields(cls) if f.init]

    def shape(p):
        return {o: a.nargs for a in p._actions for o in a.option_strings}

    mine = shape(trl_flags_parser([f for r in read for f in r.values()], "x"))
    real = shape(TrlParser((Script, Config)))
    assert mine.keys() == real.keys()
    assert {o: n for o, n in mine.items() if n != real[o] and not (n is None and real[o] == 0)} == {}


@pytest.mark.parametrize(
    "family,extra",
    [
        ("llama", {"intermediate_size": 64}),
        ("llama", {"intermediate_size": 24}),  # MLP narrower than the width
        ("qwen3", {"intermediate_size": 64, "head_dim": 16}),  # q_proj wider than the width
    ],
)
def test_lora_rank_limit_from_config_json_is_the_loaded_model_s(tmp_path, family, extra):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from anchorft.rpsft.prechecks import lora_rank_limit

    cfg = AutoConfig.for_model(family, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                               num_hidden_layers=1, vocab_size=64, **extra)  # fmt: skip
    cfg.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_config(cfg)
    head = model.get_output_embeddings()
    largest = max(min(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    assert lora_rank_limit(tmp_path) == largest
    assert lora_rank_limit(tmp_path, "q_proj") is None  # other targets: checked on the loaded model


def test_eval_flags_take_run_eval_s_defaults_from_its_source():
    """`anchorft eval` builds its parser without importing the runner (torch); the defaults are still run_eval's."""
    from anchorft.dataclass_flags import keyword_defaults
    from anchorft.eval.runner import run_eval
    from anchorft.rpsft.prechecks import source_defaults

    assert source_defaults("anchorft.eval.runner", "run_eval") == keyword_defaults(run_eval)
    assert source_defaults("anchorft.eval.runner", "no_such_function") is None


def test_every_shipped_recipe_and_rl_config_passes_the_prechecks():
    """The pre-checks refuse nothing the full parse accepts: every shipped recipe (tests/rpsft/test_recipes.py
    builds each) and the RL config pass them."""
    from anchorft.resources import shipped_configs
    from anchorft.rpsft.prechecks import check_rl_argv, check_train_argv

    recipes = [n for n in shipped_configs("rpsft") if not n.startswith("rpsft/_base")]
    assert recipes
    for name in recipes:
        assert check_train_argv(["--config", name, "--learning_rate", "1e-5"])["learning_rate"] == "1e-5"
    for name in shipped_configs("rl"):
        check_rl_argv(["--config", name, "--model", "m", "--dataset", "d.jsonl", "--out", "o"])
