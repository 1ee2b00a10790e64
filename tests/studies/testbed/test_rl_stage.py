"""The RL stage after a comparison: prompts, validation, and the smoke comparison end to end."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from anchorft.studies.testbed.compare import run_compare
from anchorft.studies.testbed.rl_stage import RLStageSettings, compare_entry, rl_prompts, run_rl_stage
from anchorft.toy import skills as sk


def test_rl_prompts_are_training_split_math_with_boxed_gold():
    skills = ("math_easy", "math_hard")
    rows = rl_prompts(skills, 21, np.random.default_rng(0))
    assert len(rows) == 21
    # no RL prompt is an evaluation-split item (the splits are disjoint by construction)
    held_out = {it.prompt for s in skills for it in sk.sample_items(s, 3000, "eval", np.random.default_rng(1))}
    assert not held_out & {r["prompt"] for r in rows}
    for r in rows:
        assert r["prompt"].startswith("Q:") and r["prompt"].endswith("\nA:")
        assert r["answer"].lstrip("-").isdigit()  # the content of the gold \boxed{}, graded by math-verify
    assert rows == rl_prompts(skills, 21, np.random.default_rng(0))  # seeded


def test_settings_validation():
    with pytest.raises(ValueError, match="prompt_skills"):
        RLStageSettings(prompt_skills=("reverse",)).validate()
    with pytest.raises(ValueError, match="steps"):
        RLStageSettings(steps=0).validate()


@pytest.fixture(scope="module")
def smoke_compare(tmp_path_factory, smoke_cache):
    tmp = tmp_path_factory.mktemp("rlstage")
    mp = pytest.MonkeyPatch()
    mp.setenv("ANCHORFT_CACHE", str(smoke_cache))
    torch.set_num_threads(1)
    out = tmp / "cmp"
    run_compare("smoke", out, methods=["sft", "rpsft-k6"], progress=False)
    yield out
    mp.undo()


def test_rl_stage_bad_input_before_work(smoke_compare, tmp_path):
    with pytest.raises(ValueError, match="methods"):
        run_rl_stage(smoke_compare, tmp_path / "x", methods=["nope"])
    with pytest.raises(ValueError, match="compare_dir"):
        run_rl_stage(tmp_path / "missing", tmp_path / "y")
    assert not (tmp_path / "x").exists()


def _digit_fraction(completion: str, answer: str) -> float:
    """A graded reward the untrained smoke model earns in part: its groups get non-zero advantages."""
    return sum(ch.isdigit() for ch in completion) / max(1, len(completion))


def test_rl_stage_end_to_end_on_smoke_comparison(smoke_compare, monkeypatch):
    import anchorft.rpsft.rl as rl

    real_run_rl = rl.run_rl
    # the smoke model never solves a problem (math reward 0 everywhere: no gradient); a graded reward makes
    # the stage's update observable
    monkeypatch.setattr(rl, "run_rl", lambda *a, **kw: real_run_rl(*a, **{**kw, "reward_fn": _digit_fraction}))
    s = RLStageSettings(steps=3, prompts_per_step=2, num_generations=4, n_prompts=16, skill_eval_items=8,
                        prompt_skills=("math_easy", "math_hard"), learning_rate=1e-3)  # fmt: skip
    res = run_rl_stage(smoke_compare, methods=None, settings=s, progress=False)  # default: sft + paper-rank rpsft
    out = smoke_compare / "rl"
    for f in ("results.json", "report.md", "reward_curve.png", "sft/metrics.json", "rpsft-k6/model/config.json"):
        assert (out / f).is_file(), f
    saved = json.loads((out / "results.json").read_text())
    assert list(saved["methods"]) == ["sft", "rpsft-k6"] == list(res["methods"])
    compare = json.loads((smoke_compare / "results.json").read_text())
    for name, m in saved["methods"].items():
        assert len(m["reward_curve"]) == 3 and all(0 <= r <= 1 for r in m["reward_curve"])
        for phase in ("before", "after"):
            e = m[phase]
            for key in ("id_avg@k", "id_pass@k", "id_greedy", "ood_mean"):
                assert 0 <= e[key] <= 1, (name, phase, key)
            assert set(e["ood"]) == set(sk.OOD_SKILLS)
            assert set(e["rl_skills_greedy"]) == {"math_easy", "math_hard"}
        # "before" is the comparison's own evaluation (same items, same sampling stream), reproduced
        for key in ("id_greedy", "id_avg@k", "id_pass@k", "ood_mean"):
            assert m["before"][key] == pytest.approx(compare["methods"][name][key], abs=1e-12), (name, key)
    # the RL model is saved and reloads
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(smoke_compare / "models" / "sft")
    b = AutoModelForCausalLM.from_pretrained(out / "sft" / "model")
    with torch.no_grad():
        diff = sum(float((x - y).abs().sum()) for x, y in zip(a.parameters(), b.parameters()))
    assert diff > 0
    report = (out / "report.md").read_text()
    assert "| sft |" in report and "| rpsft-k6 |" in report and "rpsft-k6 vs sft, OOD mean" in report
    _check_rl_stage_files(out)
    # resumed: each model is a recorded grid cell, none is trained again, the results are the same
    from anchorft.studies.testbed import rl_stage

    monkeypatch.setattr(rl_stage, "_rl_cell", lambda *a: pytest.fail("a recorded model was trained again"))
    again = run_rl_stage(smoke_compare, methods=None, settings=s, progress=False, resume=True)
    assert again["methods"] == res["methods"]


def _arrow_numbers(cell: str) -> list[float]:
    """The numbers of a report cell "12.5 -> 25.0 (+12.5)" (or "12.5 -> 25.0")."""
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)]


def _check_rl_stage_files(out) -> None:
    """report.md and results.json recomputed from the raw values written beside them: each run's per-step
    training log (NAME/trainer/log.jsonl), the per-skill OOD accuracies, and the before/after numbers."""
    saved = json.loads((out / "results.json").read_text())
    for name, m in saved["methods"].items():
        log = [json.loads(x) for x in (out / name / "trainer" / "log.jsonl").read_text().splitlines() if x.strip()]
        log = [h for h in log if "reward" in h]
        metrics = json.loads((out / name / "metrics.json").read_text())
        assert metrics["reward"] == pytest.approx([h["reward"] for h in log])
        assert metrics["reward_first"] == log[0]["reward"] and metrics["reward_last"] == log[-1]["reward"]
        assert m["reward_curve"] == pytest.approx(metrics["correctness"]) and len(m["reward_curve"]) == len(log)
        for phase in ("before", "after"):
            e = m[phase]
            assert e["ood_mean"] == pytest.approx(np.mean([e["ood"][s] for s in sk.OOD_SKILLS]))
    _check_rl_report(saved, (out / "report.md").read_text())


def _check_rl_report(saved: dict, text: str) -> None:
    """report.md's cells and verdicts recomputed from results.json's reward curves and before/after numbers."""
    ev = saved["eval"]
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = dict(zip(head, cells))
    assert list(rows) == list(saved["methods"])
    for name, m in saved["methods"].items():
        curve = np.asarray(m["reward_curve"])
        q = max(1, len(curve) // 4)
        first, last = curve[:q].mean(), curve[-q:].mean()
        assert (m["reward_first_quarter"], m["reward_last_quarter"]) == pytest.approx((first, last))
        cell = rows[name]
        assert _arrow_numbers(cell["reward first -> last quarter"]) == pytest.approx(
            [100 * first, 100 * last], abs=0.051
        )
        for key, col in (("id_greedy", "ID greedy"), ("id_avg@k", "ID avg@k"), ("ood_mean", "OOD mean")):
            b, a = m["before"][key], m["after"][key]
            got = _arrow_numbers(cell[f"{col} before -> after RL"])
            assert got == pytest.approx([100 * b, 100 * a, 100 * (a - b)], abs=0.051), (name, col)
        for s in saved["settings"]["prompt_skills"]:
            b, a = m["before"]["rl_skills_greedy"][s], m["after"]["rl_skills_greedy"][s]
            got = _arrow_numbers(cell[f"{s} greedy before -> after"])
            assert got == pytest.approx([100 * b, 100 * a, 100 * (a - b)], abs=0.051), (name, s)
    # against SFT after RL: the difference and two binomial standard errors, from the after-RL accuracies
    sft = saved["methods"]["sft"]["after"]
    for name in (n for n in saved["methods"] if n != "sft"):
        r = saved["methods"][name]["after"]
        for key, n, label in (("id_greedy", ev["id_items"], "ID greedy"),
                              ("ood_mean", sum(ev["ood_items"].values()), "OOD mean")):  # fmt: skip
            d = r[key] - sft[key]
            se2 = 2 * np.sqrt(r[key] * (1 - r[key]) / n + sft[key] * (1 - sft[key]) / n)
            line = next(ln for ln in text.splitlines() if ln.startswith(f"- {name} vs sft, {label}:"))
            assert _arrow_numbers(line) == pytest.approx([100 * d, 100 * se2], abs=0.051), line
            verdict = "higher" if d > se2 else "lower" if d < -se2 else "within noise"
            assert line.endswith(f": {verdict}"), line


def test_compare_entry_addresses_each_fine_tuning_seed():
    rows = [{"seed": s, "id_greedy": 0.1 * (s + 1)} for s in (0, 1, 2)]
    results = {"base": {"id_greedy": 0.5}, "methods": {"sft": {"id_greedy": 0.2, "per_seed": rows}}}
    assert compare_entry(results, "sft", 0) is rows[0]  # models/sft is the first seed, not the mean over seeds
    assert compare_entry(results, "sft-seed2", 0) is rows[2]
    assert compare_entry(results, "base", 0) == {"id_greedy": 0.5}
    assert compare_entry(results, "sft-seed5", 0) is None and compare_entry(results, "l2-seed1", 0) is None


def test_rl_stage_starts_from_a_later_fine_tuning_seed(smoke_compare, tmp_path):
    import shutil

    # a comparison with a second fine-tuning seed of sft (models/sft-seed1), as `toy compare` writes it
    cmp = tmp_path / "cmp"
    shutil.copytree(smoke_compare, cmp, ignore=shutil.ignore_patterns("rl"))
    shutil.copytree(cmp / "models" / "sft", cmp / "models" / "sft-seed1")
    results = json.loads((cmp / "results.json").read_text())
    row = results["methods"]["sft"]
    row["per_seed"] = [*row["per_seed"], {**row["per_seed"][0], "seed": 1, "id_greedy": -1.0}]
    (cmp / "results.json").write_text(json.dumps(results))
    s = RLStageSettings(steps=1, prompts_per_step=2, num_generations=2, n_prompts=4, skill_eval_items=0,
                        prompt_skills=("math_easy",), save_models=False)  # fmt: skip
    res = run_rl_stage(cmp, tmp_path / "rl", methods=["sft-seed1"], settings=s, progress=False)
    assert list(res["methods"]) == ["sft-seed1"]
    assert res["methods"]["sft-seed1"]["in_compare"]["id_greedy"] == -1.0  # that seed's row of the comparison
    with pytest.raises(ValueError, match="sft-seed2"):
        run_rl_stage(cmp, tmp_path / "rl2", methods=["sft-seed2"], settings=s, progress=False)


def test_cli_main_rl_validates(tmp_path):
    from anchorft.commands.toy_rl import main_rl

    with pytest.raises(ValueError, match="--compare: .*results.json missing"):
        main_rl(["--compare", str(tmp_path / "none"), "--steps", "2"])
    with pytest.raises(ValueError, match="steps"):
        main_rl(["--compare", str(tmp_path / "none"), "--steps", "0"])


def test_rl_stage_passes_the_anchor_to_dapo():
    s = RLStageSettings(anchor_method="rpsft", anchor_rank=12, anchor_lambda=0.5, anchor_kind="subspace")
    s.validate()
    d = s.rl_settings()
    assert (d.anchor_method, d.anchor_rank, d.anchor_lambda, d.anchor_kind) == ("rpsft", 12, 0.5, "subspace")
    assert d.anchor_reference == "start"  # W_0 = each SFT model the stage starts from
    with pytest.raises(ValueError, match="anchor_kind"):
        RLStageSettings(anchor_method="rpsft", anchor_kind="rows").validate()


def test_rl_report_cells_are_the_results_numbers(tmp_path):
    """The report of distinct made-up numbers (the smoke models score 0 on most columns, where a swapped
    column would not show): every cell and verdict recomputed from the results."""
    from anchorft.studies.testbed.rl_stage import write_rl_report

    rng = np.random.default_rng(0)
    skills = ["math_easy", "math_hard"]

    def phase():
        e = {k: float(rng.uniform(0.05, 0.95)) for k in ("id_greedy", "id_avg@k", "id_pass@k")}
        e["ood"] = {s: float(rng.uniform(0.05, 0.95)) for s in sk.OOD_SKILLS}
        e["ood_mean"] = float(np.mean(list(e["ood"].values())))
        e["rl_skills_greedy"] = {s: float(rng.uniform(0.05, 0.95)) for s in skills}
        return e

    methods = {}
    for name in ("sft", "rpsft-k6", "l2"):
        curve = rng.uniform(0, 1, 9).tolist()
        methods[name] = {"before": phase(), "after": phase(), "reward_curve": curve,
                         "reward_first_quarter": float(np.mean(curve[:2])),
                         "reward_last_quarter": float(np.mean(curve[-2:]))}  # fmt: skip
    methods["l2"]["after"]["id_greedy"] = methods["sft"]["after"]["id_greedy"] + 0.004  # within noise
    saved = {
        "compare_dir": "cmp",
        "settings": {"prompt_skills": skills, "steps": 9, "learning_rate": 1e-3, "prompts_per_step": 2,
                     "num_generations": 4},
        "eval": {"id_skill": "math_hard", "n_samples": 4, "k": 4, "id_items": 200,
                 "ood_items": {s: 50 for s in sk.OOD_SKILLS}},
        "methods": methods,
    }  # fmt: skip
    write_rl_report(saved, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    _check_rl_report(saved, text)
    assert "l2 vs sft, ID greedy" in text and "within noise" in text
