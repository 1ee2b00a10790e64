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
            "anchorft.rpsft.dapo_config",
            "rl_parser",
            ["--model", "m", "--dataset", "d", "--out", "o", "--skip_bad"],
            "skip_bad",
            True,
        ),
        (
            "anchorft.rpsft.dapo_config",
            "rl_parser",
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
    rl = {"--output_dir": "--out", "--output-dir": "--out"}  # `anchorft rl`'s: its output flag is --out
    assert normalize_train_argv(["--output-dir=o", "--out", "p", "--dataset_name", "d"], rl) == [
        "--out=o",
        "--out",
        "p",
        "--dataset_name",
        "d",
    ]


def test_rl_short_help_lists_the_project_flags_first(capsys):
    """`anchorft rl --help` has the same layout as `anchorft train --help`: the script's and DAPOConfig's own fields
    first, TRL's full list behind --help-all."""
    from anchorft.cli import command

    rl_main = command("rl")

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
    assert rl_main(["--help-all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) > 300


def _all_parsers(parser):
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


@pytest.mark.parametrize(
    "module,builder",
    [
        ("anchorft.commands.analyze", "_parser"),
        ("anchorft.commands.data", "_parser"),
        ("anchorft.commands.eval", "_eval_parser"),
        ("anchorft.commands.eval_suite", "_parser"),
        ("anchorft.commands.toy", "_parser"),
        ("anchorft.commands.toy_rl", "_parser"),
        ("anchorft.commands.w2s", "build_parser"),
    ],
)
def test_out_is_also_output_dir_everywhere(module, builder):
    import importlib

    parsers = list(_all_parsers(getattr(importlib.import_module(module), builder)()))
    with_out = [p for p in parsers if "--out" in p._option_string_actions]
    assert with_out
    for p in with_out:
        action = p._option_string_actions["--out"]
        assert (
            p._option_string_actions["--output_dir"] is action and p._option_string_actions["--output-dir"] is action
        )


def test_output_dir_in_rl_and_out_in_train_dry_run(tmp_path, capsys):
    from anchorft.commands.rl import parse

    script, _ = parse(["--model", "m", "--dataset", "d", "--output_dir", "o1"])
    assert script.out == "o1"
    script, _ = parse(["--model", "m", "--dataset", "d", "--output-dir=o2"])
    assert script.out == "o2"
    assert normalize_train_argv(["--out", "x"]) == ["--output_dir", "x"]  # anchorft train


def test_seeds_is_a_list_and_n_seeds_a_count(capsys):
    from anchorft.cli import main
    from anchorft.commands.toy import _parser

    args = _parser().parse_args(["compare", "--out", "o", "--n-seeds", "3"])
    assert args.n_seeds == 3 and args.seeds is None
    assert _parser().parse_args(["compare", "--out", "o", "--seeds", "0", "2"]).seeds == [0, 2]
    with pytest.raises(SystemExit):
        _parser().parse_args(["compare", "--out", "o", "--seeds", "0", "--n-seeds", "2"])
    capsys.readouterr()
    for cmd in (["w2s", "run", "--out", "o"], ["w2s", "theory", "--preset", "paper"]):
        assert main([*cmd, "--seeds", "3"]) == 2
        err = capsys.readouterr().err
        assert "--n-seeds 3" in err and "a list" in err


def test_plain_and_base_recipes_get_one_unknown_key_message(tmp_path, capsys):
    from anchorft.cli import main

    base = tmp_path / "base.yaml"
    base.write_text("learning_rat: 1.0e-5\n")
    leaf = tmp_path / "leaf.yaml"
    leaf.write_text("preset: [base.yaml]\nmethod: sft\n")
    msgs = []
    for cfg in (base, leaf):
        assert main(["train", "--config", str(cfg), "--model_name_or_path", "m", "--dataset", "d.jsonl"]) == 2
        msgs.append(capsys.readouterr().err.strip())
    assert msgs[0] == msgs[1]
    assert "unknown field 'learning_rat' in " in msgs[0] and "did you mean ['learning_rate']" in msgs[0]


def test_command_flags_take_the_library_functions_and_configs_defaults():
    """No restated defaults: each flag's default is the one of the function or dataclass field it feeds."""
    from dataclasses import MISSING, fields

    from anchorft.analysis.config import AnalysisConfig
    from anchorft.commands import analyze, data
    from anchorft.commands import eval as eval_cmd
    from anchorft.data.dapo import prepare_dapo_math
    from anchorft.data.openr1 import prepare_openr1_math
    from anchorft.dataclass_flags import keyword_defaults
    from anchorft.eval.runner import run_eval

    def check(ns, defaults, names):
        assert names and {n: getattr(ns, n) for n in names} == {n: defaults[n] for n in names}

    assert keyword_defaults(lambda a, b=1, *, c=None: 0) == {"b": 1, "c": None}
    ns = eval_cmd._eval_parser().parse_args(["--model", "m", "--bench", "b", "--out", "o"])
    check(ns, keyword_defaults(run_eval), ("n", "temperature", "top_p", "max_new_tokens", "seed", "batch_size"))
    ns = data._parser().parse_args(["openr1-math", "--out", "o"])
    check(ns, keyword_defaults(prepare_openr1_math), ("subset", "split", "size", "seed", "fmt"))
    ns = data._parser().parse_args(["dapo-math", "--out", "o"])
    check(ns, keyword_defaults(prepare_dapo_math), ("source", "split", "prompt_style", "dedupe"))
    from anchorft.commands import eval_suite
    from anchorft.eval.answers import MathChecker
    from anchorft.eval.vllm_backend import VLLMOptions

    timeout = keyword_defaults(MathChecker)["timeout_s"]
    assert eval_cmd._score_parser().parse_args(["--bench", "b", "--responses", "r"]).timeout == timeout
    ns = eval_suite._parser().parse_args(["--models", "a=b", "--out", "o"])
    assert (ns.timeout, ns.tp) == (timeout, VLLMOptions().tensor_parallel_size)
    ns = analyze._parser().parse_args(["--out", "o"])
    own = {f.name: f.default for f in fields(AnalysisConfig) if f.default is not MISSING}
    check(ns, own, [n for n in own if n not in ("streaming", "plots")])
