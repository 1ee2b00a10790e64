"""benchmarks/gpu_check.py in its tiny configuration on the CPU: `anchorft train` through the launcher on a stand-in
(every method the GPU check launches, a save and a resume), and the anchor's hand loop on stand-ins of the three
paper models; the tables and the checks they make."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
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
    rc = gc.main(["--tiny", "--device", "cpu", "--only", "anchor", "--steps", "3", "--seq", "16", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert printed.count("| yes |") == 3
    res = json.loads(out.read_text())
    assert [r["model"] for r in res["rows"]] == ["llama-3.1-8b-instruct", "qwen2.5-3b-instruct", "qwen2.5-7b-instruct"]
    for r in res["rows"]:
        assert r["layers"] == 2 and r["penalties"][0] == 0.0 and r["penalties"][-1] > 0  # the CPU: exactly 0
        assert r["drift_first"] <= r["rounding_bound"] < 1e-3
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
    assert (
        gc.main(["--tiny", "--device", "cpu", "--only", "anchor", "--steps", "2", "--seq", "16", "--models", one]) == 1
    )


@pytest.mark.slow
def test_gpu_check_launches_anchorft_train_on_cpu(tmp_path, capsys) -> None:
    """The same path as on a GPU: `accelerate launch ... -m anchorft.cli train` of the recipes, a full fine-tune with
    the anchor (rpsft) and a PEFT method (lora: the adapter in the checkpoint, a plain model at the end), then rpsft
    resumed from its checkpoint to twice the steps; the DeepSpeed / FSDP2 configs are skipped on the CPU with the
    reason printed. Its CPU form: two processes under gloo (`--nproc 2`), as on a node with several GPUs. The
    other methods take the same launch path; each method under each engine: tests/rpsft/test_distributed_matrix.py.
    Slow (three launches): `make test-dist` runs it."""
    gc = _load()
    out = tmp_path / "launch.json"
    argv = ["--tiny", "--device", "cpu", "--nproc", "2", "--only", "launch", "--launch_steps", "2", "--out", str(out),
            "--launch_methods", "rpsft", "lora"]  # fmt: skip
    rc = gc.main(argv)
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert printed.count("-m anchorft.cli train --config") == 3
    assert "zero2: skipped on the CPU" in printed
    rows = json.loads(out.read_text())["launch"]
    assert [r["method"] for r in rows] == ["rpsft", "lora", "rpsft (resume)"]
    assert all(r["ok"] and r["rc"] == 0 and r["processes"] == 2 for r in rows)
    assert all(r["world"] == 2 for r in rows[:2])  # two processes ran (each saved its RNG state), not one
    assert rows[0]["anchor_saved"]
    assert rows[1]["adapter_saved"] and rows[1]["plain_model"]  # merged on one process, plain keys
    assert rows[2]["global_step"] == 4 and rows[2]["resumed"]
    assert rows[2]["penalty_rel_err"] <= 1e-4  # the 2 processes' penalty on the checkpoint equals one process's
    assert rows[0]["estimate_bytes"] > 0
