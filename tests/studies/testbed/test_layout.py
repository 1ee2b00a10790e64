"""A comparison's folder layout (`anchorft.studies.testbed.layout`): the names the comparison writes are the names
interpolation, the RL stage and `analyze --compare` read back."""

from __future__ import annotations

from anchorft.studies.testbed.layout import first_seed_models, model_dir, model_name, parse_model_name, run_dir


def test_names_round_trip():
    for run in ("sft", "rpsft-k24", "lora-anchor"):
        for seed in (0, 1, 7):
            assert parse_model_name(model_name(run, seed, 0), 0, {run}) == (run, seed)
    assert parse_model_name("base", 0) == ("base", 0)
    # a run whose own name ends in -seedN is that run, not another run's seed
    assert parse_model_name("sft-seed3", 0, {"sft-seed3"}) == ("sft-seed3", 0)
    assert parse_model_name("sft-seed3", 0, {"sft"}) == ("sft", 3)


def test_folders(tmp_path):
    assert model_dir(tmp_path, "sft", 0, 0) == tmp_path / "models" / "sft"
    assert model_dir(tmp_path, "sft", 2, 0) == tmp_path / "models" / "sft-seed2"
    assert run_dir(tmp_path, "sft", 0) == tmp_path / "runs" / "sft-seed0"
    for name in ("base", "sft", "sft-seed1", "l2"):
        (tmp_path / "models" / name).mkdir(parents=True)
    assert list(first_seed_models(tmp_path)) == ["l2", "sft"]
    assert first_seed_models(tmp_path / "none") == {}
