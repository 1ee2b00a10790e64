"""The statistics the verdict and the power table print, against computations written here: the pooled excess
(what each base's bootstrap hands to Hartung-Knapp) against statsmodels' meta-analysis; each run's interval
against the same run judged with other runs, in another order, or with the bases in another order; the
shared-items interval on three bases against its definition recomputed from explicit item draws, and the rule that
adds it only when every base scored the same items; the power table's components and detectable effects against
a nested ANOVA and the t quantiles.

The comparisons are small folders written here in the layout `anchorft toy compare` leaves (results.json and
each model's scored_items.json): an ID skill and two OOD skills, three seeds, 0/1 grades drawn per run and base."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from anchorft.studies.testbed import verdict as v

EXACT = {"rel": 1e-12, "abs": 1e-12}
SEEDS = (0, 1, 2)
SIZES = {"add": 14, "mul": 10, "cmp": 8}  # "add" is the ID skill (the set "id" in the scores)
FRONT = ["sft", "l2"]
# (ID, OOD) probability of a correct greedy answer per run
RATES = {"base": (0.3, 0.8), "sft": (0.8, 0.45), "l2": (0.6, 0.7), "a": (0.72, 0.66), "b": (0.78, 0.5),
         "c": (0.5, 0.76)}  # fmt: skip


def _keys(tag: str) -> dict[str, list[str]]:
    """Item keys per skill; bases with the same `tag` scored the same items."""
    return {skill: [f"{skill}-{tag}-{i}" for i in range(n)] for skill, n in SIZES.items()}


def _comparison(folder: Path, rng: np.random.Generator, tag: str = "shared", shift=0.0, seed_sd=0.05) -> dict:
    """A comparison of the runs of RATES on one base, written to `folder`; returns its reported grades
    {run: {set: (seeds, items)}} as the verdict reads them ("add" as "id"). `shift` moves every fine-tune's ID rate
    (a base that fine-tunes better), or, a mapping, those of the runs it names; `seed_sd`: the SD of the seeds'
    rates around the run's."""
    grades: dict[str, dict[str, np.ndarray]] = {}
    keys = {split: _keys(f"{tag}-{split}") for split in ("reported", "val")}
    for run, (p_id, p_ood) in RATES.items():
        rows = 1 if run == "base" else len(SEEDS)
        recs = [{"reported": keys["reported"], "val": keys["val"], "scores": {}} for _ in range(rows)]
        for split in ("reported", "val"):
            for skill, n in SIZES.items():
                up = shift.get(run, 0.0) if isinstance(shift, dict) else (0.0 if run == "base" else shift)
                p = np.clip(p_id + up if skill == "add" else p_ood, 0.02, 0.98)
                seed_p = np.clip(p + rng.normal(0, seed_sd, (rows, 1)), 0.01, 0.99)  # seeds differ a little
                g = (rng.random((rows, n)) < seed_p).astype(int)
                for r, rec in enumerate(recs):
                    rec["scores"].setdefault(split, {})[skill] = {"greedy": g[r].tolist()}
                if split == "reported":
                    grades.setdefault(run, {})["id" if skill == "add" else skill] = g.astype(float)
        names = ["base"] if run == "base" else [f"{run}-seed{s}" for s in SEEDS]
        for name, rec in zip(names, recs):
            (folder / "runs" / name).mkdir(parents=True)
            (folder / "runs" / name / "scored_items.json").write_text(json.dumps(rec))
    settings = {"id_skill": "add", "seeds": list(SEEDS)}
    methods = {r: {"method": "sft"} for r in RATES if r != "base"}
    (folder / "results.json").write_text(json.dumps({"settings": settings, "base": {}, "methods": methods}))
    return grades


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> tuple[list[Path], list[dict]]:
    """Three comparisons that scored the same items, bases apart by their ID rates."""
    root = tmp_path_factory.mktemp("verdict")
    rng = np.random.default_rng(2024)
    folders = [root / f"base-seed{b}" for b in (10, 11, 12)]
    grades = [_comparison(f, rng, shift=s) for f, s in zip(folders, (-0.05, 0.0, 0.08))]
    return folders, grades


def _combine(y, var):
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    with np.errstate(invalid="ignore"):
        return meta.combine_effects(np.asarray(y, dtype=float), np.asarray(var, dtype=float), method_re="dl")


def test_pooled_verdict_hands_each_bases_bootstrap_variance_to_hartung_knapp():
    """Per-base rows as `base_verdict` writes them, bootstrap SEs unequal: the pooled mean and interval are
    statsmodels' DerSimonian-Laird random-effects mean with the Hartung-Knapp variance (its WLS scale, floored at
    1), the variances being the SEs squared; the bases above 0 counted, retention and gain their means."""
    est = {"x": [0.8, -1.8, -3.0, 3.5], "y": [4.0, -2.0, 0.5, 1.0]}
    ses = {"x": [0.84, 0.31, 0.85, 2.31], "y": [0.45, 0.45, 2.2, 0.3]}
    row = {"low": -99.0, "high": 99.0}  # the per-base intervals take no part in the pooling
    per_base = [
        {r: {**row, "estimate": est[r][j], "se": ses[r][j], "retention": 0.9 + j / 100, "gain": 10.0 * j} for r in est}
        for j in range(4)
    ]
    pooled = v.pooled_verdict(per_base, level=0.9)
    scales = set()
    for r in est:
        ref = _combine(est[r], np.square(ses[r]))
        assert ref.tau2 > 0  # the bases disagree: the random-effects weights differ from 1 / v
        scales.add(ref.scale_hksj_re > 1)
        se = np.sqrt(max(1.0, ref.scale_hksj_re) * ref.var_eff_w_re)
        t = stats.t.isf(0.05, 3)
        p = pooled[r]
        assert p["mean"] == pytest.approx(ref.mean_effect_re, **EXACT)
        assert p["se"] == pytest.approx(se, **EXACT) and p["tau2"] == pytest.approx(ref.tau2, **EXACT)
        assert (p["low"], p["high"]) == pytest.approx((p["mean"] - t * se, p["mean"] + t * se), **EXACT)
        assert p["df"] == 3 and p["bases"] == 4 and p["per_base"] == est[r]
        assert p["above"] == sum(e > 0 for e in est[r])
        assert p["retention"] == pytest.approx(0.915, **EXACT) and p["gain"] == pytest.approx(15.0, **EXACT)
    assert scales == {True, False}  # one run with the floor active, one without


def _pooled(folders, runs, n_boot=120, seed=3, level=0.95):
    per_base = [v.base_verdict(f, runs, FRONT, n_boot=n_boot, seed=seed) for f in folders]
    return per_base, v.pooled_verdict(per_base, level)


def test_a_runs_interval_is_the_same_whatever_else_is_judged_and_in_whatever_order(bases):
    """Run "a" judged alone, with the others, in another order: each base's bootstrap (estimate, SE, interval,
    every replicate) and the pooled interval are identical, not merely close; bases listed in reverse give the
    same pooled interval (to rounding) and per-base rows in reverse. A knob group that picks "a" reports it as
    judging it does."""
    folders, _ = bases
    alone_pb, alone = _pooled(folders, ["a"])
    for runs in (["a", "b", "c"], ["c", "b", "a"], ["b", "a"]):
        per_base, pooled = _pooled(folders, runs)
        assert [b["a"] for b in per_base] == [b["a"] for b in alone_pb], runs
        assert pooled["a"] == alone["a"], runs
    kept = [v.base_verdict(f, ["c", "a"], FRONT, n_boot=120, seed=3, keep=True)["a"]["values"] for f in folders]
    again = [v.base_verdict(f, ["a"], FRONT, n_boot=120, seed=3, keep=True)["a"]["values"] for f in folders]
    assert all(np.array_equal(x, y) for x, y in zip(kept, again))
    rev_pb, rev = _pooled(folders[::-1], ["b", "a"])
    assert [b["a"] for b in rev_pb] == [b["a"] for b in alone_pb][::-1]
    assert {k: rev["a"][k] for k in ("mean", "se", "low", "high", "tau2")} == pytest.approx(
        {k: alone["a"][k] for k in ("mean", "se", "low", "high", "tau2")}, **EXACT
    )
    picked = v.base_picks(folders[0], {"g": ["a"], "h": ["b", "c"]}, FRONT, n_boot=120, seed=3)
    assert {k: picked["g"][k] for k in alone_pb[0]["a"]} == alone_pb[0]["a"]
    other_seed = v.base_verdict(folders[0], ["a"], FRONT, n_boot=120, seed=4)["a"]
    assert other_seed["se"] != alone_pb[0]["a"]["se"]  # the draws are the seed's: it is what the interval depends on


def test_run_verdicts_rows_do_not_depend_on_the_other_runs(bases, tmp_path, monkeypatch):
    """The whole verdict (`run_verdict`, shared-items interval included): run "a"'s pooled row, per-base rows and
    shared-items interval are the same judged alone or after two others."""
    monkeypatch.setattr(v, "write_forest_plot", lambda verdict, path: None)  # the plot is tested elsewhere
    folders, _ = bases
    alone = v.run_verdict(folders, ["a"], FRONT, tmp_path / "alone", n_boot=80, seed=5)
    many = v.run_verdict(folders, ["c", "b", "a"], FRONT, tmp_path / "many", n_boot=80, seed=5)
    assert "shared_items" in alone["pooled"]["a"]
    assert many["pooled"]["a"] == alone["pooled"]["a"]
    assert [b["a"] for b in many["per_base"]] == [b["a"] for b in alone["per_base"]]


def _items_only_replicates(grades: dict, run: str, n_boot: int, seed: int) -> np.ndarray:
    """The excess of `run` over the front in each replicate of an items-only bootstrap recomputed here: a generator
    seeded `seed` draws, for each item set in name order, n_boot rows of item indices with replacement; every
    seed kept; the same draws for every run and the base."""
    rng = np.random.default_rng(seed)
    sizes = {name: a.shape[1] for name, a in grades["base"].items()}
    draws = {name: rng.integers(0, n, size=(n_boot, n)) for name, n in sorted(sizes.items())}
    statistic = v.excess_statistic(run, FRONT)
    methods = ("base", run, *FRONT)
    out = []
    for b in range(n_boot):
        means = {m: {name: float(grades[m][name][:, draws[name][b]].mean()) for name in sizes} for m in methods}
        out.append(statistic(means))
    return np.array(out)


def test_shared_items_interval_on_three_bases_is_its_definition(bases):
    """Three bases that scored the same items: se_items is the SD (ddof 1), over the same item draws on every
    base, of the three bases' mean excess, recomputed here from explicit draws; the interval is the pooled mean
    +- t_{2} sqrt(SE_HK^2 + se_items^2); each base's estimate is the excess on its own grades."""
    folders, grades = bases
    n_boot, seed = 150, 7
    per_base, pooled = _pooled(folders, ["a", "b"], n_boot=n_boot, seed=seed)
    v.shared_items_intervals(pooled, per_base, folders, FRONT, n_boot=n_boot, seed=seed)
    t = stats.t.isf(0.025, 2)
    for run in ("a", "b"):
        reps = np.stack([_items_only_replicates(g, run, n_boot, seed) for g in grades])  # (bases, replicates)
        for j, g in enumerate(grades):  # the draws' estimate is each base's own
            full = {m: {s: float(a.mean()) for s, a in sets.items()} for m, sets in g.items()}
            assert per_base[j][run]["estimate"] == pytest.approx(v.excess_statistic(run, FRONT)(full), **EXACT)
        se_items = reps.mean(axis=0).std(ddof=1)
        p, sh = pooled[run], pooled[run]["shared_items"]
        assert sh["se_items"] == pytest.approx(se_items, **EXACT)
        se = np.sqrt(p["se"] ** 2 + se_items**2)
        assert sh["se"] == pytest.approx(se, **EXACT)
        assert (sh["low"], sh["high"]) == pytest.approx((p["mean"] - t * se, p["mean"] + t * se), **EXACT)
        assert sh["p"] == pytest.approx(2 * stats.t.sf(abs(p["mean"]) / se, 2), **EXACT)
    # the bias-corrected rows (the default method's): the same items' SE, the interval widened by the bias bound
    corrected = v.pooled_verdict(per_base, key="corrected")
    v.shared_items_intervals(corrected, per_base, folders, FRONT, n_boot=n_boot, seed=seed)
    for run in ("a", "b"):
        p, sh = corrected[run], corrected[run]["shared_items"]
        assert sh["se_items"] == pytest.approx(pooled[run]["shared_items"]["se_items"], **EXACT)
        se, bound = np.sqrt(p["se"] ** 2 + sh["se_items"] ** 2), p["bias_bound"]
        assert bound > 0 and sh["se"] == pytest.approx(se, **EXACT)
        assert (sh["low"], sh["high"]) == pytest.approx((p["mean"] - t * se - bound, p["mean"] + t * se + bound))
        want = 1.0 if abs(p["mean"]) <= bound else 2 * stats.t.sf((abs(p["mean"]) - bound) / se, 2)
        assert sh["p"] == pytest.approx(want, **EXACT)
    # two bases are enough to share items
    per_base, two = _pooled(folders[:2], ["a"], n_boot=40)
    v.shared_items_intervals(two, per_base, folders[:2], FRONT, n_boot=40)
    assert "shared_items" in two["a"]


@pytest.mark.parametrize(
    "tags",
    [
        ("p", "p", "q"),  # the first two share, the third not
        ("q", "p", "p"),  # the last two share, the first not (not only the first base compared)
        ("p", "q", "p"),  # the outer two share
        ("p", "q", "r"),  # none share
        ("p", "p", "q", "q"),  # two pairs
    ],
)
def test_shared_items_interval_is_added_only_when_every_base_scored_the_same_items(tmp_path, tags):
    """Mixed item sets on three and four bases: some bases share their items, some not; the rule (the docstring:
    nothing added when the bases' items differ) adds the shared-items interval only when all of them scored the
    same items, and leaves the Hartung-Knapp row untouched otherwise; as many bases all on one item set get it."""
    rng = np.random.default_rng(len(tags))
    mixed = [tmp_path / f"m{j}" for j in range(len(tags))]
    for f, tag in zip(mixed, tags):
        _comparison(f, rng, tag=tag)
    per_base, pooled = _pooled(mixed, ["a"], n_boot=40)
    before = {k: dict(p) for k, p in pooled.items()}
    v.shared_items_intervals(pooled, per_base, mixed, FRONT, n_boot=40)
    assert pooled == before
    alike = [tmp_path / f"s{j}" for j in range(len(tags))]
    for f in alike:
        _comparison(f, rng, tag="p")
    per_base, pooled = _pooled(alike, ["a"], n_boot=40)
    v.shared_items_intervals(pooled, per_base, alike, FRONT, n_boot=40)
    assert pooled["a"]["shared_items"]["se"] > pooled["a"]["se"]


def _nested_anova(d) -> dict[str, float]:
    """Components of a balanced bases x seeds x items design by statsmodels' type I ANOVA of y ~ base + base:seed,
    the expected mean squares solved, negative solutions set to 0."""
    smf = pytest.importorskip("statsmodels.formula.api")
    from statsmodels.stats.anova import anova_lm

    pd = pytest.importorskip("pandas")
    b, s, i = d.shape
    base, seed, _ = np.meshgrid(range(b), range(s), range(i), indexing="ij")
    frame = pd.DataFrame({"y": d.ravel(), "base": base.ravel(), "seed": seed.ravel()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms_base, ms_seed, ms_item = anova_lm(smf.ols("y ~ C(base) + C(base):C(seed)", frame).fit(), typ=1)["mean_sq"]
    return {"base": max(0.0, (ms_base - ms_seed) / (s * i)), "seed": max(0.0, (ms_seed - ms_item) / i),
            "item": ms_item}  # fmt: skip


def test_power_table_components_and_detectable_effects(tmp_path):
    """A pilot of four bases (their ID rates for "a" well apart) and three seeds (theirs apart too): the components
    of the per-item ID difference a - sft in points are the nested ANOVA's of the grades written; each design's
    detectable effect is (t_{0.975, B-1} + t_{0.8, B-1}) x sqrt(base / B + seed / (B S) + item / (B S I)) at the
    pilot's ID item count, or at `items` when given; more bases or seeds detect smaller effects."""
    rng = np.random.default_rng(8)
    folders = [tmp_path / f"base-seed{b}" for b in range(4)]
    grades = [_comparison(f, rng, shift={"a": s}, seed_sd=0.2) for f, s in zip(folders, (-0.3, -0.1, 0.1, 0.25))]
    d = np.stack([100.0 * (g["a"]["id"] - g["sft"]["id"]) for g in grades])
    want = _nested_anova(d)
    low, mid, high = sorted(want.values())
    assert 0 < 1.2 * low < mid and 1.2 * mid < high  # the design: one component in another's slot would show
    table = v.power_table([tmp_path], "a", "sft", bases=(4, 6, 8), seeds=(3, 5))
    assert table["pilot_bases"] == 4 and table["components"] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert (table["run"], table["reference"]) == ("a", "sft")
    for items in (None, 50):
        rows = table if items is None else v.power_table(folders, "a", "sft", bases=(4, 8), seeds=(2,), items=50)
        n = items or SIZES["add"]
        got = {(r["bases"], r["seeds"]): r for r in rows["designs"]}
        for (b, s), row in got.items():
            se = np.sqrt(want["base"] / b + want["seed"] / (b * s) + want["item"] / (b * s * n))
            factor = stats.t.ppf(0.975, b - 1) + stats.t.ppf(0.8, b - 1)
            assert row["items"] == n and row["detectable"] == pytest.approx(factor * se, rel=1e-9)
    rows = {(r["bases"], r["seeds"]): r["detectable"] for r in table["designs"]}
    assert rows[(8, 5)] < rows[(6, 5)] < rows[(4, 5)] < rows[(4, 3)]


def test_a_groups_replicates_pick_on_the_validation_draws_and_score_the_reported_ones(tmp_path):
    """Each replicate draws the seeds, then the reported items of each set, then the validation items (the same
    draws for every run), picks the candidate with the largest validation excess and scores its reported excess."""
    rng = np.random.default_rng(12)
    _comparison(tmp_path, rng)
    n_boot, seed, group = 40, 3, ["a", "b", "c"]
    row = v.base_picks(tmp_path, {"g": group}, FRONT, n_boot=n_boot, seed=seed)["g"]
    runs = ("base", *group, *FRONT)
    rep = v.load_scores(tmp_path, [*group, *FRONT], "reported")
    val = v.load_scores(tmp_path, [*group, *FRONT], "val")
    draw = np.random.default_rng(seed)
    seeds = draw.integers(0, 3, size=(n_boot, 3))
    items = {name: draw.integers(0, a.shape[1], size=(n_boot, a.shape[1])) for name, a in sorted(rep["base"].items())}
    vitems = {name: draw.integers(0, a.shape[1], size=(n_boot, a.shape[1])) for name, a in sorted(val["base"].items())}

    def means(scores, idx, b):
        out = {}
        for m in runs:
            s = seeds[b] if scores[m]["id"].shape[0] > 1 else [0]
            out[m] = {name: float(a[s][:, idx[name][b]].mean()) for name, a in scores[m].items()}
        return out

    values, picks = [], []
    for b in range(n_boot):
        vm, rm = means(val, vitems, b), means(rep, items, b)
        best = max(group, key=lambda c: v.excess_statistic(c, FRONT)(vm))
        picks.append(best)
        values.append(v.excess_statistic(best, FRONT)(rm))
    full_val = {m: {s: float(a.mean()) for s, a in val[m].items()} for m in runs}
    full_rep = {m: {s: float(a.mean()) for s, a in rep[m].items()} for m in runs}
    picked = max(group, key=lambda c: v.excess_statistic(c, FRONT)(full_val))
    assert row["picked"] == picked
    assert row["estimate"] == pytest.approx(v.excess_statistic(picked, FRONT)(full_rep), abs=1e-12)
    assert row["se"] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    assert row["bias"] == pytest.approx(np.mean(values) - row["estimate"], abs=1e-12)
    assert row["pick_share"] == picks.count(picked) / n_boot
    assert 0 < row["pick_share"] < 1  # the pick does vary between replicates here


def test_a_run_more_retentive_than_every_front_run_is_flagged_past_the_front(bases):
    """past_front: the run's retention (its OOD mean over the base's, from the grades) above every front run's."""
    folders, grades = bases

    def keep(g, run):
        ood = [s for s in g["base"] if s != "id"]
        return np.mean([g[run][s].mean() for s in ood]) / np.mean([g["base"][s].mean() for s in ood])

    for f, g in zip(folders, grades):
        rows = v.base_verdict(f, ["a", "c"], FRONT, n_boot=20)
        for run in ("a", "c"):
            assert rows[run]["past_front"] == (keep(g, run) > max(keep(g, r) for r in FRONT))
    assert any(v.base_verdict(f, ["c"], FRONT, n_boot=20)["c"]["past_front"] for f in folders)


def test_toy_verdict_prints_the_confirmatory_row_and_the_holm_table(bases, tmp_path, capsys, monkeypatch):
    """The command's output ends with the decision: the confirmatory row against the SESOI, then every row with its
    Holm-adjusted p, as `decision.decide` gives them on the pooled rows the verdict wrote."""
    from anchorft.cli import main as cli

    monkeypatch.setattr(v, "write_forest_plot", lambda verdict, path: None)  # the plot is tested elsewhere
    folders, _ = bases
    argv = ["toy", "verdict", "--from", *map(str, folders), "--runs", "a", "b", "--front", *FRONT, "--boot", "40",
            "--confirm", "a", "--sesoi", "3", "--out", str(tmp_path / "v")]  # fmt: skip
    assert cli(argv) == 0
    out = capsys.readouterr().out
    verdict = json.loads((tmp_path / "v" / "verdict.json").read_text())
    d = verdict["decision"]
    assert d["confirmatory"]["row"] == "a" and d["confirmatory"]["sesoi"] == 3.0
    assert f"**{d['confirmatory']['outcome']}**" in out and "Holm-adjusted over 2" in out
    for row in ("a", "b"):
        assert f"| {row} | {d['rows'][row]['mean']:+.1f} |" in out and f"{d['rows'][row]['p_holm']:.3f}" in out


def test_run_verdict_hands_its_settings_to_every_base_and_to_the_decision(bases, tmp_path, monkeypatch):
    """`run_verdict` with knob groups, a level, a method, a seed and a confirmatory row: each base's rows are what
    `base_verdict` / `base_picks` give with those settings, the pooled rows `pooled_verdict`'s of the method's
    estimate, the decision `decide`'s at that level, and the files it writes hold the verdict."""
    from anchorft.studies.testbed.decision import decide

    drawn = []
    monkeypatch.setattr(v, "write_forest_plot", lambda verdict, path: drawn.append(path))
    folders, _ = bases
    picks = {"g": ["a", "c"]}
    kw = dict(n_boot=60, seed=7, level=0.9)
    for method, key in (("hull-bc", "corrected"), ("first", "estimate")):
        out = tmp_path / method
        got = v.run_verdict(folders, ["b"], FRONT, out, picks=picks, method=method, confirm="g", sesoi=4.0, **kw)
        for f, row in zip(folders, got["per_base"]):
            assert row["b"] == v.base_verdict(f, ["b"], FRONT, "reported", 60, 7, (), method=method, level=0.9)["b"]
            assert row["g"] == v.base_picks(f, picks, FRONT, 60, 7, (), method, 0.9)["g"]
        pooled = v.pooled_verdict(got["per_base"], 0.9, key)
        v.shared_items_intervals(pooled, got["per_base"], folders, FRONT, "reported", 60, 7, (), method)
        for r in ("b", "g"):
            assert got["pooled"][r] == pooled[r] and "shared_items" in pooled[r]
        assert got["decision"] == decide(got["pooled"], "g", 4.0, 0.9)
        assert (got["method"], got["picks"], got["level"], got["replicates"]) == (method, {"g": ["a", "c"]}, 0.9, 60)
        assert got["bases"] == [str(f) for f in folders] and got["front"] == FRONT
        assert json.loads((out / "verdict.json").read_text()) == json.loads(json.dumps(got))
        assert (out / "verdict.md").read_text() == v.verdict_markdown(got) and drawn[-1] == out / "verdict.png"


def test_run_verdict_refuses_its_bad_settings_in_one_line(bases, tmp_path):
    folders, _ = bases
    cases = [
        (dict(picks={"g": ["a"]}, split="val"),
         "--pick: the knobs are chosen on the validation items and scored on the reported ones"),
        (dict(picks={"b": ["a"]}), "--pick: group names ['b'] are also judged runs"),
        (dict(picks={"g": ["a"]}, confirm="x"), "--confirm x: not a judged run or --pick group (['b', 'g'])"),
    ]  # fmt: skip
    for kw, msg in cases:
        with pytest.raises(ValueError) as e:
            v.run_verdict(folders, ["b"], FRONT, tmp_path / "x", n_boot=10, **kw)
        assert str(e.value) == msg


def _retention(g: dict, run: str) -> float:
    ood = [s for s in g["base"] if s != "id"]
    return float(np.mean([g[run][s].mean() for s in ood]) / np.mean([g["base"][s].mean() for s in ood]))


def test_past_the_front_means_beyond_every_other_front_run_strictly(bases, tmp_path):
    """ "past_front": the run's retention above the largest retention of the front's other runs (a front run is
    judged against the others), strictly: a run with the grades of the most retentive front run is not past it."""
    import shutil

    folders, grades = bases
    g = grades[0]
    rows = v.base_verdict(folders[0], ["l2", "a", "c"], FRONT, n_boot=10)
    assert rows["l2"]["past_front"] == (_retention(g, "l2") > _retention(g, "sft"))  # l2 against sft alone
    for r in ("a", "c"):
        assert rows[r]["past_front"] == (_retention(g, r) > max(_retention(g, f) for f in FRONT)), r
    assert rows["l2"]["past_front"] and rows["c"]["past_front"] != rows["a"]["past_front"]  # both outcomes seen
    picked = v.base_picks(folders[0], {"g": ["c"]}, FRONT, n_boot=10)["g"]
    assert picked["past_front"] == rows["c"]["past_front"] and picked["picked"] == "c"
    tie = tmp_path / "tie"
    shutil.copytree(folders[0], tie)
    top = max(FRONT, key=lambda f: _retention(g, f))
    for s in SEEDS:  # run "a" given the most retentive front run's grades: the same retention, not past it
        shutil.copy(tie / "runs" / f"{top}-seed{s}" / "scored_items.json", tie / "runs" / f"a-seed{s}")
    assert v.base_verdict(tie, ["a"], FRONT, n_boot=10)["a"]["past_front"] is False


def test_runs_of_a_folder_inside_the_comparison_are_judged_as_its_own(bases, tmp_path):
    """`also`: a run the comparison lacks is read from its folder `also` (WiSE-FT's, `toy interpolate --out
    COMPARE/wise`); a missing folder or run is named in one line."""
    import shutil

    folders, _ = bases
    f = tmp_path / "base"
    shutil.copytree(folders[0], f)
    wise = f / "wise"
    for s in SEEDS:
        (wise / "runs" / f"w-seed{s}").mkdir(parents=True)
        shutil.copy(f / "runs" / f"a-seed{s}" / "scored_items.json", wise / "runs" / f"w-seed{s}")
    (wise / "results.json").write_text(json.dumps({"settings": {}, "base": {}, "methods": {"w": {}}}))
    got = v.base_verdict(f, ["w", "a"], FRONT, n_boot=30, seed=2, also=["wise"])
    assert got["w"] == got["a"]  # the same grades, the same draws
    (wise / "results.json").write_text(json.dumps({"settings": {}, "base": {}, "methods": {"w": {}, "w2": {}}}))
    for s in SEEDS:  # a knob group of the interpolated runs, picked on their validation items
        (wise / "runs" / f"w2-seed{s}").mkdir()
        shutil.copy(f / "runs" / f"c-seed{s}" / "scored_items.json", wise / "runs" / f"w2-seed{s}")
    for method in ("hull-bc", "first"):
        by_folder = v.base_picks(f, {"g": ["w", "w2"]}, FRONT, n_boot=20, seed=2, also=["wise"], method=method)["g"]
        direct = v.base_picks(f, {"g": ["a", "c"]}, FRONT, n_boot=20, seed=2, method=method)["g"]
        assert by_folder["picked"] == {"a": "w", "c": "w2"}[direct["picked"]]
        assert by_folder["estimate"] == direct["estimate"] and by_folder["se"] == direct["se"]
    with pytest.raises(ValueError) as e:
        v.base_verdict(f, ["w"], FRONT, n_boot=10, also=["nowhere"])
    assert str(e.value) == f"{f / 'nowhere'}: no results.json (--with nowhere: a folder inside each comparison)"
    with pytest.raises(ValueError) as e:
        v.base_verdict(f, ["zz"], FRONT, n_boot=10, also=["wise"])
    assert str(e.value) == f"{f}: runs ['zz'] not in the comparison (have {sorted([*RATES, 'w', 'w2'][1:])})"


def test_a_knob_group_picked_in_every_replicate_reports_the_datas_pick_and_where_it_lies(bases):
    """`base_picks` under "hull-bc" (the pick redone per replicate): "val" holds every candidate's validation excess,
    the group reports the candidate with the largest one, at that run's reported retention and ID gain (computed
    here from its grades), past the front only beyond every front run's retention, and a share of replicates
    picking it in [0, 1]."""
    folders, grades = bases
    g = grades[0]
    val = v.load_scores(folders[0], ["a", "c", *FRONT], "val")
    means = {k: {s: float(x.mean()) for s, x in sets.items()} for k, sets in val.items()}
    excess = {c: v.excess_statistic(c, FRONT, "hull")(means) for c in ("a", "c")}
    row = v.base_picks(folders[0], {"g": ["a", "c"]}, FRONT, n_boot=40, seed=1)["g"]
    pick = max(excess, key=excess.get)
    assert row["val"] == excess and row["picked"] == pick and 0.0 <= row["pick_share"] <= 1.0
    ood = [s for s in g["base"] if s != "id"]
    assert row["retention"] == pytest.approx(_retention(g, pick), **EXACT)
    assert row["gain"] == pytest.approx(100 * (g[pick]["id"].mean() - g["base"]["id"].mean()), **EXACT)
    assert row["past_front"] == (_retention(g, pick) > max(_retention(g, f) for f in FRONT)) and ood
