"""Every bad input is one line on stderr naming the problem, exit code 2, no traceback, no model loaded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anchorft.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def files(tmp_path):
    """Bad and good inputs in a folder of their own; the tests run with it as the current directory."""
    f = tmp_path
    (f / "bad.yaml").write_text("pretrain: [\n  steps: 3\n")
    (f / "unknown.yaml").write_text("pretrain:\n  stepz: 3\n")
    (f / "wrongtype.yaml").write_text("pretrain:\n  steps: many\n")
    (f / "rl_unknown.yaml").write_text("learning_ratez: 1.0e-6\n")
    (f / "rl_wrongtype.yaml").write_text("learning_rate: fast\n")
    (f / "empty.jsonl").write_text("")
    (f / "empty.json").write_text("")
    (f / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": \n')
    (f / "good.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    (f / "afile").write_text("x")
    model = f / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # enough for the checks; loading it would fail
    (f / "cmp").mkdir()
    (f / "cmp" / "results.json").write_text(json.dumps({"methods": {}}))
    suite_model = f / "suite_model"  # passes the suite's folder checks (config, weights, tokenizer files)
    suite_model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (suite_model / name).write_text("{}")
    (f / "benches" / "id").mkdir(parents=True)
    (f / "benches" / "id" / "adds.jsonl").write_text("{}\n")
    return f


SUITE = ["eval", "suite", "--models", "m=suite_model", "--bench-dir", "benches", "--benches", "adds"]
TRAIN = ["train", "--model_name_or_path", "model", "--dataset", "good.jsonl", "--out", "runs/t"]
# (argv, a piece of the one-line message that names the problem)
CASES = [
    # missing model / hub name without network
    (["train", "--model_name_or_path", "./no/such/model", "--dataset", "good.jsonl", "--out", "o"], "./no/such/model"),
    (["eval", "--model", "./no/such/model", "--bench", "good.jsonl", "--out", "o"], "does not exist"),
    (["rl", "--model", "afile", "--dataset", "good.jsonl", "--out", "o"], "is a file"),
    # malformed YAML (file and line)
    (["train", "--config", "bad.yaml"], "bad.yaml:3:1: malformed YAML"),
    (["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o", "--config", "bad.yaml"], "bad.yaml:3:1"),
    (["toy", "compare", "--preset", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
    (["w2s", "run", "--preset", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
    (["w2s", "sweep", "--kind", "race", "--spec", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
    # unknown keys and wrong types in toy and rl YAML
    (["toy", "compare", "--preset", "unknown.yaml", "--out", "o"], "key 'stepz', did you mean 'steps'"),
    (["toy", "pretrain", "--preset", "wrongtype.yaml", "--out", "o"], "steps='many' is not a valid int"),
    (["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o", "--config", "rl_unknown.yaml"], "ratez"),
    (["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "o", "--config", "rl_wrongtype.yaml"], "float"),
    # empty or malformed JSONL (file and line)
    (["train", "--model_name_or_path", "model", "--dataset", "empty.jsonl", "--out", "o"], "empty.jsonl is empty"),
    (["train", "--model_name_or_path", "model", "--dataset", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["data", "openr1-math", "--source", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["data", "openr1-math", "--source", "empty.jsonl", "--out", "o"], "empty.jsonl is empty"),
    (["rl", "--model", "model", "--dataset", "bad.jsonl", "--out", "o"], "bad.jsonl:2"),
    (["data", "dapo-math", "--source", "bad.jsonl", "--out", "o"], "bad.jsonl:2: not JSON"),
    (["data", "dapo-math", "--source", "empty.jsonl", "--out", "o"], "empty.jsonl is empty"),
    (["train", "--estimate", "--model_config", "empty.json"], "model config: empty.json is empty"),
    # --out is a file, for every command that writes a folder
    ([*TRAIN[:-1], "afile"], "afile exists and is a file"),
    (["toy", "pretrain", "--preset", "smoke", "--out", "afile"], "afile exists and is a file"),
    (["toy", "compare", "--preset", "smoke", "--out", "afile"], "afile exists and is a file"),
    (["toy", "report", "--from", "cmp", "--out", "afile"], "afile exists and is a file"),
    (["toy", "rl", "--compare", "cmp", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "run", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "sweep", "--kind", "chi", "--quick", "--out", "afile"], "afile exists and is a file"),
    (["eval", "--model", "model", "--bench", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["rl", "--model", "model", "--dataset", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["data", "openr1-math", "--source", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["analyze", "--base", "model", "--out", "afile"], "afile exists and is a file"),
    ([*SUITE, "--out", "afile"], "afile exists and is a file"),
    (["data", "dapo-math", "--source", "good.jsonl", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "sweep", "--kind", "ablation", "--quick", "--out", "afile"], "afile exists and is a file"),
    (["w2s", "run", "--out", "afile/sub"], "afile is a file"),
    # the testbed's ValueErrors
    (["toy", "pretrain", "--steps", "0", "--out", "o"], "steps: must be >= 1"),
    (["toy", "compare", "--preset", "smoke", "--threads", "0", "--out", "o"], "--threads: must be >= 1"),
    (["toy", "compare", "--preset", "smoke", "--methods", "nope", "--out", "o"], "methods: unknown"),
    (["toy", "compare", "--preset", "smoke", "--sweep", "anchor_rank", "--out", "o"], "anchor_rank"),
    (["toy", "compare", "--preset", "nope", "--out", "o"], "neither a preset"),
    (["toy", "report", "--from", "nowhere", "--out", "o"], "nowhere/results.json does not exist"),
    (["toy", "rl", "--compare", "cmp", "--steps", "0"], "steps"),
    # commands' own values: suite preset, sweep kind and overrides, the suite's settings
    ([*SUITE, "--out", "o", "--preset", "nope"], "unknown preset 'nope'"),
    ([*SUITE, "--out", "o", "--k", "5", "--n", "2"], "1 <= k <= n"),
    ([*SUITE[:-1], "nope", "--out", "o"], "no nope.jsonl under benches"),
    (["w2s", "sweep", "--kind", "nope", "--out", "o"], "unknown sweep kind 'nope'"),
    (["w2s", "sweep", "--kind", "ablation", "--quick", "--out", "o", "colour=red"], "colour"),
    (["w2s", "sweep", "--kind", "chi", "--quick", "--out", "o", "steps=0"], "steps"),
    (["w2s", "run", "--out", "o", "loss=hinge"], "loss"),
]


@pytest.fixture
def no_model_loads(monkeypatch):
    import transformers

    def refuse(*a, **k):
        raise RuntimeError("a model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", refuse)


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, expected, files, monkeypatch, capsys, no_model_loads):
    monkeypatch.chdir(files)
    monkeypatch.delenv("ANCHORFT_DEBUG", raising=False)
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and expected in err, err
    assert err.startswith(f"anchorft {argv[0]}")
    assert not (files / "o").exists()  # a refused run leaves no output folder behind


def test_hub_name_fails_fast_without_network(files, monkeypatch, capsys, no_model_loads):
    monkeypatch.chdir(files)
    import anchorft.preflight as pf

    monkeypatch.setattr(pf, "hub_reachable", lambda timeout=3.0: False)
    argv = ["train", "--model_name_or_path", "someorg/not-cached-model", "--dataset", "good.jsonl", "--out", "o"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "someorg/not-cached-model" in err and "cannot be reached" in err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pf, "hub_reachable", lambda timeout=3.0: pytest.fail("the network was tried offline"))
    assert main(argv) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err


# argparse's own refusals: the error and a --help hint on one line, no usage dump
ARGPARSE = [
    ([*TRAIN, "--method", "rpsfft"], "anchorft train: error: argument --method: invalid choice: 'rpsfft'"),
    ([*TRAIN, "--learning_rate", "abc"], "invalid float value: 'abc'"),
    (["w2s", "run"], "anchorft w2s run: error: the following arguments are required: --out"),
    (["toy", "compare", "--seeds", "x", "--out", "o"], "argument --seeds: invalid int value: 'x'"),
    (["data", "openr1-math"], "required: --out"),
]


@pytest.mark.parametrize("argv,expected", ARGPARSE, ids=[" ".join(a)[-40:] for a, _ in ARGPARSE])
def test_argparse_errors_are_one_line(argv, expected, files, monkeypatch, capsys, no_model_loads):
    monkeypatch.chdir(files)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert err[0].endswith("--help` lists the options)"), err
    assert not (files / "o").exists() and not (files / "runs").exists()


@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE", "no route"])
@pytest.mark.parametrize("dataset", ["openr1-math", "dapo-math"])
def test_hub_data_without_network_fails_at_once(dataset, offline, files, monkeypatch, capsys):
    """No retries (one line, exit 2, no connection tried), naming --source, the offline alternative."""
    import socket

    import huggingface_hub.constants

    import anchorft.preflight as pf

    monkeypatch.chdir(files)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(files / "hub"))  # nothing cached
    monkeypatch.setenv("HF_DATASETS_CACHE", str(files / "datasets"))
    if offline == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(pf, "hub_reachable", lambda timeout=3.0: pytest.fail("the network was tried offline"))
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(pf, "hub_reachable", lambda timeout=3.0: False)
    # no retries: nothing may open a connection (what would make it slow), not a wall-clock bound
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, lambda *a, **k: pytest.fail("a network connection was tried"))
    assert main(["data", dataset, "--out", "o"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--source PATH" in err and "not in the local cache" in err, err
    assert ("HF_HUB_OFFLINE" in err) == (offline == "HF_HUB_OFFLINE"), err
    assert not (files / "o").exists()


def test_hub_data_in_the_cache_is_read_offline(files, monkeypatch):
    """No route to the hub but the set is cached: the hub libraries are switched to their caches (no retries)."""
    import anchorft.preflight as pf

    monkeypatch.setattr(pf, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(pf, "_dataset_cached", lambda name: name == "org/cached")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for module in ("huggingface_hub.constants", "datasets.config"):  # put back after the test
        if module in sys.modules:
            monkeypatch.setattr(sys.modules[module], "HF_HUB_OFFLINE", sys.modules[module].HF_HUB_OFFLINE)
    pf.check_hub_dataset("org/cached")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ValueError, match="org/other is a hub dataset, not in the local cache"):
        pf.check_hub_dataset("org/other")


def test_out_not_writable(files, monkeypatch, capsys):
    monkeypatch.chdir(files)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p).name == "ro" else real(p, mode))
    (files / "ro").mkdir()
    assert main(["w2s", "run", "--out", "ro/run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--out: ro is not writable"), err


def test_debug_shows_the_traceback(files, monkeypatch, capsys):
    monkeypatch.chdir(files)
    assert main(["toy", "compare", "--preset", "bad.yaml", "--out", "o", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("anchorft toy compare: error:")
    monkeypatch.setenv("ANCHORFT_DEBUG", "1")
    assert main(["w2s", "run", "--preset", "bad.yaml", "--out", "o"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_keyboard_interrupt_exits_130_and_marks_the_run(files, monkeypatch, capsys):
    monkeypatch.chdir(files)
    import anchorft.studies.w2s.experiments as ex

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "run_experiment", stop)
    assert main(["w2s", "run", "--preset", "paper", "--steps", "3", "--out", "w"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert json.loads((files / "w" / "anchorft-run.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["toy", "compare", "--preset", "bad.yaml", "--out", "o"], "bad.yaml:3:1: malformed YAML"),
        (["train", "--model_name_or_path", "model", "--dataset", "bad.jsonl", "--out", "o"], "bad.jsonl:2"),
        (["w2s", "run", "--out", "afile"], "afile exists and is a file"),
    ],
)
def test_console_script_one_line(argv, expected, files):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    env.pop("ANCHORFT_DEBUG", None)
    p = subprocess.run(
        [sys.executable, "-m", "anchorft.cli", *argv], cwd=files, env=env, capture_output=True, text=True, timeout=300
    )
    err = p.stderr.strip()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and expected in err, err


def test_sigint_exits_130_and_marks_the_run_interrupted(tmp_path, children):
    import signal
    import time

    out = tmp_path / "pt"
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "ANCHORFT_CACHE": str(tmp_path / "cache")}
    argv = ["toy", "pretrain", "--preset", "smoke", "--steps", "100000", "--no-cache", "--out", str(out)]
    # a shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT: restore the default
    p = children.start(
        [sys.executable, "-m", "anchorft.cli", *argv],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    err = children.read_stderr(p)
    stepped = re.compile(r"toy pretrain:.*\b[1-9]\d*/100000")
    children.wait_until(p, lambda: stepped.search("".join(err)), 240, lambda: "".join(err))  # the loop runs
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    text = "".join(err)
    assert p.returncode == 130, text[-2000:]
    assert time.monotonic() - t0 < 10
    assert "interrupted" in text.strip().splitlines()[-1] and "Traceback" not in text
    assert json.loads((out / "anchorft-run.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize(
    "argv, want",
    [
        (["train", "--config", "x.yaml", "--learnig_rate", "1e-5"], "--learnig_rate (did you mean --learning_rate?)"),
        (["train", "--max_step", "2"], "--max_step (did you mean --max_steps?)"),  # no prefix matching
        (["rl", "--max_step", "2"], "--max_step (did you mean --max_steps?)"),
        (["w2s", "run", "--out", "o", "--stpes", "3"], "--stpes (did you mean --steps?)"),
        (["toy", "compare", "--out", "o", "--n-seed", "2"], "--n-seed (did you mean --n-seeds?)"),
        (["eval", "--model", "m", "--bench", "b.jsonl", "--out", "o", "--temprature", "1"], "--temprature (did you"),
        (
            ["toy", "pretrain", "--out", "o", "--workers", "2"],
            "--workers (an option of another subcommand) 2",
        ),  # toy compare's, not pretrain's
    ],
)
def test_a_misspelt_flag_is_refused_with_the_closest_flag(argv, want, tmp_path, monkeypatch, capsys):
    """argparse's prefix matching is off (`--max_step 2` is not taken as `--max_steps 2`) and an unknown flag gets
    a did-you-mean, in the project's parsers and in TRL's (train, rl)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.yaml").write_text("method: sft\n")
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and want in err.splitlines()[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]  # nothing written


def test_a_wrong_typed_recipe_value_names_its_file(tmp_path, monkeypatch, capsys):
    """A recipe's `learning_rate: fast` is reported with the file that set it, not as a flag error."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.yaml").write_text("method: sft\nlearning_rate: fast\n")
    (tmp_path / "r.yaml").write_text("preset: base.yaml\nmax_steps: 3\n")
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')  # the recipe's value the one mistake
    (tmp_path / "m").mkdir()
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "m" / name).write_text("{}")
    rc = main(["train", "--config", "r.yaml", "--model_name_or_path", "m", "--dataset", "d.jsonl", "--out", "o"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.endswith("base.yaml: learning_rate: expected float, got 'fast' (str)"), err
    assert len(err.splitlines()) == 1


def test_a_missing_optional_extra_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """A command raises `MissingExtra` (the lm-eval bridge without lm-evaluation-harness): `cli.main` reports it in
    one line naming the extra, exit code 2, as any user error; any other ImportError keeps its traceback."""
    import anchorft.eval.lm_eval_bridge as bridge
    from anchorft.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    monkeypatch.setattr(bridge, "lm_eval_available", lambda: False)
    assert main(["eval", "--model", "model", "--lm-eval", "gsm8k", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'anchorft[lmeval]'" in err[0], err
