"""The paper's recipes in configs/rpsft/: composition, stand-ins, a two-step dry run of every leaf, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from anchorft.cli import command
from anchorft.rpsft import methods as methods_table
from anchorft.rpsft import recipes, stand_in
from anchorft.rpsft.recipes import load_recipe, write_flat_config
from anchorft.rpsft.stand_in import (
    build_stand_in,
    build_stand_in_tokenizer,
    dry_run,
    load_model_config,
    stand_in_config,
    stand_in_rank,
)

ROOT = Path(__file__).resolve().parents[2]
RPSFT = ROOT / "configs" / "rpsft"
MODELS = {"llama-3.1-8b-instruct": 20, "qwen2.5-7b-instruct": 12, "qwen2.5-3b-instruct": 12}
HUB = {
    "llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen2.5-7b-instruct": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-3b-instruct": "Qwen/Qwen2.5-3B-Instruct",
}
METHODS = tuple(methods_table.METHODS)  # every method of the table has a recipe leaf per model
LEAVES = sorted(p for p in RPSFT.glob("*/*.yaml") if p.parent.name != "_base")
OTHER_CONFIGS = sorted(p for p in RPSFT.rglob("*.yaml") if "_base" not in p.parts and p not in LEAVES)
# the dry runs in the default suite: every method on one model, and the other architecture (Llama) once; the rest of
# the recipes (the same methods on the other two models, about 1.7 s each) run in `make test-dist`
DEFAULT_DRY_RUNS = {("qwen2.5-3b-instruct", m) for m in ("dft", "iw_sft", "l2", "lora", "osf", "rpsft", "sft")}
DEFAULT_DRY_RUNS |= {("llama-3.1-8b-instruct", "rpsft")}
# configs/rpsft/ files outside the recipe set (written with the trainer, not generated): each must pass its dry
# run too. Known failures (strict: the test fails once they are fixed, so that the mark goes):
KNOWN_BROKEN: dict[str, str] = {}  # config file name -> why it cannot pass its dry run (none at present)
# the paper's settings (rpsft-notes.md), written out independently of the YAML files
PAPER = {
    "learning_rate": 1e-6,
    "lr_scheduler_type": "constant_with_warmup",
    "warmup_steps": 0.03,
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-7,
    "weight_decay": 0.0,
    "anchor_rank": 768,
    "anchor_lambda": 1.0,
    "anchor_every": 1,
    "anchor_targets": "all-linear",
    "anchor_include_embeddings": True,
    "anchor_svd": "exact",
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared 2-core machine: one thread is faster
    yield
    torch.set_num_threads(n)


def test_fifteen_leaves() -> None:
    assert {(p.parent.name, p.stem) for p in LEAVES} == {(m, k) for m in MODELS for k in METHODS}


@pytest.mark.parametrize(
    "path",
    sorted([*RPSFT.rglob("*.yaml"), *(ROOT / "configs" / "accelerate").glob("*.yaml")]),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_first_line_is_a_command(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and "anchorft" in first and "train --config configs/rpsft/" in first
    if path in LEAVES:  # a leaf runs itself
        assert first.endswith(f"train --config {path.relative_to(ROOT)}")
        assert first.startswith("# accelerate launch --config_file configs/accelerate/")
        assert (ROOT / first.split("--config_file ")[1].split()[0]).is_file()


@pytest.mark.parametrize("path", LEAVES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_composed_settings(path: Path) -> None:
    args, meta = load_recipe(path)
    for key, value in PAPER.items():
        assert args[key] == pytest.approx(value) if isinstance(value, float) else args[key] == value, key
    assert args["bf16"] is True and args["method"] == path.stem
    assert args["num_train_epochs"] == MODELS[path.parent.name]
    assert args["model_name_or_path"] == HUB[path.parent.name]
    assert args["output_dir"] == f"runs/rpsft/{path.parent.name}/{path.stem}"
    assert Path(meta["_model_config_"]) == ROOT / "configs" / "models" / f"{path.parent.name}.json"
    assert not any(k.startswith("_") for k in args)
    if path.stem == "iw_sft":
        assert (args["iw_temperature"], args["iw_clip"], args["iw_ref_model"]) == (1.0, 16.0, "copy")
    # a leaf is small: the settings live in the parents
    assert len(yaml.safe_load(path.read_text())) == 2


def test_flat_config_parses_with_trlparser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import TrlParser

    from anchorft.commands.train import _parse_train_argv
    from anchorft.rpsft.config import RPSFTConfig, ScriptArguments

    leaf = RPSFT / "qwen2.5-7b-instruct" / "rpsft.yaml"
    flat = write_flat_config(leaf, tmp_path / "flat.yaml")
    text = flat.read_text()
    assert text.splitlines()[0].startswith("# anchorft train --config")
    assert "preset" not in text and "_model_config_" not in text
    script, args = TrlParser((ScriptArguments, RPSFTConfig)).parse_args_and_config(
        ["--config", str(flat), "--output_dir", str(tmp_path / "o")]
    )
    assert script.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert script.dataset == "data/train_openr1_4k/train.jsonl"
    assert (args.method, args.anchor_rank, args.learning_rate, args.adam_beta2) == ("rpsft", 768, 1e-6, 0.98)
    assert args.num_train_epochs == 12 and args.model_init_kwargs == {"dtype": "float32"}
    # `anchorft train` reads the leaf itself (no flat file): the same values, and a flag wins over the recipe
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: pytest.fail("a temporary file was written"))
    script2, args2 = _parse_train_argv(["--config", str(leaf), "--output_dir", str(tmp_path / "o"), "--seed", "3"])
    assert script2 == script and args2.seed == 3 and dataclasses.replace(args2, seed=args.seed) == args


def _real_shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    """Weight shapes of one decoder layer and the embeddings, from config.json by hand (not via transformers)."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    i, v = cfg["intermediate_size"], cfg["vocab_size"]
    return {
        "q_proj": (heads * hd, h),
        "k_proj": (kv * hd, h),
        "v_proj": (kv * hd, h),
        "o_proj": (h, heads * hd),
        "gate_proj": (i, h),
        "up_proj": (i, h),
        "down_proj": (h, i),
        "embed_tokens": (v, h),
    }


@pytest.mark.parametrize("name", list(MODELS))
def test_stand_in_keeps_family_naming_and_ratios(name: str) -> None:
    real = load_model_config(ROOT / "configs" / "models" / f"{name}.json")
    tok = build_stand_in_tokenizer(real["model_type"], ["Compute 2 + 2. The answer is \\boxed{4}."] * 4)
    cfg, scale = stand_in_config(real, vocab_size=len(tok))
    model = build_stand_in(cfg, tok, seed=0)
    assert cfg.model_type == real["model_type"] and type(model).__name__ == real["architectures"][0]
    assert (
        cfg.num_attention_heads // cfg.num_key_value_heads
        == real["num_attention_heads"] // real["num_key_value_heads"]
    )
    assert cfg.tie_word_embeddings == real["tie_word_embeddings"]
    assert abs(cfg.intermediate_size / cfg.hidden_size - real["intermediate_size"] / real["hidden_size"]) < 0.2
    assert scale == cfg.hidden_size / real["hidden_size"]
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    # same parameter names as the real model, layer for layer (the real one built on the meta device)
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        big = AutoModelForCausalLM.from_config(AutoConfig.for_model(**real))
    generic = lambda names: {re.sub(r"\.\d+\.", ".N.", n) for n in names}  # noqa: E731
    assert generic(n for n, _ in model.named_parameters()) == generic(n for n, _ in big.named_parameters())
    # the scaled rank puts each matrix in the same branch (SVD block vs ||W - W0||^2 fallback) as at full size
    k_real, k_small = 768, stand_in_rank(768, scale)
    small_shapes = {}
    for n, p in model.named_parameters():
        leaf = n.split(".")[-2]
        if p.dim() == 2 and leaf in _real_shapes(real):
            small_shapes[leaf] = tuple(p.shape)
    for leaf, shape in _real_shapes(real).items():
        assert (k_real >= min(shape)) == (k_small >= min(small_shapes[leaf])), leaf
    expected_fallback = {"llama": set(), "qwen2": {"k_proj", "v_proj"}}[real["model_type"]]
    assert {leaf for leaf, s in _real_shapes(real).items() if k_real >= min(s)} == expected_fallback


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_tokenizer_chat_format(family: str) -> None:
    tok = build_stand_in_tokenizer(family, ["Please reason step by step.", "What is 12 * 3? \\boxed{36}"])
    msgs = [
        {"role": "system", "content": "Please reason step by step."},
        {"role": "user", "content": "What is 12 * 3?"},
    ]
    text = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "\\boxed{36}"}], tokenize=False)
    marker = {"llama": "<|start_header_id|>assistant<|end_header_id|>", "qwen2": "<|im_start|>assistant"}[family]
    assert marker in text and text.count(tok.eos_token) == 3
    prompt_ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    full_ids = tok.apply_chat_template(
        msgs + [{"role": "assistant", "content": "\\boxed{36}"}], tokenize=True, return_dict=False
    )
    assert full_ids[: len(prompt_ids)] == prompt_ids  # TRL's completion mask relies on this
    assert tok.decode(tok("What is 12 * 3?")["input_ids"]) == "What is 12 * 3?"
    for special in (tok.eos_token, tok.pad_token):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.parametrize(
    "path",
    [p if (p.parent.name, p.stem) in DEFAULT_DRY_RUNS else pytest.param(p, marks=pytest.mark.slow) for p in LEAVES],
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_dry_run(path: Path, tmp_path: Path) -> None:
    s = dry_run(path, tmp_path)
    assert s["global_step"] == 2 and len(s["losses"]) == 2
    assert s["method"] == path.stem and s["matrix_names_match"] and s["same_branches_as_real"]
    assert s["anchor_rank"]["recipe"] == 768
    resolved = json.loads((tmp_path / "rpsft_config.json").read_text())
    # the recipe's settings reached the trainer (bf16 / gradient checkpointing: CPU-safety overrides)
    for key, value in PAPER.items():
        if key != "anchor_rank":
            assert resolved[key] == pytest.approx(value) if isinstance(value, float) else resolved[key] == value
    assert resolved["anchor_rank"] == s["anchor_rank"]["stand_in"]
    # 16 sequences a step as released: 2 per device, accumulation 8 on this one process
    assert (resolved["per_device_train_batch_size"], resolved["gradient_accumulation_steps"]) == (2, 8)
    assert resolved["effective_batch_size"] == 16
    assert resolved["max_steps"] == 2 and resolved["output_dir"] == str(tmp_path)
    logged = set().union(*(h.keys() for h in s["log_history"]))
    assert ("anchor/penalty" in logged) == (path.stem in ("l2", "rpsft"))
    assert ("iw/weight_mean" in logged) == (path.stem == "iw_sft")
    if path.stem == "dft":
        assert resolved["loss_type"] == "dft"
    assert (tmp_path / "dry_run.json").is_file() and (tmp_path / "checkpoint-2").is_dir()
    assert json.loads((tmp_path / "dry_run.json").read_text())["provenance"]["trl"]
    if path.stem in ("l2", "rpsft"):
        assert (tmp_path / "checkpoint-2" / "anchor").is_dir()


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(raises=ValueError, strict=True, reason=KNOWN_BROKEN[p.name]))
        if p.name in KNOWN_BROKEN
        else p
        for p in OTHER_CONFIGS
    ],
    ids=lambda p: str(p.relative_to(RPSFT)),
)
def test_dry_run_other_configs(path: Path, tmp_path: Path) -> None:
    """Every other config in configs/rpsft/ passes its dry run; one that names no model (the model is given on the
    command line) runs on a Llama stand-in."""
    args, meta = load_recipe(path)
    model_config = None
    if not meta.get("_model_config_") and not stand_in.find_model_config(args.get("model_name_or_path")):
        model_config = ROOT / "configs" / "models" / "llama-3.1-8b-instruct.json"
    s = dry_run(path, tmp_path, model_config=model_config)
    assert s["global_step"] == 2 and all(map(math.isfinite, s["losses"]))


def test_find_model_config() -> None:
    assert stand_in.find_model_config("meta-llama/Llama-3.1-8B-Instruct") == str(
        ROOT / "configs" / "models" / "llama-3.1-8b-instruct.json"
    )
    assert stand_in.find_model_config("Qwen/Qwen2.5-3B-Instruct").endswith("qwen2.5-3b-instruct.json")
    assert stand_in.find_model_config("someone/unknown-model") is None
    assert stand_in.find_model_config(None) is None


def test_dry_run_main_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dry_run_main = command("train")  # with --dry-run in the arguments
    leaf = RPSFT / "qwen2.5-3b-instruct" / "sft.yaml"
    argv = ["--config", str(leaf), "--dry-run", "--output_dir", str(tmp_path), "--effective_batch_size", "2"]
    rc = dry_run_main(argv)  # the recipe's data/train_openr1_4k/train.jsonl is not there
    err = capsys.readouterr().err
    assert rc == 2 and "train_openr1_4k/train.jsonl does not exist" in err and "--no-data-check" in err
    rc = dry_run_main([*argv, "--no-data-check"])
    assert rc == 0 and "dry run OK" in capsys.readouterr().out
    assert json.loads((tmp_path / "rpsft_config.json").read_text())["gradient_accumulation_steps"] == 1
    rc = dry_run_main(
        ["--config", str(leaf), "--dry-run", "--no-data-check", "--output_dir", str(tmp_path), "--no_such_field", "1"]
    )
    assert rc == 2 and "no_such_field" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ bad input


def _leaf(tmp_path: Path, body: dict, model: str = "llama-3.1-8b-instruct", method: str = "sft") -> Path:
    p = tmp_path / "leaf.yaml"
    base = [str(RPSFT / "_base" / "base.yaml"), str(RPSFT / "_base" / "models" / f"{model}.yaml")]
    base.append(str(RPSFT / "_base" / "methods" / f"{method}.yaml"))
    p.write_text("# anchorft train --config leaf.yaml\n" + yaml.safe_dump({"preset": base, **body}))
    return p


def _no_training(out: Path) -> None:
    assert not out.exists() or not any(out.iterdir()), "the error came after training started"


def test_unknown_method(tmp_path: Path) -> None:
    leaf = _leaf(tmp_path, {"method": "rpsft++"})
    with pytest.raises(ValueError, match=r"method must be one of .*'rpsft\+\+'"):
        dry_run(leaf, tmp_path / "out")
    _no_training(tmp_path / "out")


def test_unknown_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown field 'learning_rat' in .*leaf.yaml; did you mean .*learning_rate"):
        dry_run(_leaf(tmp_path, {"learning_rat": 1e-5}), tmp_path / "out")
    with pytest.raises(ValueError, match=r"warmup_ratio.*warmup_steps: 0.03"):
        load_recipe(_leaf(tmp_path, {"warmup_ratio": 0.03}))
    with pytest.raises(ValueError, match=r"unknown recipe key"):
        load_recipe(_leaf(tmp_path, {"_models_": "x"}))
    _no_training(tmp_path / "out")


def test_bad_inheritance(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("preset: b.yaml\nmethod: sft\n")
    b.write_text("preset: [a.yaml]\n")
    with pytest.raises(ValueError, match="cycle"):
        load_recipe(a)
    b.write_text("preset: [missing.yaml]\n")
    with pytest.raises(ValueError, match="not found.*missing.yaml"):
        load_recipe(a)
    b.write_text("_base_: [a.yaml]\n")  # the former key: an error that names the new one
    with pytest.raises(ValueError, match="`_base_` is now `preset:`"):
        load_recipe(a)


def test_dataset_without_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "2+2?", "response": "4"}) + "\n")
    with pytest.raises(ValueError, match=r"'prompt' and 'completion', or 'messages'.*question"):
        dry_run(_leaf(tmp_path, {"dataset": str(bad)}), tmp_path / "out")
    with pytest.raises(ValueError, match=r"'prompt' and 'completion', or 'messages'"):
        dry_run(RPSFT / "qwen2.5-3b-instruct" / "sft.yaml", tmp_path / "out", dataset=str(bad))
    _no_training(tmp_path / "out")


def test_unsupported_family(tmp_path: Path) -> None:
    cfg = json.loads((ROOT / "configs" / "models" / "llama-3.1-8b-instruct.json").read_text())
    cfg["model_type"] = "gpt2"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"'gpt2' is not a supported family; supported: \['llama', 'qwen2'\]"):
        dry_run(RPSFT / "llama-3.1-8b-instruct" / "rpsft.yaml", tmp_path / "out", model_config=path)
    _no_training(tmp_path / "out")
    with pytest.raises(ValueError, match="no config.json"):
        load_model_config(tmp_path / "nowhere")


def test_accelerate_configs() -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {}
    for path in sorted((ROOT / "configs" / "accelerate").glob("*.yaml")):
        c = load_config_from_file(str(path))
        assert c.mixed_precision == "bf16" and not c.use_cpu
        kinds[path.stem] = (str(c.distributed_type).split(".")[-1], (c.deepspeed_config or {}).get("zero_stage"))
    assert kinds["ddp"] == ("MULTI_GPU", None)
    assert kinds["zero2"] == ("DEEPSPEED", 2)
    assert kinds["zero3"] == ("DEEPSPEED", 3)
    assert kinds["fsdp2"][0] == "FSDP"
    # the recipes launch with ZeRO-2, the paper's setup
    for leaf in LEAVES:
        assert "configs/accelerate/zero2.yaml" in leaf.read_text().splitlines()[0]


def test_module_exports() -> None:
    for module in (recipes, stand_in):
        for name in module.__all__:
            assert hasattr(module, name)


@pytest.mark.parametrize("method", ["rpsft", "lora"])
def test_train_command_runs_a_resolved_recipe(tmp_path: Path, method: str) -> None:
    """The path a user takes: data command -> recipe read by `anchorft train`'s own parser
    and trainer, with a saved stand-in as the model (no hub access here). lora (with its adapter anchor): the saved
    model is the merged one, a plain `save_pretrained` folder."""
    from anchorft.cli import command

    data_main, train_main = command("data"), command("train")

    rows = stand_in.example_rows(12, seed=1)
    src = tmp_path / "openr1.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["openr1-math", "--sampler", "verified", "--out", str(tmp_path / "data"), "--source", str(src)]
    assert data_main([*argv, "--size", "8"]) == 0
    leaf = RPSFT / "qwen2.5-3b-instruct" / f"{method}.yaml"
    _, meta = load_recipe(leaf)
    real = load_model_config(meta["_model_config_"])
    texts = [m["content"] for r in rows for m in r["messages"]]
    tok = build_stand_in_tokenizer("qwen2", texts)
    cfg, scale = stand_in_config(real, vocab_size=len(tok))
    build_stand_in(cfg, tok).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    argv = ["--config", str(leaf)]
    argv += ["--model_name_or_path", str(tmp_path / "model"), "--dataset", str(tmp_path / "data" / "train.jsonl")]
    argv += ["--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--effective_batch_size", "4"]
    argv += ["--anchor_rank", str(stand_in_rank(768, scale))]
    if method == "lora":
        argv += ["--lora_anchor", "true", "--learning_rate", "1e-3", "--lora_rank", "4"]
    assert train_main(argv) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["method"] == method and metrics["global_step"] == 2
    if method == "lora":
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM

        saved = load_file(tmp_path / "out" / "model.safetensors")
        start = load_file(tmp_path / "model" / "model.safetensors")
        assert set(saved) == set(start)  # the merged model: the base's own parameter names, no adapter
        assert any(not torch.equal(saved[k], start[k]) for k in start)
        AutoModelForCausalLM.from_pretrained(tmp_path / "out")
        assert "AdapterAnchor" in metrics["anchor"]["repr"] and metrics["anchor"]["penalty"] > 0
        return
    resolved = json.loads((tmp_path / "out" / "rpsft_config.json").read_text())
    assert (resolved["learning_rate"], resolved["adam_beta2"], resolved["adam_epsilon"]) == (1e-6, 0.98, 1e-7)
