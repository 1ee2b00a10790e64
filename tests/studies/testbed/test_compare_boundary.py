"""What a user of `toy compare` reads, recomputed from the per-item grades: results.json, report.md and the
items each score was computed on (scored_items.json), through the real `run_compare` call path.

Only the expensive parts are stand-ins: the base is an untrained tiny model (no pretraining), `train` returns
the model unchanged (tagged with its run and seed), and generation returns each item's exact answer or a wrong
one by a fixed coin per (model, item, sample). Everything between generation and the written files (grading by
the skills' checkers, Avg@k / Pass@k / greedy, OOD means, validation, means and spreads over seeds, the report
table) is the project's code; the expected numbers are computed here from the logged per-item grades.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from anchorft.studies.testbed.compare_config import comparison_eval_sets, comparison_val_sets, load_config
from anchorft.toy import skills as sk

WRONG = "#"  # never an answer of any skill


def _coin(tag: str, key: str, j: int, sampled: bool) -> bool:
    """A fixed pseudo-random grade, with a rate that depends on the model (so runs and seeds differ)."""
    h = int(hashlib.sha256(f"{tag}|{key}|{j}|{sampled}".encode()).hexdigest()[:8], 16) / 16**8
    rate = 0.2 + 0.6 * (int(hashlib.sha256(tag.encode()).hexdigest()[:4], 16) / 16**4)
    return h < rate


def _config(val_items: int = 3):
    return load_config(
        {
            "preset": "smoke",
            "runs": [{"name": "sft", "method": "sft"}, {"name": "l2", "method": "l2"}],
            "seeds": [0, 1, 2],
            "eval": {"n_samples": 4, "k": 2, "id_items": 9, "ood_items": 5, "val_items": val_items},
        }
    )


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """run_compare with the stand-ins above; returns (run(cfg) -> out folder, the per-item log)."""
    import anchorft.eval.pipeline as pipeline
    import anchorft.rpsft.train as train_mod
    from anchorft.studies.testbed import compare, compare_config
    from anchorft.toy.pretrain import build_model, build_tokenizer

    torch.set_num_threads(1)
    log: list[dict] = []
    phase = {"now": "reported"}

    def make_base(cfg):
        d = tmp_path / "base-model"
        if not (d / "metrics.json").is_file():
            tok = build_tokenizer(np.random.default_rng(0))
            model = build_model(cfg.pretrain, len(tok), tok, seed=0)
            model.save_pretrained(d)
            tok.save_pretrained(d)
            meta = {"params": 1, "greedy_accuracy": {"sort": 0.5}, "train_seconds": 0.0, "key": "k"}
            (d / "metrics.json").write_text(json.dumps(meta))
        return d

    items_by_prompt: dict[str, sk.Item] = {}

    def fake_generate(model, tokenizer, prompts, n=1, temperature=0.0, **kw):
        tag = getattr(model, "_anchorft_tag", "base")
        out = []
        for p in prompts:
            it = items_by_prompt[p]
            sampled = temperature > 0
            oks = [_coin(tag, it.key, j, sampled) for j in range(n)]
            log.append({"tag": tag, "phase": phase["now"], "skill": it.skill, "key": it.key, "sampled": sampled,
                        "ok": oks, "temperature": temperature, "top_p": kw.get("top_p")})  # fmt: skip
            out.append([it.answer if ok else WRONG for ok in oks])
        return out

    class _Trainer:
        def __init__(self, model):
            self.model = model

    def fake_train(args, model, data, tokenizer=None, anchor_fisher=None):
        model._anchorft_tag = Path(args.output_dir).name  # NAME-seedS
        return _Trainer(model)

    real_greedy = compare_config.evaluate_greedy

    def evaluate_greedy(*a, **k):  # the validation pass (the only caller of evaluate_greedy in a comparison)
        phase["now"] = "val"
        try:
            return real_greedy(*a, **k)
        finally:
            phase["now"] = "reported"

    monkeypatch.setattr(pipeline, "generate", fake_generate)
    monkeypatch.setattr(train_mod, "train", fake_train)
    monkeypatch.setattr(compare_config, "evaluate_greedy", evaluate_greedy)

    def run(cfg, out=None, **kw):
        monkeypatch.setattr(compare, "pretrained_model", lambda pre, progress=True: make_base(cfg))
        rng_sets = [comparison_eval_sets(cfg), comparison_val_sets(cfg)]
        for sets in rng_sets:
            for items in sets.values():
                for it in items:
                    assert items_by_prompt.setdefault(it.prompt, it).key == it.key  # prompts name their item
        out = out or tmp_path / "cmp"
        compare.run_compare(cfg, out, progress=False, **kw)
        return out

    return run, log


def _pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _expected(log: list[dict], tag: str, cfg) -> dict:
    """A model's metrics recomputed from the logged per-item grades (reported and validation items)."""
    rows = [r for r in log if r["tag"] == tag]
    rep = [r for r in rows if r["phase"] == "reported"]
    sampled = [r for r in rep if r["sampled"] and r["skill"] == cfg.id_skill]
    greedy = {}
    for r in rep:
        if not r["sampled"]:
            greedy.setdefault(r["skill"], []).append(r["ok"][0])
    ood = {s: float(np.mean(v)) for s, v in greedy.items() if s != cfg.id_skill}
    out = {
        "id_avg@k": float(np.mean([ok for r in sampled for ok in r["ok"]])),
        "id_pass@k": float(np.mean([_pass_at_k(len(r["ok"]), sum(r["ok"]), cfg.eval.k) for r in sampled])),
        "id_greedy": float(np.mean(greedy[cfg.id_skill])),
        "ood": ood,
        "ood_mean": float(np.mean(list(ood.values()))),
    }
    val = {}
    for r in rows:
        if r["phase"] == "val":
            assert not r["sampled"]
            val.setdefault(r["skill"], []).append(r["ok"][0])
    if val:
        vood = {s: float(np.mean(v)) for s, v in val.items() if s != cfg.id_skill}
        out["val"] = {"id_greedy": float(np.mean(val[cfg.id_skill])), "ood_mean": float(np.mean(list(vood.values())))}
    return out


def _table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = cells
    return head, rows


def _nums(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)]


def test_report_and_results_are_the_per_item_grades_summarised(harness):
    """Every number of results.json (per seed, mean, sample std, per skill, validation) and every cell of
    report.md (value +- spread (change against base), per skill) recomputed from the per-item grades."""
    run, log = harness
    cfg = _config()
    out = run(cfg)
    res = json.loads((out / "results.json").read_text())
    assert res["settings"]["k"] == cfg.eval.k and res["settings"]["n_samples"] == cfg.eval.n_samples
    # the sampling settings the ID pass really ran with
    sampled = [r for r in log if r["sampled"]]
    assert sampled and {(r["temperature"], r["top_p"], len(r["ok"])) for r in sampled} == {
        (cfg.eval.temperature, cfg.eval.top_p, cfg.eval.n_samples)
    }
    base = _expected(log, "base", cfg)
    for key in ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean"):
        assert res["base"][key] == pytest.approx(base[key]), key
    assert res["base"]["ood"] == pytest.approx(base["ood"])
    assert res["base"]["val"]["id_greedy"] == pytest.approx(base["val"]["id_greedy"])
    keys = ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean")
    exp_runs = {}
    for run_spec in cfg.runs:
        name = run_spec.name
        m = res["methods"][name]
        per = [_expected(log, f"{name}-seed{s}", cfg) for s in cfg.seeds]
        assert [p["seed"] for p in m["per_seed"]] == cfg.seeds
        for got, exp in zip(m["per_seed"], per):
            for key in keys:
                assert got[key] == pytest.approx(exp[key]), (name, key)
            assert got["ood"] == pytest.approx(exp["ood"])
            assert got["val"]["id_greedy"] == pytest.approx(exp["val"]["id_greedy"])
            assert got["val"]["ood_mean"] == pytest.approx(exp["val"]["ood_mean"])
        for key in keys:
            vals = [p[key] for p in per]
            assert m[key] == pytest.approx(np.mean(vals)), (name, key)
            assert m["std"][key] == pytest.approx(np.std(vals, ddof=1)), (name, key)
        for s in base["ood"]:
            assert m["ood"][s] == pytest.approx(np.mean([p["ood"][s] for p in per])), (name, s)
        assert m["val"]["ood_mean"] == pytest.approx(np.mean([p["val"]["ood_mean"] for p in per]))
        exp_runs[name] = per
    assert len({res["methods"][r.name]["id_greedy"] for r in cfg.runs}) == len(cfg.runs)  # the runs do differ

    # report.md: each cell by its column's header, recomputed from the per-seed values above
    head, rows = _table((out / "report.md").read_text())
    labels = {"ID Avg@k": "id_avg@k", "ID Pass@k": "id_pass@k", "ID greedy": "id_greedy", "OOD mean": "ood_mean"}
    assert set(labels) <= set(head) and set(base["ood"]) <= set(head)
    col = {h: i for i, h in enumerate(head)}
    for label, key in labels.items():
        assert _nums(rows["base"][col[label]]) == pytest.approx([100 * base[key]], abs=0.051)
    for name, per in exp_runs.items():
        for label, key in labels.items():
            vals = np.array([p[key] for p in per])
            mean, sd = vals.mean(), vals.std(ddof=1)
            got = _nums(rows[name][col[label]])  # "mean +- std (delta)"
            assert got == pytest.approx([100 * mean, 100 * sd, 100 * (mean - base[key])], abs=0.051), (name, label)
        for s in base["ood"]:
            mean = np.mean([p["ood"][s] for p in per])
            got = _nums(rows[name][col[s]])
            assert got == pytest.approx([100 * mean, 100 * (mean - base["ood"][s])], abs=0.051), (name, s)
        assert f"{len(cfg.seeds)} seed(s)" in rows[name][col["settings"]]


def test_scores_are_computed_on_the_recorded_items_and_validation_never_on_reported_ones(harness):
    """The items each fine-tune's scores were computed on (logged at generation) are the ones its
    scored_items.json records; its validation items are disjoint from its reported items, skill by skill, and
    every validation score in results.json comes from validation items alone."""
    run, log = harness
    cfg = _config()
    out = run(cfg)
    res = json.loads((out / "results.json").read_text())
    tags = ["base"] + [f"{r.name}-seed{s}" for r in cfg.runs for s in cfg.seeds]
    for tag in tags:
        rec = json.loads((out / "runs" / tag / "scored_items.json").read_text())
        scored: dict[str, dict[str, set]] = {"reported": {}, "val": {}}
        for r in log:
            if r["tag"] == tag:
                scored[r["phase"]].setdefault(r["skill"], set()).add(r["key"])
        for split in ("reported", "val"):
            assert {s: set(v) for s, v in rec[split].items()} == scored[split], (tag, split)
        assert scored["val"], tag
        assert set(scored["val"]) == set(scored["reported"])
        for skill, keys in scored["val"].items():
            assert not keys & scored["reported"][skill], (tag, skill)
            assert all(sk.split_of(skill, k) == "eval" for k in keys)  # never trained on
    # the validation numbers in results.json are those of the validation items
    for r in cfg.runs:
        for got, s in zip(res["methods"][r.name]["per_seed"], cfg.seeds):
            exp = _expected(log, f"{r.name}-seed{s}", cfg)["val"]
            assert got["val"]["id_greedy"] == pytest.approx(exp["id_greedy"])


def test_scored_items_hold_each_items_grades_in_the_keys_order(harness):
    """scored_items.json's per-item scores (what a paired comparison resamples) are the grades the checker gave
    each item, as logged at generation: greedy 0/1 per item for every skill, and for the ID skill the number of
    correct samples, in the order of the recorded keys, for the reported and the validation items."""
    run, log = harness
    cfg = _config()
    out = run(cfg)
    for tag in ["base"] + [f"{r.name}-seed{s}" for r in cfg.runs for s in cfg.seeds]:
        rec = json.loads((out / "runs" / tag / "scored_items.json").read_text())
        for split in ("reported", "val"):
            rows = [r for r in log if r["tag"] == tag and r["phase"] == split]
            for skill, keys in rec[split].items():
                greedy = {r["key"]: int(r["ok"][0]) for r in rows if r["skill"] == skill and not r["sampled"]}
                assert rec["scores"][split][skill]["greedy"] == [greedy[k] for k in keys], (tag, split, skill)
                sampled = {r["key"]: sum(r["ok"]) for r in rows if r["skill"] == skill and r["sampled"]}
                if sampled:
                    assert rec["scores"][split][skill]["correct"] == [sampled[k] for k in keys], (tag, skill)
                else:
                    assert "correct" not in rec["scores"][split][skill]
        assert any(sum(v["greedy"]) not in (0, len(v["greedy"])) for v in rec["scores"]["reported"].values())


def test_verdict_estimate_is_the_reports_excess_and_its_interval_pairs_the_draws(harness, tmp_path, monkeypatch):
    """The verdict study reads the per-item grades back: its excess of a run over the front equals the report's
    `front_table` excess computed from results.json's aggregates (the same comparison, another path through the
    numbers), and its bootstrap interval covers that estimate; two bases pool by Hartung-Knapp."""
    from anchorft.studies.testbed.report import front_table
    from anchorft.studies.testbed.verdict import base_verdict, pooled_verdict

    run, _ = harness
    cfg = load_config(
        {
            "preset": "smoke",
            "runs": [{"name": n, "method": m} for n, m in (("sft", "sft"), ("l2", "l2"), ("dft", "dft"))],
            "seeds": [0, 1, 2],
            "eval": {"n_samples": 4, "k": 2, "id_items": 9, "ood_items": 5, "val_items": 12},
        }
    )
    out = run(cfg, tmp_path / "a")
    res = json.loads((out / "results.json").read_text())
    table = {r["run"]: r for r in front_table(res, ["sft", "l2"])}
    got = base_verdict(out, ["dft"], ["sft", "l2"], n_boot=200, method="first")  # the report's segment front
    assert got["dft"]["estimate"] == pytest.approx(table["dft"]["excess"], abs=1e-9)
    assert got["dft"]["low"] <= got["dft"]["estimate"] <= got["dft"]["high"]
    assert got["dft"]["se"] > 0
    assert (got["dft"]["retention"], got["dft"]["gain"]) == pytest.approx((table["dft"]["retention"],
                                                                           table["dft"]["id_gain"]))  # fmt: skip
    val = base_verdict(out, ["dft"], ["sft", "l2"], split="val", n_boot=50, method="first")
    assert val["dft"]["estimate"] == pytest.approx({r["run"]: r for r in front_table(res, ["sft", "l2"], "val")}
                                                   ["dft"]["excess"], abs=1e-9)  # fmt: skip
    # a group's knob: picked on the validation items (the report's `pick_on_val` choice), scored on the reported
    from anchorft.studies.testbed.report import pick_on_val
    from anchorft.studies.testbed.verdict import base_picks

    picked = base_picks(out, {"g": ["dft", "sft"]}, ["sft", "l2"], n_boot=50, method="first")["g"]
    want = pick_on_val(res, ["sft", "l2"], {"g": ["dft", "sft"]})[0]
    assert picked["picked"] == want["run"] and picked["estimate"] == pytest.approx(want["excess"], abs=1e-9)
    assert picked["val"] == pytest.approx(want["candidates"], abs=1e-9)
    pooled = pooled_verdict([got, {"dft": {**got["dft"], "estimate": got["dft"]["estimate"] + 4.0, "gain": 0.0}}])
    assert pooled["dft"]["gain"] == pytest.approx(got["dft"]["gain"] / 2)
    assert pooled["dft"]["mean"] == pytest.approx(got["dft"]["estimate"] + 2.0)
    assert pooled["dft"]["bases"] == 2 and pooled["dft"]["df"] == 1

    # items every base shares: the same item draws on each base, so two copies of one base widen the pooled
    # interval by that base's whole items-only SE (independent draws would give it / sqrt(2))
    from anchorft.studies.testbed.verdict import shared_items_intervals

    items_only = base_verdict(out, ["dft"], ["sft", "l2"], n_boot=300, seeds=False, method="first")["dft"]
    assert 0 < items_only["se"] and items_only["estimate"] == pytest.approx(got["dft"]["estimate"])
    twice = pooled_verdict([got, got])
    shared_items_intervals(twice, [got, got], [out, out], ["sft", "l2"], n_boot=300, method="first")
    sh, p = twice["dft"]["shared_items"], twice["dft"]
    assert sh["se_items"] == pytest.approx(items_only["se"], rel=1e-12)
    assert sh["se"] == pytest.approx(np.hypot(p["se"], items_only["se"]), rel=1e-12)
    assert (sh["low"], sh["high"]) == pytest.approx((p["mean"] - p["t"] * sh["se"], p["mean"] + p["t"] * sh["se"]))
    assert sh["low"] < p["low"] and p["high"] < sh["high"]
    # a base that scored other items: nothing shared, nothing added; a run graded on other items is refused
    from anchorft.studies.testbed import verdict

    real = verdict.item_keys
    monkeypatch.setattr(verdict, "item_keys", lambda f, split: real(f, split) if f == out else {"id": ["other"]})
    apart = pooled_verdict([got, got])
    shared_items_intervals(apart, [got, got], [out, tmp_path / "b"], ["sft", "l2"], n_boot=50)
    assert "shared_items" not in apart["dft"]
    rec_path = out / "runs" / "dft-seed1" / "scored_items.json"
    rec = json.loads(rec_path.read_text())
    skill = next(iter(rec["reported"]))
    rec["reported"][skill] = rec["reported"][skill][::-1]
    rec_path.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="not the base's"):
        base_verdict(out, ["dft"], ["sft", "l2"], n_boot=10)


def _two_bases():
    """A study over bases 10 and 11: sft, l2 and dft at seeds 0 and 1."""
    return load_config(
        {
            "preset": "smoke",
            "runs": [{"name": n, "method": m} for n, m in (("sft", "sft"), ("l2", "l2"), ("dft", "dft"))],
            "seeds": [0, 1],
            "bases": [10, 11],
            "eval": {"n_samples": 4, "k": 2, "id_items": 9, "ood_items": 5, "val_items": 3},
        }
    )


def test_bases_run_one_whole_comparison_per_pretraining_seed(harness, tmp_path):
    """`bases: [10, 11]`: OUT/base-seed10 and OUT/base-seed11, each a whole comparison whose base was asked for
    with that pretraining seed, found again by `layout.base_folders` and pooled by the verdict study."""
    import yaml

    from anchorft.studies.testbed.layout import base_folders
    from anchorft.studies.testbed.verdict import base_verdict, pooled_verdict

    run, _ = harness
    asked = []
    cfg = _two_bases()
    out = run(cfg, tmp_path / "study")
    folders = base_folders(out)
    assert list(folders) == [10, 11]
    for folder in folders.values():
        saved = yaml.safe_load((folder / "config.yaml").read_text())
        asked.append(saved["pretrain"]["seed"])
        assert saved["bases"] == [] and (folder / "results.json").is_file()
    assert asked == [10, 11]
    per_base = [base_verdict(f, ["dft"], ["sft", "l2"], n_boot=50) for f in folders.values()]
    pooled = pooled_verdict(per_base, key="corrected")  # the default method, hull-bc, pools the corrected values
    assert pooled["dft"]["bases"] == 2 and pooled["dft"]["low"] <= pooled["dft"]["mean"] <= pooled["dft"]["high"]

    # the command: the study folder (its base-seedB comparisons found), the same numbers; and a pilot's power
    from anchorft.cli import main as cli

    v = tmp_path / "verdict"
    argv = ["toy", "verdict", "--from", str(out), "--runs", "dft", "--front", "sft", "l2", "--boot", "50"]
    assert cli([*argv, "--out", str(v)]) == 0
    got = json.loads((v / "verdict.json").read_text())
    assert got["pooled"]["dft"]["mean"] == pytest.approx(pooled["dft"]["mean"])
    assert "| dft |" in (v / "verdict.md").read_text() and (v / "verdict.png").is_file()
    picks = ["--pick", "g=dft,l2", "--front", "sft", "l2", "--boot", "50"]
    assert cli([*argv[:6], *picks, "--out", str(tmp_path / "p")]) == 0
    got = json.loads((tmp_path / "p" / "verdict.json").read_text())
    assert set(got["pooled"]) == {"dft", "g"} and all(b["g"]["picked"] in ("dft", "l2") for b in got["per_base"])
    assert cli(["toy", "verdict", "--from", str(out), "--power", "dft=sft", "--out", str(tmp_path / "power")]) == 0
    power = json.loads((tmp_path / "power" / "power.json").read_text())
    assert power["pilot_bases"] == 2 and set(power["components"]) == {"base", "seed", "item"}
    rows = {(r["bases"], r["seeds"]): r["detectable"] for r in power["designs"]}
    assert rows[4, 5] < rows[4, 3] and rows[8, 3] < rows[4, 3]  # more seeds or bases detect smaller effects


def test_resumed_comparison_reports_what_an_uninterrupted_one_does(harness, tmp_path):
    """Rerun matrix, toy compare: stopped after its first fine-tune, resumed with the same settings, it keeps
    that fine-tune (no new generation for it) and writes the numbers of an uninterrupted run."""
    from anchorft.studies.testbed import compare

    run, log = harness
    cfg = _config(val_items=0)
    full = json.loads((run(cfg, tmp_path / "full") / "results.json").read_text())
    stop = {"n": 0}
    real = compare._finetune_and_evaluate

    def stopping(*a, **k):
        if stop["n"] == 1:
            raise KeyboardInterrupt
        stop["n"] += 1
        return real(*a, **k)

    compare._finetune_and_evaluate = stopping
    try:
        with pytest.raises(KeyboardInterrupt):
            run(cfg, tmp_path / "part")
    finally:
        compare._finetune_and_evaluate = real
    kept = json.loads((tmp_path / "part" / "results.json").read_text())["methods"]
    assert list(kept) == ["sft"] and [p["seed"] for p in kept["sft"]["per_seed"]] == [0]
    n_log = len(log)
    run(cfg, tmp_path / "part", resume=True)
    again = {r["tag"] for r in log[n_log:]}
    assert "sft-seed0" not in again and "sft-seed1" in again  # the finished fine-tune is kept
    resumed = json.loads((tmp_path / "part" / "results.json").read_text())
    for name, m in full["methods"].items():
        for key in ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean", "ood", "std"):
            if key == "std":
                assert {k: v for k, v in m[key].items() if k != "train_seconds"} == pytest.approx(
                    {k: v for k, v in resumed["methods"][name][key].items() if k != "train_seconds"}
                )
            else:
                assert resumed["methods"][name][key] == pytest.approx(m[key]), (name, key)


def test_a_packed_study_unpacks_byte_for_byte_and_a_resumed_study_reuses_it(harness, tmp_path, capsys, monkeypatch):
    """`toy pack` / `toy unpack`: a 2-base study without its models comes back byte for byte in the files it keeps
    (grades, results, records; not the models or the fine-tunes' logs); the verdict on it is the original's; a
    resumed `toy compare` on it pretrains, generates and fine-tunes nothing and leaves its results as they were."""
    from anchorft.cli import main as cli
    from anchorft.studies.testbed.record import pack_folder, unpack_folder

    run, log = harness
    cfg = _two_bases()
    out = run(cfg, tmp_path / "study")
    (out / "base-seed10" / "runs" / "sft-seed0" / "log.jsonl").write_text("{}\n")  # a fine-tune's own log
    assert cli(["toy", "pack", "--from", str(out), "--out", str(tmp_path / "rec")]) == 0
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == [
        "base-seed10.json",
        "base-seed11.json",
        "study.json",
    ]
    assert cli(["toy", "pack", "--from", str(out), "--out", str(tmp_path / "one"), "--bases", "11"]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["base-seed11.json", "study.json"]
    assert cli(["toy", "pack", "--from", str(out), "--out", str(tmp_path / "one"), "--bases", "12"]) == 2
    assert "no base folder for [12]" in capsys.readouterr().err
    back = tmp_path / "back"
    assert cli(["toy", "unpack", "--from", str(tmp_path / "rec"), "--out", str(back)]) == 0
    kept = sorted(p.relative_to(back) for p in back.rglob("*") if p.is_file())
    assert kept and all((out / rel).read_bytes() == (back / rel).read_bytes() for rel in kept)
    assert sum(rel.name == "scored_items.json" for rel in kept) == 2 * (1 + 3 * 2)  # the base and 3 runs x 2 seeds
    assert not any("models" in rel.parts or rel.name == "log.jsonl" for rel in kept)
    assert {rel.name for rel in kept} >= {"results.json", "cells.jsonl", "config.yaml"}
    record = pack_folder(out / "base-seed10")
    assert len(record["keys"]) == 2 * 7  # item keys once per split and skill, whatever the number of runs
    grades = record["scored"]["runs/sft-seed0/scored_items.json"]["scores"]["reported"][cfg.id_skill]
    assert grades and all(isinstance(g, str) for g in grades.values())  # digit strings

    def verdict(folder, name):
        argv = ["toy", "verdict", "--from", str(folder), "--runs", "dft", "--front", "sft", "l2", "--boot", "50"]
        assert cli([*argv, "--out", str(tmp_path / name)]) == 0
        return json.loads((tmp_path / name / "verdict.json").read_text())["pooled"]

    assert verdict(back, "v-back") == verdict(out, "v-out")
    before = {rel: (back / rel).read_bytes() for rel in kept if rel.name == "results.json"}
    n_log = len(log)
    run(cfg, back, resume=True)
    assert len(log) == n_log  # nothing pretrained, generated or fine-tuned again
    assert all((back / rel).read_bytes() == b for rel, b in before.items())

    with pytest.raises(ValueError, match="exists with other content"):  # an unpack never overwrites other results
        (back / "base-seed10" / "cells.jsonl").write_text("changed\n")
        unpack_folder(record, back / "base-seed10")
    # a record names no machine: paths under the working folder become relative, under the home folder ~/
    monkeypatch.chdir(tmp_path)
    portable = pack_folder(out / "base-seed10")
    assert str(tmp_path) not in json.dumps(portable)
    assert json.loads(portable["text"]["results.json"])["settings"]["pretrained"] == "base-model"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(out)
    portable = pack_folder(out / "base-seed10")
    assert json.loads(portable["text"]["results.json"])["settings"]["pretrained"] == "~/base-model"
    bad = {**record, "text": {"../escape.txt": "x"}}
    with pytest.raises(ValueError, match="leaves the folder"):
        unpack_folder(bad, tmp_path / "elsewhere")
