"""The anchor options through `RPSFTTrainer` and `anchorft train --estimate`: resolved ranks saved and reloaded on
resume, map / layer errors before training, the estimate's per-matrix ranks."""

from __future__ import annotations

import copy

import pytest

from anchorft.rpsft.anchor import SubspaceAnchor
from anchorft.rpsft.trainer import RPSFTTrainer


def run(rp, model, tokenizer, dataset, out, resume=None, **kw):
    args = rp.base_args(str(out), **kw)
    tr = RPSFTTrainer(copy.deepcopy(model), args, train_dataset=dataset, processing_class=tokenizer)
    tr.train(resume_from_checkpoint=resume)
    return tr


def test_resume_reloads_the_resolved_ranks(rp, tokenizer, dataset, tmp_path, monkeypatch):
    model = rp.tiny_model("llama", len(tokenizer))
    kw = dict(method="rpsft", anchor_lambda=5.0, max_steps=4, save_strategy="steps", save_steps=2)
    full = run(
        rp, model, tokenizer, dataset, tmp_path / "full", anchor_rank_rule="energy:0.6", anchor_kind="subspace", **kw
    )
    ranks = full.anchor.ranks
    assert len(set(ranks.values())) > 1 and full.anchor.kind == "subspace"
    saved = SubspaceAnchor.load(tmp_path / "full" / "checkpoint-2" / "anchor")
    assert saved.ranks == ranks

    def no_svd(*a, **k):
        raise AssertionError("ranks re-resolved on resume")

    monkeypatch.setattr(SubspaceAnchor, "from_model", no_svd)
    # a different rule in the resumed config does not change the anchor: the checkpoint's ranks are reloaded
    resumed = run(
        rp, model, tokenizer, dataset, tmp_path / "res", resume=str(tmp_path / "full" / "checkpoint-2"),
        anchor_rank_rule="energy:0.9", **kw,
    )  # fmt: skip
    assert resumed.anchor.ranks == ranks and resumed.anchor.kind == "subspace"


def test_map_and_layers_checked_before_training(rp, tokenizer, dataset, tmp_path):
    from anchorft.rpsft.train import train

    model = rp.tiny_model("llama", len(tokenizer))
    for kw, match in [(dict(anchor_map="{nope: 2}"), "matches none"), (dict(anchor_layers="5-6"), "matches none")]:
        args = rp.base_args(str(tmp_path), method="rpsft", **kw)
        with pytest.raises(ValueError, match=match):
            train(args, model, dataset, tokenizer=tokenizer)


def test_layers_and_map_reach_the_trainer_anchor(rp, tokenizer, dataset, tmp_path):
    model = rp.tiny_model("llama", len(tokenizer))
    tr = run(
        rp, model, tokenizer, dataset, tmp_path / "a", method="rpsft", max_steps=1, anchor_layers="1",
        anchor_map='{"q_proj": {"rank": 2, "lambda": 3.0}}', anchor_lambda=1.5, anchor_lambda_rest=0.1,
    )  # fmt: skip
    names = {e.name for e in tr.anchor.entries}
    assert names and all(".layers.1." in n for n in names)
    q = next(e for e in tr.anchor.entries if "q_proj" in e.name)
    assert q.rank == 2 and q.weight == pytest.approx(2.0) and q.rest == pytest.approx(0.1 / 1.5)


def test_estimate_prints_resolved_ranks_from_a_model_folder(rp, tmp_path, capsys):
    from anchorft.cli import command

    main = command("train")

    model = rp.tiny_model("llama", 64)
    model.save_pretrained(tmp_path / "m")
    assert main(["--estimate", "--model_config", str(tmp_path / "m"), "--anchor_rank_rule", "energy:1.0"]) == 0
    out = capsys.readouterr().out
    assert "model.layers.0.self_attn.q_proj.weight" in out and "full (L2)" in out
    # a config alone: one line saying the rules need the weights
    rc = main(
        ["--estimate", "--model_config", str(tmp_path / "m" / "config.json"), "--anchor_rank_rule", "energy:0.5"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "resolved on the weights" in err
    assert err.count("\n") == 1


def test_estimate_takes_the_targets_and_the_recipes_anchor_options(rp, tmp_path, capsys):
    from anchorft.cli import command

    main = command("train")

    model = rp.tiny_model("llama", 64)
    model.save_pretrained(tmp_path / "m")
    linear = [n for n, t in model.named_parameters() if t.ndim == 2 and "embed" not in n and "lm_head" not in n]

    def listed(argv):
        assert main(["--estimate", *argv]) == 0
        out = capsys.readouterr().out
        return [n for n in linear if n in out]

    assert listed(["--model_config", str(tmp_path / "m"), "--anchor_targets", "v_proj"]) == [
        n for n in linear if "v_proj" in n
    ]
    # a recipe's targets and layers, each replaced by its flag
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: {tmp_path / 'm'}\nanchor_targets: q_proj|o_proj\nanchor_layers: '1'\n")
    got = listed(["--config", str(recipe)])
    assert got == [n for n in linear if ("q_proj" in n or "o_proj" in n) and ".layers.1." in n] and got
    assert listed(["--config", str(recipe), "--anchor_targets", "k_proj"]) == [
        n for n in linear if "k_proj" in n and ".layers.1." in n
    ]
    # targets other than all-linear need the weights, as rules and maps do
    rc = main(["--estimate", "--model_config", str(tmp_path / "m" / "config.json"), "--anchor_targets", "q_proj"])
    err = capsys.readouterr().err
    assert rc == 2 and "resolved on the weights" in err and err.count("\n") == 1


def test_cli_train_with_a_fisher_rule_and_a_map_in_yaml(rp, tokenizer_dir, tmp_path):
    import json

    from anchorft.cli import command

    main = command("train")
    from anchorft.eval.loading import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    mdir = tmp_path / "m"
    rp.tiny_model("llama", len(tok)).save_pretrained(mdir)
    tok.save_pretrained(mdir)
    for name, seed in (("id.jsonl", 0), ("ood.jsonl", 1)):
        with open(tmp_path / name, "w") as f:
            for p, c in rp.make_texts(6, seed):
                f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "# anchorft train --config c.yaml\n"
        f"model_name_or_path: {mdir}\ndataset: {tmp_path / 'id.jsonl'}\noutput_dir: {out}\n"
        f"method: rpsft\nanchor_rank_rule: 'fisher:0.5'\nanchor_calibration: {tmp_path / 'ood.jsonl'}\n"
        "anchor_calibration_samples: 4\nanchor_map: {'lm_head': 0}\nmax_steps: 1\nper_device_train_batch_size: 2\n"
        "max_length: 32\nreport_to: []\nsave_strategy: 'steps'\nsave_steps: 1\nlogging_steps: 1\ndisable_tqdm: true\n"
    )
    assert main(["--config", str(cfg)]) == 0
    anchor = SubspaceAnchor.load(out / "checkpoint-1" / "anchor")
    assert anchor.meta["rank"] == "fisher:0.5" and anchor.ranks["lm_head.weight"] == 0
    assert len(set(anchor.ranks.values())) > 1
    cfg.write_text(cfg.read_text().replace(f"anchor_calibration: {tmp_path / 'ood.jsonl'}\n", ""))
    assert main(["--config", str(cfg)]) == 2  # a fisher rule without calibration data: one-line error
