"""Trainer arguments refused when the config is built, before any model is loaded: one line naming the field."""

from __future__ import annotations

import importlib.util

import pytest

from anchorft.cli import main


@pytest.mark.parametrize("lr", [-1.0, 0.0, float("nan"), float("inf")])
def test_a_bad_learning_rate_is_refused(rp, lr):
    with pytest.raises(ValueError, match="learning_rate must be a finite number > 0"):
        rp.base_args("o", learning_rate=lr)


def test_bad_max_steps_and_missing_integrations_are_refused(rp, monkeypatch):
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        rp.base_args("o", max_steps=0)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "tensorboard" else real(n, *a))
    with pytest.raises(ValueError, match=r"report_to='tensorboard': tensorboard is not installed; pip install"):
        rp.base_args("o", report_to=["tensorboard"])


def test_dapo_config_checks_the_same(monkeypatch):
    from anchorft.rpsft.dapo_config import DAPOConfig

    with pytest.raises(ValueError, match="learning_rate"):
        DAPOConfig(output_dir="o", learning_rate=-1.0)


def test_train_command_refuses_a_negative_learning_rate_in_one_line(tmp_path, monkeypatch, capsys, rp):
    """Before anything is loaded (no model folder is read: the path does not even exist)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("method: sft\n")
    rc = main(["train", "--config", "r.yaml", "--model_name_or_path", "nowhere", "--dataset", "d.jsonl",
               "--out", "o", "--learning_rate", "-1"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "learning_rate must be a finite number > 0, got -1.0" in err.splitlines()[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_report_to_names_are_the_installed_transformers_integrations():
    """The names the early check knows (written down: reading them loads transformers) are transformers' own."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from anchorft.rpsft.arg_checks import REPORT_TO_NAMES

    assert set(REPORT_TO_NAMES) == {*INTEGRATION_TO_CALLBACK, "all", "none"}


def test_a_misspelt_report_to_is_refused_with_the_closest_name(rp):
    with pytest.raises(ValueError, match=r"report_to='tensorbord': not an integration .*did you mean 'tensorboard'"):
        rp.base_args("o", report_to=["tensorbord"])
    rp.base_args("o", report_to="none")  # "none" and "all" are transformers' own words
