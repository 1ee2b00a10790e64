from __future__ import annotations

from anchorft.demo import _announce_toy


def test_demo_announces_the_comparison_and_a_missing_pretraining(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path))
    _announce_toy("demo")
    out = capsys.readouterr().out
    assert "14 fine-tunes (7 runs x 2 seeds)" in out and "pretrained" in out and str(tmp_path) in out
    _announce_toy("smoke")
    out = capsys.readouterr().out
    assert "(6 runs x 1 seed)" in out and "pretrained" in out  # its tiny model is not cached either


def test_demo_says_nothing_of_pretraining_when_cached(tmp_path, monkeypatch, capsys):
    from anchorft.studies.testbed.compare_config import load_config

    monkeypatch.setenv("ANCHORFT_CACHE", str(tmp_path))
    model_dir = tmp_path / "toy" / load_config("demo").pretrain.key()
    model_dir.mkdir(parents=True)
    (model_dir / "model.safetensors").write_bytes(b"")
    _announce_toy("demo")
    assert "pretrained" in capsys.readouterr().out  # no metrics.json: pretrained_model would pretrain again
    (model_dir / "metrics.json").write_text("{}")
    _announce_toy("demo")
    assert "pretrained" not in capsys.readouterr().out
