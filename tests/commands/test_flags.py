"""One flag style across commands: --snake_case and --kebab-case both; global options after the subcommand."""

from __future__ import annotations

import pytest

from anchorft.commands.flags import normalize_train_argv


@pytest.mark.parametrize(
    "module,builder,argv,dest,value",
    [
        ("anchorft.commands.toy_rl", "_parser", ["--compare", "c", "--prompts_per_step", "3"], "prompts_per_step", 3),
        ("anchorft.commands.toy_rl", "_parser", ["--compare", "c", "--prompts-per-step", "3"], "prompts_per_step", 3),
        ("anchorft.commands.eval", "_eval_parser", ["--model", "m", "--out", "o", "--lm_eval", "t"], "lm_eval", "t"),
        ("anchorft.commands.eval", "_eval_parser", ["--model", "m", "--out", "o", "--top-p", "0.5"], "top_p", 0.5),
        ("anchorft.commands.analyze", "_parser", ["--out", "o", "--fisher_data", "f"], "fisher_data", "f"),
        (
            "anchorft.commands.rl",
            "_parser",
            ["--model", "m", "--dataset", "d", "--out", "o", "--skip_bad"],
            "skip_bad",
            True,
        ),
        (
            "anchorft.commands.rl",
            "_parser",
            ["--model", "m", "--dataset", "d", "--out", "o", "--skip-bad", "--prompts-per-step", "3"],
            "prompts_per_step",
            3,
        ),
        ("anchorft.commands.data", "_parser", ["openr1-math", "--out", "o", "--no_progress"], "no_progress", True),
        ("anchorft.commands.toy", "_parser", ["compare", "--out", "o", "--threads", "2"], "threads", 2),
        ("anchorft.commands.toy", "_parser", ["--threads", "2", "compare", "--out", "o"], "threads", 2),
    ],
)
def test_both_spellings(module, builder, argv, dest, value):
    import importlib

    args = getattr(importlib.import_module(module), builder)().parse_args(argv)
    assert getattr(args, dest) == value


def test_train_aliases():
    argv = normalize_train_argv(["--out", "o", "--dataset_name", "d.jsonl", "--dataset-name=e", "--out=p"])
    assert argv == ["--output_dir", "o", "--dataset", "d.jsonl", "--dataset=e", "--output_dir=p"]


def test_parse_named_pairs_in_order_and_errors():
    from anchorft.commands.flags import parse_named

    assert list(parse_named(["b=x", "a=y=z"], "--tuned").items()) == [("b", "x"), ("a", "y=z")]
    with pytest.raises(ValueError, match="--models must be NAME=DIR"):
        parse_named(["noequals"], "--models")
    with pytest.raises(ValueError, match="the name 'a' is given twice"):
        parse_named(["a=x", "a=y"], "--tuned")


def test_rl_short_help_lists_the_project_flags_first(capsys):
    """`anchorft rl --help` has the same layout as `anchorft train --help`: the script's and DAPOConfig's own fields
    first, TRL's full list behind --help-all."""
    from anchorft.commands.rl import main as rl_main

    assert rl_main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in (
        "--config",
        "--model",
        "--dataset",
        "--out",
        "--overwrite",
        "--estimate",
        "--steps",
        "--anchor_method",
    ):
        assert flag in text
    assert len(text.splitlines()) < 120 and "--help-all" in text
    with pytest.raises(SystemExit):
        rl_main(["--help-all"])
    assert len(capsys.readouterr().out.splitlines()) > 300
