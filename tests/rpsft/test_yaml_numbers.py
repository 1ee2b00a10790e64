"""Numbers in a recipe as TrlParser reads them: YAML 1.1 (PyYAML) reads `1e-4` as a string, TrlParser makes the
YAML's values argparse defaults, and argparse converts a string default with the option's type, so TRL trains with
the float; `anchorft train` and `anchorft rl` read the same value."""

from __future__ import annotations

import json

import pytest
from trl import TrlParser

from anchorft.cli import command
from anchorft.rpsft.config import RPSFTConfig, ScriptArguments
from anchorft.rpsft.dapo_config import load_rl_config
from anchorft.rpsft.recipes import as_trl_reads, load_recipe

RECIPE = "method: sft\nlearning_rate: 1e-4\nmax_steps: '2'\nbf16: 'false'\nwarmup_steps: 3e-2\nrun_name: 1e-4\n"


def test_yaml_11_reads_the_exponent_as_a_string_and_trl_as_a_float(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    _, trl_args = TrlParser((ScriptArguments, RPSFTConfig)).parse_args_and_config(
        ["--config", str(path), "--output_dir", str(tmp_path / "o")]
    )
    ours, _ = load_recipe(path)
    for key in ("learning_rate", "max_steps", "bf16", "warmup_steps", "run_name"):
        assert ours[key] == getattr(trl_args, key) and type(ours[key]) is type(getattr(trl_args, key)), key
    assert ours["learning_rate"] == 1e-4 and ours["max_steps"] == 2 and ours["bf16"] is False
    assert ours["run_name"] == "1e-4"  # a string field keeps the string


def test_a_string_the_type_refuses_is_named_with_its_file(tmp_path):
    mapping = as_trl_reads({"max_steps": "1e3", "learning_rate": "fast"}, RPSFTConfig)
    assert mapping == {"max_steps": "1e3", "learning_rate": "fast"}  # argparse refuses int("1e3") too
    (tmp_path / "r.yaml").write_text("method: sft\nmax_steps: 1e3\n")
    with pytest.raises(ValueError, match=r"r\.yaml: max_steps: expected int, got '1e3' \(str\)"):
        load_recipe(tmp_path / "r.yaml")


def test_an_rl_config_reads_its_numbers_as_trl(tmp_path):
    (tmp_path / "rl.yaml").write_text("learning_rate: 1e-6\nbeta: 0.0\nmax_steps: 3\n")
    cfg = load_rl_config(str(tmp_path / "rl.yaml"))
    assert cfg["learning_rate"] == 1e-6 and isinstance(cfg["learning_rate"], float)


def test_a_recipe_with_learning_rate_1e_4_trains(model_dir, jsonl, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model_name_or_path: {model_dir}\ndataset: {jsonl}\nmethod: rpsft\nanchor_rank: 4\nlearning_rate: 1e-4\n"
        "max_steps: 2\nper_device_train_batch_size: 2\nmax_length: 32\nreport_to: none\ndisable_tqdm: true\n"
        "save_strategy: 'no'\n"
    )
    out = tmp_path / "run"
    assert command("train")(["--config", str(recipe), "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads((out / "anchorft-run.json").read_text())["status"] == "complete"
    assert json.loads((out / "rpsft_config.json").read_text())["learning_rate"] == 1e-4
