"""Fault injection per loop, in process: a SIGTERM whose raise was swallowed inside the loop (library code with a
bare `except:`) leaves only the record (`anchorft.stop.record`); the loop must stop with `Terminated` within one
step. Each test wraps a function the loop calls once a step so that its k-th call records the signal, and counts
the calls: a loop without its safe point would run to its end (tests/test_stop_loops.py finds every such loop)."""

from __future__ import annotations

import signal

import numpy as np
import pytest
import torch

from anchorft import stop


@pytest.fixture(autouse=True)
def _fresh():
    stop.clear()
    yield
    stop.clear()


@pytest.fixture
def tiny():
    from anchorft.w2s.config import W2SConfig

    return W2SConfig(d=48, s=8, group_sizes=[4, 6], weak_neurons=4, batch_size=8, steps=60, n_seeds=2, n_log=8,
                     chunk=8, eta_w2s=0.3, eta_sft=1.0, anchor_rank=4).validate()  # fmt: skip


def swallowed_at(monkeypatch, owner, name: str, k: int) -> list[int]:
    """Wrap `owner.name` so that its k-th call records SIGTERM (as a swallowed raise leaves it); the calls so far."""
    real, calls = getattr(owner, name), []

    def wrapped(*a, **kw):
        calls.append(1)
        if len(calls) == k:
            stop.record(signal.SIGTERM)
        return real(*a, **kw)

    monkeypatch.setattr(owner, name, wrapped)
    return calls


def test_toy_pretraining_stops_within_a_step(monkeypatch, tmp_path):
    from anchorft.toy import pretrain as pt

    calls = swallowed_at(monkeypatch, pt, "_batch", 3)
    cfg = pt.PretrainConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, steps=200, threads=1)
    with pytest.raises(stop.Terminated):
        pt.pretrain(cfg, tmp_path / "m", progress=False)
    assert len(calls) == 3  # the step that drew batch 3 ran; the next one did not start
    assert not (tmp_path / "m" / "model.safetensors").exists()


@pytest.mark.parametrize("mode", ["w2s", "sft"])  # the reduced (generative inputs) and the dense path
def test_the_w2s_simulation_stops_within_a_step(monkeypatch, tiny, mode):
    from anchorft.w2s import dynamics
    from anchorft.w2s.config import apply_overrides
    from anchorft.w2s.problem import build_problem

    cfg = apply_overrides(tiny, {"steps": 400})
    calls = swallowed_at(monkeypatch, dynamics, "schedule_factor", 5)  # once at the start, then once a step
    with pytest.raises(stop.Terminated):
        dynamics.train(cfg, build_problem(cfg), mode, progress=False)
    assert len(calls) == 5


def test_the_weak_model_training_stops_within_a_step(monkeypatch, tiny):
    from anchorft.w2s import dynamics
    from anchorft.w2s.config import apply_overrides
    from anchorft.w2s.problem import build_problem

    cfg = apply_overrides(tiny, {"weak": "scratch", "weak_space": "ambient", "weak_steps": 400})
    calls = swallowed_at(monkeypatch, dynamics, "dense_step", 4)
    with pytest.raises(stop.Terminated):
        dynamics.train_weak(cfg, build_problem(cfg), progress=False)
    assert len(calls) == 4


def test_the_mean_field_ode_stops_at_its_next_right_hand_side(monkeypatch):
    from anchorft.w2s import meanfield as mf
    from anchorft.w2s.config import load_config
    from anchorft.w2s.problem import build_problem

    cfg = load_config(None, ["d=24", "s=8", "group_sizes=3,2", "n_seeds=1", "batch_size=4"]).validate()
    pb = build_problem(cfg)
    st = mf.initial_state(cfg, pb, "sft", 0)
    lab = mf.LabelModel(coef=np.array([0, 0, 0, 0, 1.0]), second_moment=1.0)
    calls = swallowed_at(monkeypatch, mf._RHS, "unpack", 3)  # once in each right-hand side
    with pytest.raises(stop.Terminated):
        mf.solve_order_parameters(cfg, "sft", st, lab, [10, 1000, 100000], n_mc=64)
    assert len(calls) == 3


def test_the_label_mean_stops_within_a_block(monkeypatch, tiny):
    from anchorft.w2s import labels
    from anchorft.w2s.config import apply_overrides
    from anchorft.w2s.problem import build_problem

    cfg = apply_overrides(tiny, {"center_samples": 8192 * 4})
    calls = swallowed_at(monkeypatch, labels, "generative_inputs", 1)
    with pytest.raises(stop.Terminated):
        labels.label_mean(cfg, build_problem(cfg))
    assert len(calls) == 1


def _tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)  # fmt: skip
    return LlamaForCausalLM(cfg)


def _batches(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(2, 40, (1, 6), generator=g) for _ in range(n)]
    return [{"input_ids": x, "labels": x.clone()} for x in ids]


def test_the_fisher_gradient_product_stops_within_an_example(monkeypatch):
    from anchorft.rpsft import calibration

    model = _tiny_lm()
    names = ["model.layers.0.mlp.up_proj.weight"]
    calls = swallowed_at(monkeypatch, calibration, "example_grads", 2)
    with pytest.raises(stop.Terminated):
        calibration.fisher_gradient_product(model, _batches(5), _batches(5), names, progress=False)
    assert len(calls) == 2


def test_the_fisher_overlap_analysis_stops_within_an_example(monkeypatch):
    from anchorft.analysis import fisher

    model = _tiny_lm()
    names = ["model.layers.0.mlp.up_proj.weight"]
    calls = swallowed_at(monkeypatch, fisher, "example_grads", 2)
    with pytest.raises(stop.Terminated):
        fisher.fisher_overlap(model, _batches(6), names, [2, 4], progress=False)
    assert len(calls) == 2


def test_the_hidden_state_drift_stops_within_a_batch(monkeypatch):
    from anchorft.analysis import drift

    calls = []

    def encode(tokenizer, items, max_length, with_completion):
        calls.append(1)
        if len(calls) == 2:
            stop.record(signal.SIGTERM)
        ids = torch.full((len(items), 5), 3)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    monkeypatch.setattr(drift, "encode_batch", encode)
    with pytest.raises(stop.Terminated):
        drift.prompt_hidden_means(_tiny_lm(), None, list(range(40)), batch_size=4)
    assert len(calls) == 2


def test_an_in_process_study_stops_before_its_next_cell(tmp_path):
    from anchorft.studies.grid import Cell, Grid, InProcess

    ran = []

    def cell_fn(cell):
        ran.append(cell.name)
        if len(ran) == 2:
            stop.record(signal.SIGTERM)  # swallowed inside the cell
        return {"x": cell.spec["x"]}

    grid = Grid(tmp_path)
    cells = [Cell(f"c{i}", {"x": i}) for i in range(6)]
    with pytest.raises(stop.Terminated):
        grid.run(cells, cell_fn, InProcess(), progress=False)
    assert ran == ["c0", "c1"] and len(grid.finished()) == 2  # both finished cells recorded, no third started
