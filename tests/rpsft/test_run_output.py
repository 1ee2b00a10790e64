"""What a training run shows and leaves: no transformers bar for a model's weights loaded or saved (they interleave
with the run's own progress), the end-of-run line naming every artifact (checkpoints and the TensorBoard folder
included), and training.png's title naming the method and its key settings."""

from __future__ import annotations

import types

from anchorft.cli import command
from anchorft.eval.loading import MODEL_BARS, from_pretrained_strict, quiet_model_bars
from anchorft.rpsft.config import RPSFTConfig
from anchorft.rpsft.train import run_artifacts, run_settings, run_title


def test_no_bar_for_a_models_weights_inside_the_block(model_dir, tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    model = from_pretrained_strict(model_dir)  # a load: quiet
    with quiet_model_bars():
        model.save_pretrained(tmp_path / "inside")
    err = capfd.readouterr().err
    assert not any(bar in err for bar in MODEL_BARS), err
    assert hf_logging.set_tqdm_hook(None) is None  # the hook is taken back on exit
    model.save_pretrained(tmp_path / "outside")  # outside the block, transformers' bar is back
    assert "Writing model shards" in capfd.readouterr().err


def test_the_end_of_a_run_names_every_artifact(model_dir, jsonl, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--model_name_or_path", model_dir, "--dataset", jsonl, "--out", str(out), "--method", "rpsft",
            "--anchor_rank", "4", "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
            "--per_device_train_batch_size", "2", "--max_length", "32", "--report_to", "none",
            "--disable_tqdm", "true", "--logging_steps", "1"]  # fmt: skip
    assert command("train")(argv) == 0, capsys.readouterr().err
    done = capsys.readouterr().out.strip().splitlines()[-1]
    assert done == (
        f"done: 2 steps; in {out}: model.safetensors (with config.json and the tokenizer); rpsft_config.json; "
        "metrics.json; training.png; checkpoints checkpoint-1, checkpoint-2"
    ), done


def test_the_tensorboard_folder_is_named_where_it_was_written(tmp_path):
    logs = tmp_path / "runs" / "Dec05_host"
    logs.mkdir(parents=True)
    (tmp_path / "metrics.json").write_text("{}")
    TensorBoardCallback = type("TensorBoardCallback", (), {"logging_dir": str(logs)})  # noqa: N806 - transformers'
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(output_dir=str(tmp_path)),
        callback_handler=types.SimpleNamespace(callbacks=[object(), TensorBoardCallback()]),
    )
    assert run_artifacts(trainer) == f"metrics.json; TensorBoard logs in {logs} (tensorboard --logdir {logs})"


def test_the_plot_title_names_the_method_and_its_settings(tmp_path):
    args = RPSFTConfig(output_dir=str(tmp_path), method="rpsft", anchor_rank=8, anchor_lambda=0.5,
                       learning_rate=1e-4, per_device_train_batch_size=2, gradient_accumulation_steps=4)  # fmt: skip
    settings = run_settings(args, 30)
    assert settings == "anchor_rank=8, anchor_lambda=0.5, lr=0.0001, batch 8, 30 steps"
    assert run_title("rpsft", False, None, settings) == f"method=rpsft, {settings}"
    sft = RPSFTConfig(output_dir=str(tmp_path), method="sft", learning_rate=2e-5)
    assert run_settings(sft, 3).startswith("lr=2e-05, batch ")
