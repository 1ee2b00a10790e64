"""anchorft.rpsft.train.train() and the `anchorft train` command: loading, validation, artifacts."""

from __future__ import annotations

import json
import os

import datasets
import pytest

from anchorft.cli import command
from anchorft.rpsft.config import RPSFTConfig
from anchorft.rpsft.train import train

train_main = command("train")  # the command as `anchorft train` runs it


def _check_provenance(prov: dict) -> None:
    """A run's provenance against what is installed and, where the code runs from a git checkout, against git."""
    import shutil
    import subprocess
    from importlib import metadata
    from pathlib import Path

    import anchorft

    assert prov["anchorft"] == anchorft.__version__
    for lib in ("torch", "transformers", "trl"):
        assert prov[lib] == metadata.version(lib), lib
    src = Path(anchorft.__file__).resolve().parent
    git = shutil.which("git")
    run = lambda *a: subprocess.run([git, "-C", str(src), *a], capture_output=True, text=True)  # noqa: E731
    head = run("rev-parse", "HEAD") if git else None
    if head is None or head.returncode != 0 or not run("ls-files", "--", ".").stdout:
        assert prov["git_commit"] is None and prov["git_dirty"] is None  # an installed copy: no commit to name
    else:
        assert prov["git_commit"] == head.stdout.strip()
        assert prov["git_dirty"] == bool(run("status", "--porcelain", "--untracked-files=no").stdout.strip())


@pytest.fixture
def model_dir(rp, tokenizer_dir, tmp_path):
    """A tiny Qwen2 model saved beside the project's tokenizer (AutoTokenizer would turn it into Qwen2Tokenizer)."""
    from anchorft.eval.loading import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    path = tmp_path / "qwen"
    rp.tiny_model("qwen2", len(tok), tie=True).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture
def jsonl(rp, tmp_path):
    path = tmp_path / "train.jsonl"
    with open(path, "w") as f:
        for p, c in rp.make_texts(12):
            f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
    return str(path)


def test_train_from_paths_writes_artifacts(rp, model_dir, jsonl, tmp_path):
    out = tmp_path / "run"
    args = rp.base_args(str(out), method="rpsft", max_steps=2, anchor_svd="randomized")
    tr = train(args, model_dir, jsonl)
    assert type(tr.processing_class).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    assert tr.state.global_step == 2
    for f in ("rpsft_config.json", "metrics.json", "training.png"):
        assert os.path.isfile(out / f), f
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "rpsft" and metrics["anchor"]["penalty"] > 0
    _check_provenance(metrics["provenance"])
    assert any("anchor/drift_max" in h for h in metrics["log_history"])
    tr.create_model_card()  # what TRL's checkpoint saving calls: OUTPUT_DIR/README.md
    card = (out / "README.md").read_text()
    assert "huggingface.co/None" not in card and "the local model `qwen`" in card, card[:400]


def test_train_iw_sft_with_copy_reference(rp, tokenizer, dataset, tmp_path):
    args = rp.base_args(str(tmp_path), method="iw_sft", iw_ref_model="copy", max_steps=2)
    tr = train(args, rp.tiny_model("llama", len(tokenizer)), dataset, tokenizer=tokenizer)
    w = tr.state.log_history[0]["iw/weight_mean"]
    assert w == pytest.approx(1.0)  # the reference is the starting model: weight 1 at step 0


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("anchor_rank", 0, "anchor_rank"),
        ("anchor_lambda", -1.0, "anchor_lambda"),
        ("anchor_every", 0, "anchor_every"),
        ("method", "qlora", "method"),  # lora and osf are methods (PEFT); qlora is not
        ("lora_rank", 0, "lora_rank"),
        ("lora_alpha", 0.0, "lora_alpha"),
        ("lora_dropout", 1.0, "lora_dropout"),
        ("anchor_svd", "fast", "anchor_svd"),
        ("iw_clip", 0.0, "iw_clip"),
    ],
)
def test_bad_config_fields(rp, tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        rp.base_args(str(tmp_path), **{field: value})


def test_bad_inputs_fail_before_training(rp, tokenizer, dataset, tmp_path, monkeypatch):
    from anchorft.rpsft.trainer import RPSFTTrainer

    def no_train(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(RPSFTTrainer, "train", no_train)
    model = rp.tiny_model("llama", len(tokenizer))
    args = rp.base_args(str(tmp_path))
    with pytest.raises(ValueError, match=r"matches no trainable.*q_proj"):
        train(rp.base_args(str(tmp_path), anchor_targets="attn_q"), model, dataset, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="reference model"):
        train(rp.base_args(str(tmp_path), method="iw_sft"), model, dataset, tokenizer=tokenizer)
    bad = datasets.Dataset.from_dict({"question": ["a"], "answer": ["b"]})
    with pytest.raises(ValueError, match="'prompt' and 'completion', or 'messages'.*question"):
        train(args, model, bad, tokenizer=tokenizer)
    msgs = datasets.Dataset.from_dict({"messages": [[{"role": "user", "content": "hi"}]]})
    with pytest.raises(ValueError, match="chat_template"):
        train(args, model, msgs, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="not found"):
        train(args, model, str(tmp_path / "missing.jsonl"), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="RPSFTConfig"):
        train(object(), model, dataset, tokenizer=tokenizer)
    assert isinstance(args, RPSFTConfig) and args.use_cpu and not args.bf16 and not args.gradient_checkpointing


def test_cli_train_with_yaml(rp, model_dir, jsonl, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    out = tmp_path / "cli"
    cfg.write_text(
        "# anchorft train --config c.yaml\n"
        f"model_name_or_path: {model_dir}\ndataset: {jsonl}\noutput_dir: {out}\n"
        "method: l2\nanchor_lambda: 0.5\nmax_steps: 2\nper_device_train_batch_size: 2\nmax_length: 32\n"
        "report_to: []\nsave_strategy: 'no'\nlogging_steps: 1\ndisable_tqdm: true\n"
    )
    assert train_main(["--config", str(cfg), "--anchor_every", "2"]) == 0
    resolved = json.loads((out / "rpsft_config.json").read_text())
    assert resolved["method"] == "l2" and resolved["anchor_every"] == 2 and resolved["use_cpu"] is True
    assert os.path.isfile(out / "model.safetensors")
    assert train_main(["--config", str(cfg), "--anchor_rank", "0"]) == 2
    assert "anchor_rank" in capsys.readouterr().err


def test_cli_estimate(capsys):
    root = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "models")
    paths = [
        os.path.join(root, f)
        for f in ("llama-3.1-8b-instruct.json", "qwen2.5-7b-instruct.json", "qwen2.5-3b-instruct.json")
    ]
    assert train_main(["--estimate", "--model_config", *paths, "--anchor_rank", "768"]) == 0
    out = capsys.readouterr().out
    assert out.count("penalty / step") == 3
    from anchorft.rpsft.estimate import estimate, read_model_config

    llama = estimate(read_model_config(paths[0]), rank=768)
    assert 2.2e9 < llama["numbers"] < 2.5e9  # ~2.2G (rpsft-notes; they omit the k^2 blocks)
    assert 2.4e13 < llama["penalty_flops"] < 3.0e13 and llama["ratio"] < 0.01
    qwen7 = estimate(read_model_config(paths[1]), rank=768)
    fb = {r["matrix"] for r in qwen7["matrices"] if r["fallback"]}
    assert fb == {"k_proj", "v_proj"}  # 512 x 3584 at k = 768: L2 fallback, as the release
    qwen3 = estimate(read_model_config(paths[2]), rank=768)
    assert not any(r["matrix"] == "lm_head" for r in qwen3["matrices"])  # tied: counted once
    with pytest.raises(ValueError):
        estimate(read_model_config(paths[0]), rank=0)


def test_memory_per_gpu_formulas():
    """The memory estimate on a tiny config, against the formulas written out by hand."""
    from anchorft.rpsft.estimate import memory_per_gpu

    cfg = dict(hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=12)
    cfg.update(vocab_size=20, tie_word_embeddings=False)
    # q 8x8, k 4x8, v 4x8, o 8x8, gate 12x8, up 12x8, down 8x12 per layer; embed and lm_head 20x8
    p = 2 * (64 + 32 + 32 + 64 + 96 + 96 + 96) + 2 * 160
    z = memory_per_gpu(cfg, "zero2", gpus=4, per_device=3, seq_len=5, anchor_bytes=7.0, reference=True)
    assert z["parameters"] == p
    assert (z["weights"], z["gradients"], z["optimiser"], z["reference"]) == (2 * p, 2 * p / 4, 12 * p / 4, 2 * p)
    act = 2 * (3 * 5 * 8 * 2 + 3 * 5 * (10 * 8 + 4 * 12)) + 6 * 3 * 5 * 20
    assert z["activations"] == act and z["anchor"] == 7.0
    assert z["total"] == pytest.approx(2 * p + 2 * p / 4 + 12 * p / 4 + act + 7.0 + 2 * p)
    d = memory_per_gpu(cfg, "ddp", gpus=4, per_device=3, seq_len=5)
    assert (d["weights"], d["gradients"], d["optimiser"], d["reference"]) == (4 * p, 4 * p, 8 * p, 0.0)
    with pytest.raises(ValueError, match="stage"):
        memory_per_gpu(cfg, "zero3")


def test_run_title_names_the_l2_fallback():
    """training.png's title: an rpsft run whose every matrix fell back to L2 says so (it is an L2 run); l2 itself,
    a run without fallback and one without an anchor carry the method alone."""
    from anchorft.rpsft.train import run_title

    every = {"matrices": 14, "fallback": 14, "fallback_names": []}
    some = {"matrices": 14, "fallback": 3, "fallback_names": []}
    want = "method=rpsft (every matrix on the L2 fallback: anchor_rank >= min(m, n))"
    assert run_title("rpsft", False, every) == want
    assert "3 of 14 matrices on the L2 fallback" in run_title("rpsft", False, some)
    assert run_title("l2", True, every) == "method=l2"
    assert run_title("rpsft", False, {"matrices": 14, "fallback": 0, "fallback_names": []}) == "method=rpsft"
    assert run_title("sft", False, None) == "method=sft"
