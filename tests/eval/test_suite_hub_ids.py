"""`eval suite --models NAME=HUB_ID_OR_DIR`: a hub id resolves to its snapshot in the hub cache; offline and not
cached, one line naming the id and HF_HUB_OFFLINE, exit 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_offline_hub_id_is_one_line_exit_2(tmp_path):
    bench = tmp_path / "bench"
    (bench / "id").mkdir(parents=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT / "src")}
    env.pop("HF_HUB_CACHE", None)
    cmd = [sys.executable, "-m", "anchorft.cli", "eval", "suite", "--models", "base=Qwen/Qwen2.5-3B-Instruct",
           "--bench-dir", str(bench), "--out", str(tmp_path / "out")]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Qwen/Qwen2.5-3B-Instruct" in lines[0] and "HF_HUB_OFFLINE" in lines[0]
    assert "no such folder" not in lines[0]


def test_cached_hub_id_resolves_to_its_snapshot(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc
    from transformers import Qwen2Config

    from anchorft.eval.protocol import check_models
    from anchorft.rpsft.stand_in import build_stand_in, build_stand_in_tokenizer

    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--org--tiny"
    snap = repo / "snapshots" / commit
    tok = build_stand_in_tokenizer("qwen2", ["hello world"] * 4)
    cfg = Qwen2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=len(tok))  # fmt: skip
    build_stand_in(cfg, tok).save_pretrained(snap)
    tok.save_pretrained(snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got = check_models({"base": "org/tiny", "local": str(snap)})
    assert Path(got["base"]).resolve() == snap.resolve() and Path(got["local"]) == snap
    with pytest.raises(ValueError, match="org/absent.*HF_HUB_OFFLINE"):
        check_models({"base": "org/absent"})
