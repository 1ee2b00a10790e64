"""docs/guide/fine-tune.md's "Reproducing the paper on GPUs" block, command by command, as typed, on stand-ins.

Each command is read from the guide's page. `accelerate launch ...` is parsed by accelerate's own launch parser (its
config file must exist; the RL launch must ask for 8 processes) and dropped; the rest runs through
`anchorft.cli.main` in a scratch folder, in order, so that each command reads what the one before wrote. What is
changed, and only this: hub ids of the recipes' models become a stand-in model folder, the hub data sets become
a few local rows in their schema (`--source`), the benchmark files are copied from disk (`--from`), training
runs as `--dry-run` (one step on the recipe's stand-in, written to the recipe's own output_dir), and the
evaluation and RL commands get sizes that fit a CPU (first item of each benchmark, one sample of 8 tokens; one
RL step of 2 samples of 8 tokens).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "fine-tune.md"
SECTION = "## Reproducing the paper on GPUs"


def gpu_commands() -> list[list[str]]:
    text = PAGE.read_text()
    sec = text[text.index(SECTION) :]
    start = sec.index("```bash\n") + len("```bash\n")
    block = sec[start : sec.index("```", start)].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.split("#")[0].strip()]


def drop_launcher(cmd: list[str]) -> tuple[list[str], dict | None]:
    """`accelerate launch [opts] -m anchorft.cli ARGS` -> (["anchorft", *ARGS], launch options)."""
    if cmd[:2] != ["accelerate", "launch"]:
        return cmd, None
    from accelerate.commands.launch import launch_command_parser

    ns = launch_command_parser().parse_args(cmd[2:])
    assert ns.module and ns.training_script == "anchorft.cli", cmd
    assert (ROOT / ns.config_file).is_file(), ns.config_file
    return ["anchorft", *ns.training_script_args], {"config_file": ns.config_file, "num_processes": ns.num_processes}


def test_section_parses_and_launches_as_documented():
    cmds = gpu_commands()
    subs = [drop_launcher(c)[0][1] for c in cmds]
    assert subs == ["data", "train", "data", "eval", "data", "rl"], subs
    launches = {drop_launcher(c)[0][1]: drop_launcher(c)[1] for c in cmds if c[0] == "accelerate"}
    assert launches["rl"]["num_processes"] == 8  # the RL stage on the node's 8 GPUs, not one process
    assert launches["train"]["config_file"] == "configs/accelerate/zero2.yaml"


def _release_rows(n: int) -> list[dict]:
    from anchorft.rpsft.stand_in import example_rows

    rows = []
    for r in example_rows(n):
        trace = r["generations"][-1] if r.get("generations") else r["answer"]
        rows.append({"prompt": [{"role": "user", "content": r["problem"]}],
                     "target": [{"role": "assistant", "content": trace}],
                     "reward_model": {"style": "rule", "ground_truth": r["answer"]}})  # fmt: skip
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _stand_in_folder(model_config: Path, out: Path) -> str:
    from anchorft.rpsft.stand_in import build_stand_in, build_stand_in_tokenizer, load_model_config, stand_in_config

    real = load_model_config(model_config)
    tok = build_stand_in_tokenizer(real["model_type"], ["What is 2 + 2? \\boxed{4} Answer: 4"] * 8)
    cfg, _ = stand_in_config(real, vocab_size=len(tok))
    build_stand_in(cfg, tok).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def test_each_command_runs_as_typed(tmp_path, monkeypatch, capsys):
    import os

    import yaml

    from anchorft.cli import main as cli
    from anchorft.rpsft.recipes import load_recipe

    bench = Path(os.environ.get("ANCHORFT_BENCHMARKS", ROOT.parent / "shared" / "benchmarks"))
    if not (bench / "id").is_dir():
        pytest.skip(f"benchmark files not found at {bench} (set ANCHORFT_BENCHMARKS)")
    # hub ids of the recipes' models -> a stand-in folder of the same family
    hub = {}
    for f in sorted((ROOT / "configs" / "rpsft" / "_base" / "models").glob("*.yaml")):
        m = yaml.safe_load(f.read_text())
        hub[m["model_name_or_path"]] = (f.parent / m["_model_config_"]).resolve()
    sources = {
        "openr1-math": _write_jsonl(tmp_path / "release.jsonl", _release_rows(6)),
        "dapo-math": _write_jsonl(tmp_path / "dapo.jsonl", [
            {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "reward_model": {"ground_truth": str(2 * i)}} for i in range(4)]),
    }  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    # `data benchmarks` fills the default evaluation folder from the benchmark files on disk; `eval suite` reads it
    monkeypatch.setenv("ANCHORFT_BENCHMARKS", str(tmp_path / "benchmarks"))
    for cmd in gpu_commands():
        argv, _ = drop_launcher(cmd)
        assert argv[0] == "anchorft", cmd
        args = []
        for tok in argv[1:]:
            name, _, value = tok.rpartition("=")
            if value in hub:  # NAME=HUB_ID or a bare hub id
                folder = _stand_in_folder(hub[value], tmp_path / "hub" / value.replace("/", "--"))
                tok = f"{name}={folder}" if name else folder
            elif tok.startswith("configs/"):
                tok = str(ROOT / tok)
            args.append(tok)
        sub = args[0]
        if sub == "data" and args[1] == "benchmarks":
            args += ["--from", str(bench)]
        elif sub == "data":
            args += ["--source", sources[args[1]]]
        elif sub == "train":
            recipe, _ = load_recipe(args[args.index("--config") + 1])
            args += ["--dry-run", "--dry_run_steps", "1", "--output_dir", recipe["output_dir"]]
        elif sub == "eval":
            args += ["--limit", "1", "--n", "1", "--max_new_tokens", "8", "--no-calibrate", "--backend", "hf"]
        elif sub == "rl":
            args += ["--steps", "1", "--prompts_per_step", "1", "--mini_batch_prompts", "1", "--num_generations", "2",
                     "--micro_batch", "2", "--max_completion_length", "8", "--overlong_cache", "0",
                     "--rl_warmup_steps", "0", "--use_vllm", "false", "--save_model", "false"]  # fmt: skip
        rc = cli(args)
        err = capsys.readouterr().err
        assert rc == 0, f"{' '.join(cmd)} -> {rc}: {err[-2000:]}"
    assert (work / "runs" / "eval" / "q3b" / "table.json").is_file()
    assert (work / "runs" / "rl" / "q3b-rpsft").is_dir()
