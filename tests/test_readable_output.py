"""What a person reads: labelled axes in the report's units, one label per place in tradeoff.png, short summaries."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest


@pytest.fixture
def figures(monkeypatch):
    """Capture the figures instead of writing them: {file name: figure}."""
    import anchorft.analysis.plots as aplots
    import anchorft.io as io
    import anchorft.rpsft.train as rtrain
    import anchorft.studies.testbed.report as report

    got = {}

    def keep(fig, path, *a, **k):
        got[Path(path).name] = fig
        return str(path)

    for mod in (io, aplots, rtrain, report):
        monkeypatch.setattr(mod, "save_figure", keep)
    yield got
    import matplotlib.pyplot as plt

    plt.close("all")


def _seed(idg: float, ood: float) -> dict:
    return {"id_greedy": idg, "ood_mean": ood}


def test_tradeoff_labels_of_coinciding_points_are_merged(figures, tmp_path):
    from anchorft.studies.testbed.report import write_tradeoff_plot

    base = {"id_greedy": 0.2, "ood_mean": 0.5}
    methods = {
        "sft": {"method": "sft", "per_seed": [_seed(0.4, 0.3)]},
        "dft": {"method": "dft", "per_seed": [_seed(0.4, 0.3)]},  # the same point as sft
        "l2": {"method": "l2", "per_seed": [_seed(0.3, 0.45)]},
    }
    write_tradeoff_plot({"base": base, "methods": methods}, tmp_path / "tradeoff.png")
    ax = figures["tradeoff.png"].axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["base", "l2", "sft, dft"]
    assert ax.get_xlabel() and ax.get_ylabel()


def test_rank_sensitivity_in_percent_with_labelled_axes(figures, tmp_path):
    from anchorft.analysis.plots import rank_plot

    rs = {
        "full_rank": 8,
        "points": [{"method": "sft", "k": 0, "id_greedy": 0.5, "ood_mean": 0.25}, {"method": "l2", "k": 8,
                   "id_greedy": 0.4, "ood_mean": 0.5}],
        "references": {},
        "base": {"id_greedy": 0.1, "ood_mean": 0.6},
    }  # fmt: skip
    rank_plot(rs, tmp_path / "rank_sensitivity.png")
    axes = figures["rank_sensitivity.png"].axes
    assert all(ax.get_ylabel() == "accuracy (%)" and ax.get_xlabel() for ax in axes)
    assert list(axes[1].lines[0].get_ydata()) == [25.0, 50.0]  # the report's %, not fractions


def test_training_png_labels_and_drift_in_percent(figures, tmp_path):
    from anchorft.rpsft.train import _write_run_artifacts

    hist = [{"step": s, "loss": 2.0 / s, "anchor/penalty": 0.1 * s, "anchor/drift_max": 0.01 * s} for s in (1, 2)]
    trainer = SimpleNamespace(
        args=SimpleNamespace(
            method="rpsft",
            to_dict=lambda: {"method": "rpsft"},
            method_spec=SimpleNamespace(full_rank=False, peft=None),
            anchored=True,
            anchor_rank=24,
            anchor_lambda=0.1,
            learning_rate=1e-3,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            world_size=1,
        ),
        state=SimpleNamespace(log_history=hist, global_step=2),
        _anchor=None,
    )
    _write_run_artifacts(trainer, str(tmp_path), None)
    axes = figures["training.png"].axes
    assert all(ax.get_ylabel() and ax.get_xlabel() == "optimiser step" for ax in axes)
    drift = next(ax for ax in axes if ax.get_title() == "anchor/drift_max")
    assert "%" in drift.get_ylabel() and list(drift.lines[0].get_ydata()) == pytest.approx([1.0, 2.0])


def test_pretrain_loss_plot(figures, tmp_path):
    from anchorft.toy.pretrain import write_loss_plot

    write_loss_plot([3.0 - 0.01 * i for i in range(120)], tmp_path / "loss.png")
    ax = figures["loss.png"].axes[0]
    assert ax.get_xlabel() == "pretraining step" and "loss" in ax.get_ylabel()
    assert len(ax.lines) == 2  # per step and the running mean


def test_analyze_summary_is_short():
    from anchorft.studies.testbed.analysis import analysis_summary as summary_lines

    overall = {"angle_u_mean_deg": 1.0, "angle_v_mean_deg": 3.0, "angle_u_max_deg": 5.0, "angle_v_max_deg": 4.0,
               "weight_rel_change": 0.012, "block_share_of_update": 0.5}  # fmt: skip
    res = {"rank": 4, "rotation": {"sft": {"overall": overall}, "rpsft-k2": {"overall": overall}}, "figures": ["a"]}
    lines = summary_lines(res, Path("out"))
    assert len(lines) == 5
    assert "turned  2.00 deg (max 5.00), weights changed 1.20 %, 50 % of the update" in lines[1]


def test_short_line_per_log_and_full_dicts_in_the_log_file(tmp_path, capsys):
    import json

    from transformers.trainer_callback import TrainerControl, TrainerState

    from anchorft.rpsft.progress import LOG_FILE, ReadableProgress, short_line

    logs = {"loss": 1.23456, "grad_norm": 0.5, "learning_rate": 2e-5, "epoch": 0.5, "anchor/penalty": 0.001234}
    assert (
        short_line("[r]", 10, 100, logs) == "[r] step 10/100  loss 1.23  lr 2.00e-05  grad_norm 0.5  penalty 0.00123"
    )
    args = SimpleNamespace(output_dir=str(tmp_path / "run-a"), run_name=None, disable_tqdm=True)
    state = TrainerState(global_step=10, max_steps=100)
    cb = ReadableProgress()
    cb.on_train_begin(args, state, TrainerControl())
    cb.on_step_end(args, state, TrainerControl())  # no bar: nothing to update, no error
    cb.on_log(args, state, TrainerControl(), logs=dict(logs))
    assert capsys.readouterr().out.strip() == "[run-a] " + short_line("", 10, 100, logs).strip()
    rows = [json.loads(line) for line in (tmp_path / "run-a" / LOG_FILE).read_text().splitlines()]
    assert rows == [{"step": 10, "attempt": 1, "resumed_from": 10, **logs}]  # every key, numbers as numbers


def test_toy_pretrain_writes_its_loss_plot_and_says_when_it_reuses_the_cache(tmp_path, monkeypatch, capsys):
    from anchorft.cli import main

    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path / "cache"))
    argv = ["toy", "pretrain", "--preset", "smoke", "--steps", "3", "--threads", "1"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    first = capsys.readouterr().out
    assert "pretraining 3 steps" in first and "reusing" not in first
    assert (tmp_path / "a" / "loss.png").stat().st_size > 1000
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    second = capsys.readouterr().out
    assert "reusing the cached model" in second and (tmp_path / "b" / "loss.png").is_file()


@pytest.mark.parametrize("command", ["train", "rl"])
def test_train_and_rl_say_what_they_load_before_loading(command, tmp_path, monkeypatch, capsys):
    """The first line comes before the model is loaded (minutes for a large one): loading is stopped here."""
    import anchorft.rpsft.rl
    import anchorft.rpsft.train
    from anchorft.cli import main

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):  # enough for the checks; never loaded here
        (model / name).write_text("{}")
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "What is 1 + 1?", "completion": "2", "answer": "2"}\n')

    def stop(*args, **kwargs):
        raise ValueError("stopped where the model would load")

    monkeypatch.setattr(anchorft.rpsft.train, "train", stop)
    monkeypatch.setattr(anchorft.rpsft.rl, "load_rl_dataset", stop)
    if command == "train":
        argv = ["train", "--model_name_or_path", str(model), "--dataset", str(data), "--out", str(tmp_path / "o")]
    else:
        argv = ["rl", "--model", str(model), "--dataset", str(data), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith(f"anchorft {command}: ") and str(model) in out.splitlines()[0], out
    assert "stopped where the model would load" in err
