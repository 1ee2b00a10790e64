"""`method_memory` per stage (ddp, zero2, zero3, fsdp2) against hand arithmetic for one stated model, and the
command's output: one per-GPU total."""

from pathlib import Path

import pytest

from anchorft.rpsft.estimate import method_memory, parameter_count

# A Llama-style model small enough to count by hand: h 64, f 128, 2 layers, 4 heads of 16 (2 key/value heads),
# vocabulary 256, untied. Per layer: q 64x64 = 4096, k 32x64 = 2048, v 2048, o 4096, gate 128x64 = 8192, up 8192,
# down 64x128 = 8192: 36,864; two layers 73,728; embed_tokens and lm_head 256x64 = 16,384 each: matrices 106,496.
# RMSNorm weights: 2 x 64 a layer + 64 final = 320. P = 106,816.
CFG = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=16, vocab_size=256, tie_word_embeddings=False)  # fmt: skip
P, MATRICES, G = 106_816, 106_496, 4
# rpsft at k = 32: k_proj and v_proj (32 x 64, min 32 <= k) fall back to W0: 2 x 2 x 2048 = 8,192 numbers; the
# rest keep (m + n) k + k^2: q, o (64 + 64) 32 + 1024 = 5,120 each, gate, up, down (192) 32 + 1024 = 7,168 each:
# 31,744 a layer, 63,488 for two; embed_tokens, lm_head (256 + 64) 32 + 1024 = 11,264 each: 86,016 numbers.
RPSFT_SVD, RPSFT_W0, LARGEST = 86_016, 8_192, 16_384  # LARGEST: the 256 x 64 embedding, the largest matrix

# bytes per GPU, G = 4 GPUs, fp32 weights under ddp / fsdp2 (4 bytes), bf16 + fp32 master under ZeRO, fp32 anchor,
# bf16 reference (2 bytes a parameter)
STATES = {  # (parameters, gradients, optimizer_state)
    "ddp": (4 * P, 4 * P, 8 * P),  # everything on every GPU
    "zero2": (2 * P, 2 * P / G, 12 * P / G),  # bf16 weights whole; bf16 grads, fp32 master + 2 moments partitioned
    "zero3": (2 * P / G, 2 * P / G, 12 * P / G),  # all partitioned
    "fsdp2": (4 * P / G, 4 * P / G, 8 * P / G),  # all sharded
}
REFERENCE = {"ddp": 2 * P, "zero2": 2 * P, "zero3": 2 * P / G, "fsdp2": 2 * P / G}  # IW-SFT's bf16 frozen copy
SHARDS = {"ddp": 1, "zero2": 1, "zero3": G, "fsdp2": G}  # W_0 held like the weights: whole, or 1 / G on each GPU
TRANSIENT = {  # one fp32 matrix (D or a product), + the bf16 weight gathered under ZeRO-3; its rows under FSDP2
    "ddp": 4 * LARGEST, "zero2": 4 * LARGEST, "zero3": 4 * LARGEST + 2 * LARGEST, "fsdp2": 4 * LARGEST / G,
}  # fmt: skip


def _rows(stage, method):
    return method_memory(CFG, method, rank=32, stage=stage, gpus=G, weight_bytes=4, anchor_bytes=4,
                         reference_bytes=2)  # fmt: skip


def test_parameter_count_by_hand():
    assert parameter_count(CFG) == P


@pytest.mark.parametrize("stage", ["ddp", "zero2", "zero3", "fsdp2"])
def test_rows_by_hand(stage):
    states = STATES[stage]
    for method in ("sft", "iw_sft", "l2", "rpsft"):
        r = _rows(stage, method)
        assert (r["parameters"], r["gradients"], r["optimizer_state"]) == pytest.approx(states), (stage, method)
        want = {
            "iw_reference": REFERENCE[stage] if method == "iw_sft" else 0,
            "l2_w0": 4 * (MATRICES if method == "l2" else RPSFT_W0 if method == "rpsft" else 0) / SHARDS[stage],
            "anchor_buffers": 4 * RPSFT_SVD if method == "rpsft" else 0,
            "anchor_transient": TRANSIENT[stage] if method in ("l2", "rpsft") else 0,
        }
        for key, value in want.items():
            assert r[key] == pytest.approx(value), (stage, method, key)
        parts = sum(states) + sum(want.values()) + r["activations"]
        assert r["total"] == pytest.approx(parts), (stage, method)


def test_command_prints_one_total_per_gpu(capsys):
    """`--estimate` prints the table's total and no second, differently counted one; the IW-SFT reference of
    Llama-3.1-8B (2 bytes x P) divided over 8 GPUs under ZeRO-3."""

    from anchorft.cli import command

    main = command("train")
    from anchorft.rpsft.estimate import read_model_config

    path = Path(__file__).resolve().parents[2] / "configs/models/llama-3.1-8b-instruct.json"
    assert main(["--estimate", "--model_config", str(path), "--stage", "zero3", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    totals = [ln for ln in out.splitlines() if ln.strip().startswith("total") or "; total" in ln]
    assert len(totals) == 1 and "memory per GPU" not in out, totals
    rows = {ln.split(" (")[0].strip(): ln.split(")")[-1].split() for ln in out.splitlines() if " (GB)" in ln}
    methods = out.split("component")[1].splitlines()[0].split()
    p = parameter_count(read_model_config(path))
    assert float(rows["iw_reference"][methods.index("iw_sft")]) == pytest.approx(2 * p / 8 / 1e9, abs=0.006)
    assert float(rows["total"][methods.index("iw_sft")]) - float(rows["total"][methods.index("sft")]) < 2.1


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3", "fsdp2"])
def test_estimate_against_held_on_two_ranks(rp, tmp_path, stage):
    """The estimate's IW-SFT reference and L2 rows against what each of 2 CPU ranks holds (tests/rpsft/dist_worker.py
    `held`): the reference's parameter bytes on the rank (partitioned under ZeRO-3 / FSDP2) within 15 %, W_0 held
    like the weights (whole under ZeRO-2, half on each rank under ZeRO-3 and FSDP2) within 15 %, and no matrix kept
    for the penalty's backward beyond the weights and W_0 (FSDP2, the closed form: no D held, and the gradient it
    adds to each rank's rows is 2 scale (W - W_0)); the penalty that of the whole matrices (every weight moved by
    0.01), and the anchor saved from the parts equal to the whole W_0."""
    import json

    pytest.importorskip("deepspeed")
    worker = str(Path(__file__).resolve().parent / "dist_worker.py")
    proc = rp.torchrun(worker, "held", stage, str(tmp_path), DS_ACCELERATOR="cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        res = json.loads((tmp_path / f"held_{stage}_rank{rank}.json").read_text())
        cfg = res["config"]
        iw = method_memory(cfg, "iw_sft", stage=stage, gpus=2, weight_bytes=4, reference_bytes=4)
        l2 = method_memory(cfg, "l2", stage=stage, gpus=2, weight_bytes=4, anchor_bytes=4)
        assert abs(iw["iw_reference"] - res["reference_bytes"]) <= 0.15 * res["reference_bytes"], (rank, res)
        assert abs(l2["l2_w0"] - res["w0_bytes"]) <= 0.15 * res["w0_bytes"], (rank, res)
        assert res["saved_new_bytes"] == 0, res
        assert res["penalty"] == pytest.approx(1e-4 * res["numbers"], rel=1e-4), res
        assert res["saved_err"] == 0, res
        # autograd (ZeRO): the weight and W_0 of each matrix; the closed form (FSDP2): nothing kept
        assert res["saved_matrices"] == (0 if stage == "fsdp2" else 2 * res["entries"]), res
        if stage == "fsdp2":  # the closed form's gradient on each rank's rows, D recomputed: 2 x 3 (W - W_0)
            assert res["grad_err"] < 1e-6, res
