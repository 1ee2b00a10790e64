"""The comparison: config handling, sweeps, report, and the smoke preset end to end."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from anchorft.studies.testbed.compare import finetune_dataset, run_compare
from anchorft.studies.testbed.compare_config import (
    PRESETS,
    RunSpec,
    expand_sweeps,
    load_config,
    paper_rank,
    plumbing_only,
)
from anchorft.studies.testbed.report import acceptance


def test_paper_rank_scaling():
    assert paper_rank(4096) == 768
    assert paper_rank(128) == 24


def test_expand_sweeps():
    runs = [RunSpec("sft", "sft"), RunSpec("l2", "l2"), RunSpec("rpsft-k4", "rpsft", anchor_rank=4)]
    out = expand_sweeps(runs, ["anchor_lambda=0.1,10"])
    assert [r.name for r in out] == ["sft", "l2-lam0.1", "l2-lam10", "rpsft-k4-lam0.1", "rpsft-k4-lam10"]
    assert [r.anchor_lambda for r in out] == [None, 0.1, 10, 0.1, 10]
    out = expand_sweeps(runs, ["anchor_rank=2,8", "learning_rate=1e-3"])
    assert [r.name for r in out] == ["sft-lr0.001", "l2-lr0.001", "rpsft-k2-lr0.001", "rpsft-k8-lr0.001"]
    assert out[3].anchor_rank == 8 and out[3].learning_rate == 1e-3
    with pytest.raises(ValueError, match="sweep"):
        expand_sweeps(runs, ["anchor_rank"])
    with pytest.raises(ValueError, match="unknown key"):
        expand_sweeps(runs, ["nope=1"])


def test_load_config_and_validation(tmp_path):
    assert load_config("smoke").seeds == [0]
    assert len(load_config("default").seeds) >= 3
    y = tmp_path / "c.yaml"
    y.write_text("# anchorft toy compare --preset c.yaml --out x\npreset: smoke\nmax_steps: 7\npretrain: {steps: 5}\n")
    cfg = load_config(str(y))
    assert cfg.max_steps == 7 and cfg.pretrain.steps == 5 and cfg.pretrain.hidden_size == 32
    with pytest.raises(ValueError, match="unknown toy compare config key 'max_step', did you mean 'max_steps'"):
        load_config({"preset": "smoke", "max_step": 1})
    with pytest.raises(ValueError, match="preset"):
        load_config("no-such-preset")
    with pytest.raises(ValueError, match="preset"):
        load_config({"preset": "nope"})
    bad = load_config("smoke")
    bad.runs = [RunSpec("x", "nope")]
    with pytest.raises(ValueError, match="method"):
        bad.validate()


def test_default_rank_sweep_follows_the_width():
    # the paper's rank is 768/4096 of the width: 24 at 128, 36 at 192; the sweep adds a third of it
    ranks = lambda cfg: [r.anchor_rank for r in cfg.runs if r.method == "rpsft"]  # noqa: E731
    assert ranks(load_config("default")) == [8, 24]
    assert ranks(load_config({"pretrain": {"hidden_size": 192}})) == [12, 36]
    assert ranks(load_config({"learning_rate": 1e-3})) == [8, 24]
    one = [{"name": "r", "method": "rpsft", "anchor_rank": 5}]
    given = load_config({"pretrain": {"hidden_size": 192}, "runs": one})
    assert ranks(given) == [5]


def test_yaml_presets_match_code():
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parents[3] / "configs" / "toy"
    assert {"smoke", "default"} <= set(PRESETS)
    for name in PRESETS:  # the presets are the YAML files: by name or by path, the same config
        path = root / f"{name}.yaml"
        assert "anchorft toy compare" in path.read_text().splitlines()[0]
        assert load_config(name) == load_config(str(path))
    smoke = load_config("smoke")  # the preset's own values, not the defaults
    assert smoke.pretrain.hidden_size == 32 and smoke.seeds == [0] and smoke.eval.id_items == 12
    assert [r.anchor_rank for r in smoke.runs if r.method == "rpsft"] == [2, paper_rank(32)]
    assert yaml.safe_load((root / "sweep.yaml").read_text())["preset"] == "default"


def test_every_toy_config_loads_and_names_its_command():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    for path in sorted((root / "configs" / "toy").glob("*.yaml")):
        rel = path.relative_to(root).as_posix()
        first = path.read_text().splitlines()[0]
        assert first.startswith("# ") and f"anchorft toy compare --preset {rel}" in first, rel
        cfg = load_config(str(path))
        cfg.validate()
        if path.stem.startswith("large"):  # the 2.4M testbed: its rank follows the width 192
            assert sum(p.numel() for p in _shape_params(cfg)) > 2_000_000
            assert paper_rank(cfg.pretrain.hidden_size) in [r.anchor_rank for r in cfg.runs]


def _shape_params(cfg):
    from anchorft.toy.pretrain import build_model, build_tokenizer

    tok = build_tokenizer(np.random.default_rng(0))
    return build_model(cfg.pretrain, len(tok), tok, seed=0).parameters()


@pytest.mark.parametrize("preset", ["smoke", "default"])
def test_comparison_fine_tunes_on_word_problems_with_their_answers(preset, tmp_path, monkeypatch):
    """The data a comparison job trains on (captured inside the job): the preset's id_skill, math_word, whose
    completions are the boxed answers of the prompts' word problems (recomputed here from the text)."""
    import re

    import anchorft.eval.loading
    from anchorft.studies.testbed import compare

    class Captured(Exception):
        pass

    got = []

    def spy(n, rng, *args, **kw):
        got.append((args, kw, finetune_dataset(n, rng, *args, **kw)))
        raise Captured

    monkeypatch.setattr(anchorft.eval.loading, "load_tokenizer", lambda path: None)
    monkeypatch.setattr(compare, "finetune_dataset", spy)
    cfg = load_config(preset)
    with pytest.raises(Captured):
        compare._finetune_and_evaluate(cfg, cfg.runs[0], cfg.seeds[0], tmp_path, tmp_path)
    ((args, kw, ds),) = got
    assert cfg.id_skill == "math_word" and (list(args) + list(kw.values())) == ["math_word"]
    assert ds.column_names == ["prompt", "completion"] and len(ds) == cfg.finetune_items
    word = re.compile(r"^Q:\w+ had (\d+) (\w+), (got|lost) (\d+)\. \2\?\nA:$")
    for prompt, completion in zip(ds["prompt"], ds["completion"]):
        m = word.match(prompt)
        assert m, prompt
        a, b = int(m.group(1)), int(m.group(4))
        assert completion == f"\\boxed{{{a + b if m.group(3) == 'got' else a - b}}}", prompt


def test_acceptance():
    base = {"id_greedy": 0.1, "ood_mean": 0.95}
    good = {"base": base, "methods": {"sft": {"id_greedy": 0.3, "ood_mean": 0.8}}}
    assert acceptance(good)["ok"]
    # the bars: +5 ID points (base 15 of the verdict gained +8.4), 10 OOD points lost; each at its edge
    assert acceptance({"base": base, "methods": {"sft": {"id_greedy": 0.151, "ood_mean": 0.849}}})["ok"]
    assert not acceptance({"base": base, "methods": {"sft": {"id_greedy": 0.149, "ood_mean": 0.5}}})["ok"]
    assert not acceptance({"base": base, "methods": {"sft": {"id_greedy": 0.3, "ood_mean": 0.851}}})["ok"]


def test_a_plumbing_check_says_so_first_and_is_not_judged(tmp_path, monkeypatch):
    """The smoke preset's report and plot say in their first line that it is a plumbing check, and its acceptance
    line says "not judged" whatever its numbers; a comparison of the demo's size is judged."""
    from anchorft.studies.testbed import report as rep

    assert plumbing_only(load_config("smoke")) == "60 pretraining steps, 4 fine-tuning steps"
    assert plumbing_only(load_config("demo")) is None and plumbing_only(load_config("default")) is None
    titles = []
    monkeypatch.setattr(rep, "save_figure", lambda fig, path, **kw: titles.append(fig.axes[0].get_title()))
    for why, id_greedy in (("60 pretraining steps, 4 fine-tuning steps", 0.0), (None, 0.0), (None, 0.5)):
        res = _fake_results({"sft": (id_greedy, 0.3)})
        if why:
            res["settings"]["plumbing_only"] = why
        rep.write_report(res, tmp_path / "report.md")
        text = (tmp_path / "report.md").read_text()
        first, accept = text.splitlines()[0], next(x for x in text.splitlines() if x.startswith("Acceptance"))
        rep.write_tradeoff_plot(res, tmp_path / "tradeoff.png")
        if why:
            assert first == f"# Plumbing check only (smoke preset: {why}): its numbers say nothing about the methods."
            assert titles[-1].startswith("Plumbing check only (smoke preset: 60 pretraining steps")
            assert "not judged on the smoke preset" in accept and "met" not in accept
        else:
            assert "Plumbing" not in first and not titles[-1].startswith("Plumbing")
            assert accept.endswith(": NOT met.") if id_greedy == 0.0 else accept.endswith(": met.")


def test_smoke_compare_end_to_end(tmp_path, monkeypatch, smoke_cache):
    """The whole comparison on the smoke preset (its base from the session's smoke cache)."""
    monkeypatch.setenv("ANCHORFT_CACHE", str(smoke_cache))
    torch.set_num_threads(1)
    out = tmp_path / "cmp"
    from anchorft.studies.testbed import compare

    made = []
    real = compare.executor_for
    monkeypatch.setattr(compare, "executor_for", lambda *a: made.append(a) or real(*a))
    res = run_compare("smoke", out, progress=False, workers=2)  # the process pool that `make demo` uses
    assert made[-1] == (2, load_config("smoke").threads, None)  # each fine-tune on the config's threads, locally
    for f in ("results.json", "report.md", "tradeoff.png", "config.yaml"):
        assert (out / f).is_file(), f
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["methods"]) == {"sft", "dft", "iw_sft", "l2", "rpsft-k2", "rpsft-k6"}
    assert {"anchorft", "git_commit", "git_dirty", "torch", "transformers", "trl"} <= set(saved["provenance"])
    for m in saved["methods"].values():
        for key in ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean", "train_seconds"):
            assert 0 <= m[key] and (key == "train_seconds" or m[key] <= 1)
        assert set(m["ood"]) == set(saved["base"]["ood"]) and len(m["per_seed"]) == 1
    assert res["base"]["ood"] == saved["base"]["ood"]
    # every evaluated model reloads, and fine-tuning changed the weights
    base = AutoModelForCausalLM.from_pretrained(out / "models" / "base")
    sft = AutoModelForCausalLM.from_pretrained(out / "models" / "sft")
    AutoTokenizer.from_pretrained(out / "models" / "sft")
    with torch.no_grad():
        diff = sum(float((a - b).abs().sum()) for a, b in zip(base.parameters(), sft.parameters()))
    assert diff > 0
    assert "| sft |" in (out / "report.md").read_text()
    report = (out / "report.md").read_text()
    assert report.startswith("# Plumbing check only (smoke preset: 60 pretraining steps, 4 fine-tuning steps)")
    assert "not judged on the smoke preset" in report and "NOT met" not in report


@pytest.mark.slow
def test_workers_give_the_same_results(tmp_path, monkeypatch, smoke_cache):
    """Two fine-tunes in two worker processes give what the in-process loop gives (same seeds, same numbers)."""
    monkeypatch.setenv("ANCHORFT_CACHE", str(smoke_cache))
    torch.set_num_threads(2)
    cfg = load_config({"preset": "smoke", "runs": [{"name": "sft", "method": "sft"}], "seeds": [0, 1]})
    a = run_compare(cfg, tmp_path / "a", progress=False, workers=1)
    b = run_compare(cfg, tmp_path / "b", progress=False, workers=2)
    for seed_a, seed_b in zip(a["methods"]["sft"]["per_seed"], b["methods"]["sft"]["per_seed"]):
        assert seed_a["seed"] == seed_b["seed"]
        for key in ("id_avg@k", "id_greedy", "ood_mean", "ood"):
            assert seed_a[key] == seed_b[key], key
    with pytest.raises(ValueError, match="workers"):
        run_compare(cfg, tmp_path / "c", progress=False, workers=0)


def _fake_results(methods: dict, seeds=(0,), base_ood=0.9):
    base = {"id_avg@k": 0.0, "id_pass@k": 0.0, "id_greedy": 0.0, "ood_mean": base_ood, "ood": {"reverse": base_ood}}
    settings = {"k": 4, "n_samples": 8, "temperature": 0.7, "top_p": 0.95, "id_skill": "math_add3", "id_items": 10,
                "ood_items": {"reverse": 10}, "seeds": list(seeds), "pretrained": "x"}  # fmt: skip
    out = {}
    for name, (idg, ood) in methods.items():
        m = {"id_avg@k": idg, "id_pass@k": idg, "id_greedy": idg, "ood_mean": ood, "ood": {"reverse": ood}}
        out[name] = {**m, "train_seconds": 1.0, "std": {}, "method": name.split("-")[0], "settings": {},
                     "per_seed": [{**m, "seed": s} for s in seeds]}  # fmt: skip
    return {"base": base, "methods": out, "settings": settings}


def test_merge_results_and_report_command(tmp_path):
    from anchorft.cli import main as cli
    from anchorft.studies.testbed.results import merge_results

    a = _fake_results({"sft": (0.5, 0.6), "l2": (0.2, 0.85)}, seeds=(0, 1))
    b = _fake_results({"rpsft-k4": (0.4, 0.7)}, seeds=(2,))
    merged = merge_results([a, b]).to_dict()
    assert list(merged["methods"]) == ["sft", "l2", "rpsft-k4"] and merged["settings"]["seeds"] == [0, 1, 2]
    with pytest.raises(ValueError, match="twice"):
        merge_results([a, a])
    with pytest.raises(ValueError, match="base scores"):
        merge_results([a, _fake_results({"x": (0.1, 0.1)}, base_ood=0.5)])
    # the same run at new seeds: per-seed values pooled, means recomputed (checked against numpy on the values)
    c = _fake_results({"sft": (0.2, 0.3)}, seeds=(2,))
    pooled = merge_results([a, c]).methods["sft"]
    assert [s["seed"] for s in pooled["per_seed"]] == [0, 1, 2]
    assert pooled["id_greedy"] == pytest.approx(np.mean([0.5, 0.5, 0.2]))
    assert pooled["std"]["ood_mean"] == pytest.approx(statistics.stdev([0.6, 0.6, 0.3]))  # sample std, ddof 1
    assert pooled["ood"]["reverse"] == pytest.approx(0.5)
    c["methods"]["sft"]["settings"] = {"learning_rate": 0.1}
    with pytest.raises(ValueError, match="different methods or settings"):
        merge_results([a, c])
    for name, r in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(r))
    assert (
        cli(["toy", "report", "--from", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0
    )
    text = (tmp_path / "m" / "report.md").read_text()
    assert "| rpsft-k4 |" in text and "| sft |" in text and (tmp_path / "m" / "tradeoff.png").stat().st_size > 0
    saved = json.loads((tmp_path / "m" / "results.json").read_text())
    assert set(saved["methods"]) == {"sft", "l2", "rpsft-k4"}
    assert saved["provenance"]["anchorft"] and saved["provenance"]["parts"] == [None, None]  # the parts had none
    # rerun: the same sources are reused; other sources are refused unless --overwrite
    a_b = ["toy", "report", "--from", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]
    assert cli(a_b) == 0
    assert cli([*a_b, "--pick", "opt=sft,l2"]) == 2  # --pick without --front: refused before anything is read
    only_a = ["toy", "report", "--from", str(tmp_path / "a"), "--out", str(tmp_path / "m")]
    assert cli(only_a) == 2
    assert cli([*only_a, "--overwrite"]) == 0
    assert set(json.loads((tmp_path / "m" / "results.json").read_text())["methods"]) == {"sft", "l2"}


def test_sample_std_is_ddof_one():
    """Spreads over seeds are sample standard deviations (n - 1), not population ones; one seed has none."""
    from anchorft.studies.testbed.results import sample_std

    assert sample_std([0.1, 0.4, 0.7]) == pytest.approx(statistics.stdev([0.1, 0.4, 0.7]))
    assert sample_std([0.5]) == 0.0


def test_anchor_options_sweep_and_reach_the_trainer_args(tmp_path):
    from anchorft.studies.testbed.compare import _train_args

    runs = [RunSpec("sft", "sft"), RunSpec("rpsft-k4", "rpsft", anchor_rank=4)]
    out = expand_sweeps(runs, ["anchor_kind=block,subspace"])
    assert [r.name for r in out] == ["sft", "rpsft-k4-kindblock", "rpsft-k4-kindsubspace"]
    cfg = load_config("smoke")
    run = RunSpec("r", "rpsft", anchor_rank_rule="energy:0.5", anchor_memory=5000, anchor_kind="subspace",
                  anchor_lambda_rest=0.01, anchor_layers="0")  # fmt: skip
    cfg.runs = [run]
    cfg.validate()  # a rule or a budget stands in for anchor_rank
    args = _train_args(cfg, run, 0, tmp_path)
    assert (args.anchor_rank_rule, args.anchor_memory, args.anchor_kind) == ("energy:0.5", 5000, "subspace")
    assert (args.anchor_lambda_rest, args.anchor_layers) == (0.01, "0")


def test_validation_items_are_disjoint_from_the_reported_ones():
    from anchorft.studies.testbed.compare_config import comparison_eval_sets, comparison_val_sets
    from anchorft.toy.skills import split_of

    cfg = load_config("default")
    assert comparison_val_sets(cfg) == {}  # no validation split unless asked
    cfg.eval.val_items = 50
    val, test = comparison_val_sets(cfg), comparison_eval_sets(cfg)
    assert set(val) == set(test)
    for skill, items in val.items():
        keys = [it.key for it in items]
        assert len(keys) == 50 and len(set(keys)) == 50
        assert not set(keys) & {it.key for it in test[skill]}, skill
        assert all(split_of(skill, k) == "eval" for k in keys)  # never trained on
    assert [it.key for it in comparison_val_sets(cfg)["math_word"]] == [it.key for it in val["math_word"]]
    cfg.eval.val_items = -1
    with pytest.raises(ValueError, match="val_items"):
        cfg.eval.validate()


def test_fisher_rule_runs_in_the_comparison(tmp_path, monkeypatch, smoke_cache):
    """A fisher:F run is calibrated on the base (training-split items only) and resolves its ranks from F_ood G:
    fisher:1 gives every matrix its full rank, a small F smaller ranks; the validation metrics are recorded."""
    from anchorft.eval.loading import load_tokenizer
    from anchorft.rpsft.anchor import SubspaceAnchor
    from anchorft.studies.testbed.compare import calibration_fisher
    from anchorft.toy.pretrain import pretrained_model

    monkeypatch.setenv("ANCHORFT_CACHE", str(smoke_cache))
    torch.set_num_threads(1)
    cfg = load_config({"preset": "smoke", "calibration_items": 4, "eval": {"val_items": 3}})
    base_dir = pretrained_model(cfg.pretrain, progress=False)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    tok = load_tokenizer(str(base_dir))
    run = RunSpec("f", "rpsft", anchor_rank_rule="fisher:0.3")
    fisher = calibration_fisher(cfg, run, base, tok)
    assert fisher and all(v.shape == dict(base.named_parameters())[n].shape for n, v in fisher.items())
    assert any(float(v.abs().sum()) > 0 for v in fisher.values())
    low = SubspaceAnchor.plan(base, rank="fisher:0.3", fisher=fisher).ranks
    full = SubspaceAnchor.plan(base, rank="fisher:1.0", fisher=fisher).ranks
    shapes = {n: p.shape for n, p in base.named_parameters()}
    assert all(full[n] == min(shapes[n]) for n in fisher) and sum(low.values()) < sum(full.values())
    cfg.runs = [run]
    cfg.seeds = [0]
    res = run_compare(cfg, tmp_path / "cmp", progress=False)
    assert set(res["methods"]["f"]["per_seed"][0]["val"]) == {"id_greedy", "ood_mean", "ood"}
    assert "val" in res["base"] and res["settings"]["val_items"]["math_word"] == 3


def test_report_command_front_and_pick(tmp_path):
    """`toy report --front ... --pick ...`: front.md holds the validation table and the chosen knob's row."""
    from anchorft.cli import main as cli

    r = _fake_results({"sft": (0.5, 0.5), "l2": (0.2, 0.85), "sub-a": (0.3, 0.88), "sub-b": (0.1, 0.89)}, seeds=(0, 1))
    r["base"]["val"] = {"id_greedy": 0.0, "ood_mean": 0.9}
    for name, m in r["methods"].items():
        for s in m["per_seed"]:  # on the validation items sub-b is the better knob
            s["val"] = {
                "id_greedy": {"sub-a": 0.05, "sub-b": 0.3}.get(name, m["id_greedy"]),
                "ood_mean": m["ood_mean"],
            }
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(r))
    argv = ["toy", "report", "--from", str(tmp_path / "a"), "--out", str(tmp_path / "m"), "--front", "sft", "l2"]
    assert cli([*argv, "--pick", "sub=sub-a,sub-b"]) == 0
    text = (tmp_path / "m" / "front.md").read_text()
    assert "## On the validation items" in text
    # front at retention 0.978 (sub-a): 20 - 20 * 0.6 = 8, gain 5; at 0.989 (sub-b): 20 - 20 * 0.8 = 4, gain 30
    assert "| sub | sub-a -3.0, sub-b +26.0 | sub-b |" in text
    assert (tmp_path / "m" / "tradeoff.png").stat().st_size > 0


def test_a_comparison_at_the_verdicts_settings_says_the_verdict_first():
    """The first line of a one-base report run at the verdict's lr and steps, with runs the verdict judged: the
    verdict over its bases for the options shown, then the runs above this base's front; other comparisons: none."""
    from anchorft.studies.testbed.report import verdict_headline

    res = _fake_results({"sft": (0.3, 0.3), "l2-lam0.01": (0.28, 0.85), "rpsft-k24-subspace-lam0.1": (0.3, 0.86)})
    res["settings"].update(learning_rate=1e-3, max_steps=200, pretrain_seed=0)
    summary = {
        "record": "records/verdict.json", "bases": 6, "learning_rate": 1e-3, "max_steps": 200,
        "runs": {"sft": {"settings": {}, "option": "sft", "front": True},
                 "l2-lam0.01": {"settings": {}, "option": None, "front": True},
                 "rpsft-k24-subspace-lam0.1": {"settings": {}, "option": "subspace", "front": False}},
        "options": {"sft": {"interval": "-3.3 [-5.9, -0.6]", "decided": "under"},
                    "subspace": {"interval": "+6.1 [-0.4, +12.7]", "decided": None}},
    }  # fmt: skip
    line = verdict_headline(res, summary)
    assert line.startswith("One base (pretraining seed 0); the verdict over 6 bases (records/verdict.json, its first")
    assert "below 0): sft -3.3 [-5.9, -0.6]; neither: subspace +6.1 [-0.4, +12.7]" in line
    # the subspace run: +30 at retention 0.956, a fifth of the way from l2 (0.944, +28) to the base (1, 0): 30 - 22.4
    assert line.endswith("Here, above the front of sft, l2-lam0.01: rpsft-k24-subspace-lam0.1 (+7.6, joint SE 0.0).")
    assert verdict_headline({**res, "settings": {**res["settings"], "learning_rate": 5e-4}}, summary) is None
    other = _fake_results({"sft": (0.3, 0.3), "dft": (0.1, 0.3)})
    other["settings"].update(learning_rate=1e-3, max_steps=200)
    assert verdict_headline(other, summary) is None  # dft is no run of the verdict
