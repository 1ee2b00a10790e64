"""Every method under every launcher, 2 processes on CPU (torchrun, gloo): DDP, DeepSpeed ZeRO-2 / ZeRO-3, FSDP2.

One 2-process launch per launcher (`matrix_worker.py`, cached for the module) trains sft, dft, iw_sft, l2, rpsft
(block), rpsft (subspace kind), rpsft with the remainder L2, lora, osf and lora + anchor (osf refused in one line
under ZeRO-3; under ZeRO-3 every parameter is partitioned, as a large model's are) through
`anchorft.rpsft.train.train`, each with a
checkpoint at step 2 of 4, ends with the final `save_model` (as `anchorft train` does), and resumes each from its
step-2 checkpoint. Each (method, launcher) cell checks: the engine is the launcher's (DeepSpeedEngine, DTensor
parameters, DDP); the final weights are a `save_pretrained` folder that loads into a fresh model with every weight;
the resumed run reaches the same weights (max abs difference <= 1e-6: the same operations in the same order; the
warm-up-and-decay schedule makes a resume that restarted it fail); FSDP2 loads as configs/accelerate/fsdp2.yaml
ships (cpu_ram_efficient_loading: rank 0 reads the weights, the others get them when the model is sharded); the
weights equal a one-process run with the same global batch, within the error model below.

The error model (docs/testing.md, "The distributed matrix's tolerance"). A distributed run sums the same gradients
in another order (across ranks, per shard) and DeepSpeed takes the anchor through autograd instead of the closed
form: float32 round-off that AdamW, which divides each gradient entry by its own running scale, turns into steps of
up to lr per entry wherever a gradient entry is near zero. A worst-entry measure (max |difference| / max |weight|)
is ruled by those few entries; the measure here is per matrix, relative to what the run moved it:
||W_run - W_one||_F / ||W_one - W_0||_F. Its noise is measured on each machine as the spread of one-process runs
that differ only in reduction order: the micro-batch split (2 x 4 instead of 4 x 2) and, for an anchor, the
autograd form. The tolerance is FACTOR x that spread (the largest over methods and matrices), at least FLOOR: FSDP2's
row-sharded penalty (no one-process analogue) was measured at 13 x the spread, and a 1 % change of lr or 5 % of
lambda moves the weights by 15-70 x the tolerance (docs/testing.md). The
cell itself is well conditioned (lambda 1, lr 1e-2: gradient norms of at most about 5 are clipped to 1, not 93 as
at lambda 20), and the anchor still moves the weights by as much as the data does. The anchor's own arithmetic
under DeepSpeed is checked exactly by `test_penalty_and_gradient_under_deepspeed_equal_one_process`.

Slow (5 launches, each process imports torch / transformers / TRL / DeepSpeed): `make test-dist`, or
`pytest -m '' -k distributed`. The DeepSpeed cells need `deepspeed` (the dev extras; DS_BUILD_OPS=0 is enough).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from matrix_worker import (  # noqa: E402
    ACCUM,
    METHODS,
    N_ROWS,
    PENALTY_ANCHORS,
    PENALTY_DRIFT,
    PER_DEVICE,
    REFUSED,
    train_kwargs,
)

WORKER = os.path.join(os.path.dirname(__file__), "matrix_worker.py")
ENGINES = {
    "ddp": "DistributedDataParallel",
    "zero2": "DeepSpeedEngine",
    "zero3": "DeepSpeedEngine",
    "fsdp2": "DTensor",
}
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
# the error model (module docstring): tolerance = max(FLOOR, FACTOR x the measured spread of one-process runs)
FACTOR, FLOOR = 50.0, 1e-5


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, rp):
    """A tiny Llama and its tokenizer, saved with save_pretrained (the runs load it by path, as `anchorft train`)."""
    path = str(tmp_path_factory.mktemp("base"))
    tok = rp.build_tokenizer(path)
    rp.tiny_model("llama", len(tok)).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def launch(base_dir, tmp_path_factory, rp):
    """launch(launcher) -> (output folder, log tail): one torchrun of the worker per launcher, run on first use."""
    done: dict[str, tuple[str, str]] = {}

    def run(launcher: str) -> tuple[str, str]:
        if launcher not in done:
            out = str(tmp_path_factory.mktemp(launcher))
            res = rp.torchrun(WORKER, launcher, base_dir, out, *METHODS)
            tail = "" if res.returncode == 0 else f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-5000:]}"
            done[launcher] = (out, tail)
        return done[launcher]

    return run


@pytest.fixture(scope="module")
def one_process(base_dir, tmp_path_factory, rp):
    """one_process(method, variant="") -> {name: weight} after the same run in one process (per-device batch
    doubled). Variants that change only the order of the sums: "split" (micro-batches of 2, 2 x ACCUM of them),
    "autograd" (the anchor through autograd, as under DeepSpeed)."""
    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.train import train

    done: dict[tuple[str, str], dict[str, torch.Tensor]] = {}

    def run(method: str, variant: str = "") -> dict[str, torch.Tensor]:
        if (method, variant) not in done:
            kw = dict(train_kwargs(method, 2 * PER_DEVICE), save_strategy="no")
            if variant == "split":
                kw.update(per_device_train_batch_size=PER_DEVICE, gradient_accumulation_steps=2 * ACCUM)
            elif variant == "autograd":
                kw.update(anchor_mode="autograd")
            args = rp.base_args(str(tmp_path_factory.mktemp(f"one-{method}-{variant}")), **kw)
            tr = train(args, base_dir, rp.pc_dataset(N_ROWS), tokenizer=load_tokenizer(base_dir))
            done[method, variant] = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
        return done[method, variant]

    return run


def update_error(w: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict:
    """{name: ||w - ref||_F / ||ref - base||_F} for every matrix the reference run moved."""
    out = {}
    for n, r in ref.items():
        moved = float((r - base[n]).norm())
        if moved > 0:
            out[n] = float((w[n] - r).norm()) / moved
    return out


@pytest.fixture(scope="module")
def tolerance(one_process, base_dir):
    """The error model's tolerance: FACTOR x the largest update error between one-process runs that differ only in
    the order of their sums (module docstring), at least FLOOR."""
    base = _load(base_dir)
    spread = 0.0
    for method, kw in METHODS.items():
        anchored = kw["method"] in ("l2", "rpsft") or kw.get("lora_anchor", False)
        variants = ["split"] + (["autograd"] if anchored else [])
        for v in variants:
            spread = max(spread, *update_error(one_process(method, v), one_process(method), base).values())
    return max(FLOOR, FACTOR * spread)


def _load(folder: str) -> dict[str, torch.Tensor]:
    """The weights of a save_pretrained folder, loaded into a fresh model (every weight present)."""
    from transformers import AutoModelForCausalLM

    assert os.path.isfile(os.path.join(folder, "model.safetensors")), f"no model.safetensors in {os.listdir(folder)}"
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"] and not info["unexpected_keys"], info
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(ENGINES))
@pytest.mark.parametrize("method", list(METHODS))
def test_distributed_cell(method, launcher, launch, one_process, base_dir, tolerance):
    if launcher.startswith("zero") and not HAS_DEEPSPEED:
        pytest.skip("deepspeed is not installed (the dev extras install it)")
    out, tail = launch(launcher)
    info_path = os.path.join(out, method, "info.json")
    assert os.path.isfile(info_path), f"{launcher}: {method} did not finish\n{tail}"
    with open(info_path) as f:
        info = json.load(f)
    if (method, launcher) in REFUSED:  # refused in one line before any model is loaded
        assert info.get("refused", "").startswith(REFUSED[method, launcher]), info
        assert "\n" not in info["refused"]
        return
    for run in ("run", "resume"):
        assert info[run]["engine"] == ENGINES[launcher], (run, info[run])
        assert info[run]["global_step"] == train_kwargs(method, 1)["max_steps"]
        assert info[run]["ram_efficient"] == (launcher == "fsdp2")  # fsdp2.yaml's cpu_ram_efficient_loading: true
    run_w = _load(os.path.join(out, method, "run"))
    resumed = _load(os.path.join(out, method, "resume"))
    base = _load(base_dir)
    one = one_process(method)
    assert max(float((run_w[n] - base[n]).abs().max()) for n in base) > 1e-2  # the run trained
    for n in one:
        assert float((resumed[n] - run_w[n]).abs().max()) <= 1e-6, f"resume differs: {n}"
    err = update_error(run_w, one, base)
    worst = max(err, key=err.get)
    assert err[worst] <= tolerance, f"differs from one process: {worst} {err[worst]:.3g} > {tolerance:.3g}"


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="deepspeed is not installed (the dev extras install it)")
def test_penalty_and_gradient_under_deepspeed_equal_one_process(base_dir, tmp_path, rp):
    """The anchor's per-matrix terms and the whole gradient of their sum, under ZeRO-2 and ZeRO-3 (ZeRO-3: each
    matrix gathered for its terms, the gradient reduce-scattered and gathered back), equal one process's autograd
    to 1e-6 of the largest entry, for every anchor kind at a drift where every term is non-zero."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from anchorft.rpsft.anchor import SubspaceAnchor

    res = rp.torchrun(WORKER, "penalty", base_dir, str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-5000:]
    for name, kw in PENALTY_ANCHORS.items():
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        anchor = SubspaceAnchor.from_model(model, **kw)
        rp.perturb(model, PENALTY_DRIFT, seed=1)
        terms = anchor.penalty_terms(model)
        terms.sum().backward()
        assert bool((terms > 0).all()), name
        for stage in (2, 3):
            got = load_file(str(tmp_path / f"zero{stage}-{name}.safetensors"))
            assert torch.allclose(got["terms"], terms.detach(), rtol=1e-6, atol=0), (stage, name)
            for n, p in model.named_parameters():
                want = torch.zeros_like(p) if p.grad is None else p.grad
                err = float((got[f"grad.{n}"] - want).abs().max())
                assert err <= 1e-6 * float(want.abs().max()), (stage, name, n, err)
