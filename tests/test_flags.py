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
