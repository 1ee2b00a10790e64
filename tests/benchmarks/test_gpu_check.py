"""benchmarks/gpu_check.py in its tiny configuration on the CPU: stand-ins of the three paper models, the anchor,
a few bf16 steps with the closed-form penalty gradient, one table, and the checks it makes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_tiny_on_cpu(tmp_path, capsys) -> None:
    gc = _load()
    out = tmp_path / "check.json"
    rc = gc.main(["--tiny", "--device", "cpu", "--steps", "3", "--seq", "16", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert printed.count("| yes |") == 3
    res = json.loads(out.read_text())
    assert [r["model"] for r in res["rows"]] == ["llama-3.1-8b-instruct", "qwen2.5-3b-instruct", "qwen2.5-7b-instruct"]
    for r in res["rows"]:
        assert r["layers"] == 2 and r["penalties"][0] == 0.0 and r["penalties"][-1] > 0
        assert 0 < r["penalty_share"] < 1 and r["bases_on_weights_device"]
    # the stand-ins keep the real widths unless tiny
    real = gc.stand_in(ROOT / "configs" / "models" / "llama-3.1-8b-instruct.json", layers=2, tiny=False)
    assert (real.hidden_size, real.intermediate_size, real.vocab_size, real.num_hidden_layers) == (
        4096,
        14336,
        128256,
        2,
    )


def test_gpu_check_fails_when_the_anchor_is_built_from_other_weights(monkeypatch) -> None:
    """An anchor built from weights other than those the loop trains (here scaled by 1.01) starts with a penalty
    > 0: the check reports NO and exits 1."""
    import copy

    gc = _load()
    original = gc.SubspaceAnchor.from_model

    def from_other_weights(model, **kw):
        other = copy.deepcopy(model)
        with torch.no_grad():
            for p in other.parameters():
                p.mul_(1.01)
        return original(other, **kw)

    monkeypatch.setattr(gc.SubspaceAnchor, "from_model", staticmethod(from_other_weights))
    one = str(ROOT / "configs" / "models" / "qwen2.5-3b-instruct.json")
    assert gc.main(["--tiny", "--device", "cpu", "--steps", "2", "--seq", "16", "--models", one]) == 1
