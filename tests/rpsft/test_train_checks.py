"""`anchorft train` refuses bad input in one line (exit 2) before any weight is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anchorft.cli import command
from anchorft.rpsft.config import RPSFTConfig, accumulation_for

train_main = command("train")  # the command as `anchorft train` runs it

ROOT = Path(__file__).resolve().parents[2]
LEAF = ROOT / "configs" / "rpsft" / "qwen2.5-3b-instruct" / "rpsft.yaml"


@pytest.fixture
def no_loading(monkeypatch):
    """Any attempt to load weights fails the test."""
    import transformers

    def refuse(*a, **k):
        raise AssertionError("weights were loaded before the input was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def _one_error_line(capsys) -> str:
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("anchorft train")]
    assert len(lines) == 1, lines
    return lines[0]


def _valid_inputs(folder: Path) -> tuple[str, str]:
    """A model folder (config and weights files) and a data file that pass the input checks (nothing loads them)."""
    (folder / "m").mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / "m" / name).write_text("{}")
    (folder / "d.jsonl").write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    return str(folder / "m"), str(folder / "d.jsonl")


def test_accumulation_keeps_the_effective_batch() -> None:
    # written out: 16 sequences at 2 per device
    assert [accumulation_for(16, 2, g) for g in (1, 2, 4, 8)] == [8, 4, 2, 1]
    for g in (3, 5, 6, 7, 16):
        with pytest.raises(ValueError, match="cannot be reached"):
            accumulation_for(16, 2, g)


def test_unreachable_effective_batch(tmp_path, monkeypatch, capsys, no_loading) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    model, data = _valid_inputs(tmp_path)  # the batch the one mistake
    argv = ["--model_name_or_path", model, "--dataset", data, "--output_dir", str(tmp_path / "o")]
    rc = train_main(["--config", str(LEAF), *argv])
    assert rc == 2 and "effective_batch_size 16 cannot be reached" in _one_error_line(capsys)
    monkeypatch.setenv("WORLD_SIZE", "1")
    args = RPSFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, effective_batch_size=16)
    assert args.gradient_accumulation_steps == 8
    with pytest.raises(ValueError, match="contradicts effective_batch_size 16"):
        RPSFTConfig(
            output_dir=str(tmp_path),
            per_device_train_batch_size=2,
            effective_batch_size=16,
            gradient_accumulation_steps=2,
        )
    rc = train_main(
        [
            "--config",
            str(LEAF),
            "--dry-run",
            "--no-data-check",
            "--output_dir",
            str(tmp_path / "d"),
            "--effective_batch_size",
            "5",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "cannot be reached" in err and not (tmp_path / "d" / "dry_run.json").exists()


def test_model_folder_without_weights(rp, tmp_path, capsys, no_loading) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(rp.tiny_config("llama", 300).to_dict()))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    argv = ["--model_name_or_path", str(folder), "--dataset", str(data), "--output_dir", str(tmp_path / "o")]
    assert train_main([*argv, "--method", "sft"]) == 2
    assert "holds no weights (config.json only" in _one_error_line(capsys)


def test_data_file_of_another_schema(rp, tokenizer_dir, tmp_path, capsys, no_loading) -> None:
    raw = tmp_path / "raw.jsonl"  # the release's set before conversion: prompt + target, no completion
    raw.write_text(json.dumps({"prompt": [{"role": "user", "content": "q"}], "target": [{"content": "t"}]}) + "\n")
    argv = ["--model_name_or_path", tokenizer_dir, "--dataset", str(raw), "--output_dir", str(tmp_path / "o")]
    assert train_main([*argv, "--method", "sft"]) == 2
    line = _one_error_line(capsys)
    assert "'prompt' and 'completion', or 'messages'" in line and "anchorft data openr1-math" in line


def test_anchor_under_fsdp1_refused_before_loading(rp, tmp_path, monkeypatch, capsys, no_loading) -> None:
    """`accelerate launch` with an FSDP1 config exports ACCELERATE_USE_FSDP / FSDP_VERSION=1: an anchored method
    (rpsft, l2) is refused in one line before any weight is loaded; FSDP2 and unanchored methods pass the check."""
    from anchorft.rpsft.dapo_config import DAPOConfig
    from anchorft.rpsft.rl import run_rl
    from anchorft.rpsft.train import check_launch

    _, data = _valid_inputs(tmp_path)  # the launch the one mistake
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    argv = ["--model_name_or_path", str(tmp_path / "m"), "--dataset", str(data), "--output_dir", str(tmp_path / "o")]
    assert train_main([*argv, "--method", "l2"]) == 2
    assert "needs FSDP2" in _one_error_line(capsys)
    with pytest.raises(ValueError, match="needs FSDP2"):
        run_rl(str(tmp_path / "m"), [{"prompt": "a", "answer": "1"}], tmp_path / "rl", DAPOConfig(anchor_method="l2"))
    check_launch(RPSFTConfig(output_dir=str(tmp_path), method="sft"), False, "sft")
    monkeypatch.setenv("FSDP_VERSION", "2")
    check_launch(RPSFTConfig(output_dir=str(tmp_path), method="rpsft"), True, "rpsft")


@pytest.mark.parametrize(
    "field_name, bad",
    [("anchor_svd", "lanczos"), ("anchor_dtype", "int8"), ("anchor_mode", "hook"), ("chat_format", "chatml")],
)
def test_rpsft_config_refuses_a_value_outside_its_choices_in_python_and_on_the_command_line(field_name, bad, tmp_path):
    from transformers import HfArgumentParser

    from anchorft.rpsft.config import RPSFTConfig

    with pytest.raises(ValueError, match=rf"^{field_name} must be one of .*got '{bad}'$"):
        RPSFTConfig(output_dir=str(tmp_path), **{field_name: bad})
    with pytest.raises(SystemExit):  # the parser offers the same choices
        HfArgumentParser(RPSFTConfig).parse_args_into_dataclasses(
            ["--output_dir", str(tmp_path), f"--{field_name}", bad]
        )


def test_dapo_config_refuses_a_master_dtype_or_anchor_method_outside_its_choices():
    from anchorft.rpsft.dapo_config import DAPOConfig

    with pytest.raises(ValueError, match=r"^master_dtype must be one of \['fp32', 'bf16'\], got 'fp16'$"):
        DAPOConfig(master_dtype="fp16")
    with pytest.raises(ValueError, match=r"^anchor_method must be one of \['none', 'l2', 'rpsft'\], got 'sft'$"):
        DAPOConfig(anchor_method="sft")
