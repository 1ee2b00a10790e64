"""Shipped configs by name (`anchorft.resources.config_path`, `anchorft configs`): what a wheel user can pass to
--config without a checkout; a file on disk wins over a shipped config of the same name."""

from __future__ import annotations

import pytest

from anchorft.cli import main
from anchorft.resources import config_path, configs_dir, shipped_configs


def test_names_resolve_to_the_shipped_files():
    names = shipped_configs()
    for name in ("rpsft/qwen2.5-7b-instruct/rpsft", "accelerate/zero2", "rl/dapo", "toy/default", "w2s/paper"):
        assert name in names
        assert config_path(name) == configs_dir(f"{name}.yaml")
    assert config_path("accelerate/zero2.yaml") == configs_dir("accelerate/zero2.yaml")
    assert all(n.startswith("rpsft/") for n in shipped_configs("rpsft"))


def test_a_file_on_disk_wins_and_an_unknown_name_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "dapo.yaml").write_text("learning_rate: 1.0e-5\n")
    assert config_path("rl/dapo.yaml").resolve() == (tmp_path / "rl" / "dapo.yaml").resolve()
    assert config_path("rl/dapo") == configs_dir("rl/dapo.yaml")  # not a file as typed: the shipped one
    want = r"rpsf is neither a file nor a shipped config; did you mean 'rpsft/qwen2.5-7b-instruct/rpsft'\?$"
    with pytest.raises(ValueError, match=r"^--config: rpsft/qwen2.5-7b-instruct/" + want):
        config_path("rpsft/qwen2.5-7b-instruct/rpsf")


def test_recipes_and_rl_configs_load_by_name():
    from anchorft.rpsft.dapo_config import load_rl_config
    from anchorft.rpsft.recipes import load_recipe

    args, _ = load_recipe("rpsft/qwen2.5-7b-instruct/rpsft")
    assert args["method"] == "rpsft" and args["anchor_rank"] == 768
    assert load_rl_config("rl/dapo")["learning_rate"] > 0


def test_configs_command(tmp_path, capsys):
    assert main(["configs", "list", "accelerate"]) == 0
    assert "accelerate/zero2" in capsys.readouterr().out.split()
    assert main(["configs", "path", "accelerate/fsdp2"]) == 0
    assert capsys.readouterr().out.strip() == str(configs_dir("accelerate/fsdp2.yaml"))
    assert main(["configs", "copy", "rl/dapo", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "dapo.yaml").read_text() == configs_dir("rl/dapo.yaml").read_text()
    capsys.readouterr()
    assert main(["configs", "copy", "rl/dapo", str(tmp_path / "mine")]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err
    assert main(["configs", "path", "nope/x"]) == 2
