"""The docs' tables against the records they are rendered from (`make docs-tables`, anchorft.studies.records)."""

from __future__ import annotations

import shutil

import pytest

from anchorft.studies import records


def test_docs_tables_match_records():
    """Every table block of README.md and docs/**/*.md, and configs/toy/verdict-summary.json, is what its record in
    records/ gives: a number changed by hand, or a result that moved without its docs, fails here."""
    assert records.stale_tables() == []


def _copy_checkout(tmp_path):
    root = records.repo_root()
    for rel in ("README.md", "docs", "records", "configs/toy/verdict-summary.json"):
        src, dst = root / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
    return tmp_path


@pytest.mark.parametrize("name", list(records.TABLES))
def test_a_number_changed_or_a_row_removed_in_a_table_is_caught(tmp_path, name):
    """A planted bug: one digit of the table changed, or its last row removed, in a copy of the checkout."""
    root = _copy_checkout(tmp_path)
    file = root / records.TABLES[name][0]
    text = file.read_text()
    body = dict(records.blocks(text))[name]
    start = body.index("|---") if "|---" in body else 0  # a block of prose (demo-time): its first number
    digit = next(i for i, ch in enumerate(body) if ch.isdigit() and i > start)
    changed = body[:digit] + str((int(body[digit]) + 1) % 10) + body[digit + 1 :]
    file.write_text(text.replace(body, changed))
    assert any(f"table {name!r} differs" in p for p in records.stale_tables(root))
    if rows := [line for line in body.splitlines(keepends=True) if line.startswith("| ")]:
        file.write_text(text.replace(body, body.replace(rows[-1], "")))
        assert any(f"table {name!r} differs" in p for p in records.stale_tables(root))
    file.write_text(text)
    assert records.stale_tables(root) == []
    assert records.rewrite_tables(root) == []  # nothing to rewrite when the tables match


def test_tables_are_rewritten_between_their_markers(tmp_path):
    root = _copy_checkout(tmp_path)
    file = root / "docs" / "results" / "demo.md"
    text = file.read_text()
    body = dict(records.blocks(text))["demo"]
    file.write_text(text.replace(body, "stale\n"))
    (root / "configs/toy/verdict-summary.json").write_text("{}\n")
    assert sorted(records.rewrite_tables(root)) == ["configs/toy/verdict-summary.json", "docs/results/demo.md"]
    assert file.read_text() == text and records.stale_tables(root) == []


@pytest.mark.parametrize("rel", ["docs/toy.md", "docs/guide/nested.md"])
def test_a_block_that_names_no_table_is_reported(tmp_path, rel):
    """Blocks are found in README.md and in every markdown file under docs/, subfolders included."""
    root = _copy_checkout(tmp_path)
    file = root / rel
    file.parent.mkdir(parents=True, exist_ok=True)
    old = file.read_text() if file.is_file() else ""
    file.write_text(old + "\n<!-- table: nope -->\n| a |\n<!-- /table -->\n")
    assert records.stale_tables(root) == [f"{rel}: block 'nope' is no table of {rel} (TABLES)"]
    assert records.rewrite_tables(root) == []  # left as it is: no renderer of that file


def test_a_table_copied_into_another_page_is_reported(tmp_path):
    """A record's table belongs to one page: a copy elsewhere is reported, not kept in step silently."""
    root = _copy_checkout(tmp_path)
    body = records.render("demo-check", root)
    file = root / "docs" / "toy.md"
    file.write_text(file.read_text() + f"\n<!-- table: demo-check -->\n{body}<!-- /table -->\n")
    assert records.stale_tables(root) == ["docs/toy.md: block 'demo-check' is no table of docs/toy.md (TABLES)"]


def test_every_record_names_its_command_commit_threads_and_cache_keys():
    for path in sorted((records.repo_root() / "records").glob("*.json")):
        rec = records.load_record(path.stem)
        assert rec["command"] and len(rec["commit"] or "") == 40, path
        assert rec["threads"] and "replay" in rec and "results" in rec, path
        if "toy" in rec["replay"]:
            assert rec["threads"] == {"pretrain": 2, "finetune": 1} and rec["cache_keys"], path


def test_every_preset_base_is_in_the_seed_ledger():
    """records/seeds.md writes each pretraining seed's use before its first run: every preset's bases (and its
    pretraining seed) lie in a range the ledger gives a use, none in a free one."""
    import re

    from anchorft.studies.testbed.compare_config import PRESETS, load_config

    ranges = {}
    for line in (records.repo_root() / "records" / "seeds.md").read_text().splitlines():
        if m := re.match(r"\| (\d+)(?:-(\d+))? \| .* \| (\w+)[^|]* \|$", line):
            ranges[(int(m[1]), int(m[2] or m[1]))] = m[3]
    assert ranges, "no ledger rows found"

    def status(seed: int) -> str | None:
        return next((s for (lo, hi), s in ranges.items() if lo <= seed <= hi), None)

    for name in PRESETS:
        cfg = load_config(name)
        for seed in cfg.bases or [cfg.pretrain.seed]:
            assert status(seed) not in (None, "free"), f"{name}: pretraining seed {seed} is not in records/seeds.md"


def _holm_by_loop(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p, written out: sort, scale the i-th smallest by (m - i), carry the running max."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


DECIDED = sorted(
    p.stem
    for p in (records.repo_root() / "records").glob("*.json")
    if "decision" in records.load_record(p.stem)["results"]
)


@pytest.mark.parametrize("name", DECIDED)
def test_a_recorded_decision_is_holm_and_the_rule_on_its_own_rows(name):
    """A verdict record's decision (what its docs table says is decided) follows from its pooled rows: each row's p is
    that of the items-shared interval, Holm over every row (by a loop here), decided where the adjusted p <= alpha,
    and the confirmatory row's outcome by the preset's rule on its unadjusted interval."""
    v = records.load_record(name)["results"]
    d, pooled = v["decision"], v["pooled"]
    assert list(d["rows"]) == list(pooled)
    for run, row in d["rows"].items():
        src = pooled[run].get("shared_items") or pooled[run]
        assert (row["low"], row["high"], row["p"]) == (src["low"], src["high"], src["p"])
    adjusted = _holm_by_loop([row["p"] for row in d["rows"].values()])
    for (run, row), p_adj in zip(d["rows"].items(), adjusted):
        assert row["p_holm"] == pytest.approx(p_adj, abs=1e-12)
        want = "-" if p_adj > d["alpha"] else ("above" if row["mean"] > 0 else "under")
        assert row["decided"] == want, run
    if c := d.get("confirmatory"):
        row = d["rows"][c["row"]]
        assert (c["low"], c["high"]) == (row["low"], row["high"])
        if c["low"] > 0:
            assert c["outcome"].startswith("above the front")
        elif c["high"] < 0:
            assert c["outcome"] == "under the front"
        elif -c["sesoi"] < c["low"] and c["high"] < c["sesoi"]:
            assert c["outcome"].startswith("no effect of interest")
        else:
            assert c["outcome"] == "not decided"


@pytest.mark.parametrize("name", DECIDED)
def test_a_decision_per_base_table_holds_each_base_row_of_its_record(name):
    """The per-base table of a `--confirm` verdict: one line a base, in the record's order, each row's corrected
    excess on that base, and the confirmatory row's bias-corrected interval and picked knob there."""
    from anchorft.studies.testbed.verdict import base_interval

    rec = records.load_record(name)
    v = rec["results"]
    conf = v["decision"]["confirmatory"]["row"]
    lines = records._decision_per_base_table(rec).splitlines()[2:]
    assert len(lines) == len(v["bases"])
    for line, folder, base in zip(lines, v["bases"], v["per_base"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == folder.removeprefix("base-seed")
        assert [float(c) for c in cells[1 : 1 + len(v["pooled"])]] == [
            round(base[r]["corrected"], 1) for r in v["pooled"]
        ]
        _, low, high = base_interval(v, base[conf])
        assert cells[-2] == f"[{low:+.1f}, {high:+.1f}]"
        if "picked" in base[conf]:
            assert cells[-1].endswith(f"({base[conf]['pick_share']:.2f})")


def test_the_readme_quotes_a_confirmatory_study_with_its_answer_and_only_its_judged_rows(monkeypatch):
    """README_VERDICT names the verdict the README quotes: a study fixed before its first cell adds its
    confirmatory answer; an option that is a front run there (no row of its own) gets no line."""
    root = records.repo_root()
    rec = records.load_record("verdict-pilot")
    rec["results"]["decision"]["rows"].pop("sft")
    real = records.load_record
    monkeypatch.setattr(records, "load_record", lambda n, r=None: rec if n == "verdict-x" else real(n, r))
    monkeypatch.setattr(
        records,
        "README_VERDICT",
        {"record": "verdict-x", "page": "docs/x.md", "link": "the study", "kind": "20 bases", "confirmatory": True},
    )
    text = records._readme_results(root)
    c = rec["results"]["decision"]["confirmatory"]
    assert f"{c['mean']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}]: {c['outcome']}" in text
    assert "| SFT |" not in text and "| plain LoRA |" in text and "[the study](docs/x.md)" in text
    assert "a pilot" not in text


def test_the_study_cost_totals_are_the_sums_of_its_bases():
    """verdict2-cost's last line: the wall, pretraining, training, WiSE-FT and evaluation totals, summed here by a loop
    over records/costs/verdict2.json and records/costs/eval-cell.json."""
    import json
    import re

    root = records.repo_root()
    rec = json.loads((root / "records" / "costs" / "verdict2.json").read_text())
    cell = json.loads((root / "records" / "costs" / "eval-cell.json").read_text())["median_seconds"]["verdict2"]
    wall = pre = train = wise = cells = 0.0
    for b in rec["bases"]:
        wall += b["compare_s"] + b["interpolate_s"] + b["pack_s"]
        pre += b["pretrain_train_s"]
        train += b["finetune_train_s_sum"]
        wise += b["interpolate_s"]
        cells += b["finetunes"]
    last = records.render("verdict2-cost").strip().splitlines()[-1]
    got = [float(x) for x in re.findall(r"([\d.]+) (?:h|min) ", last)]
    assert got[:4] == [round(wall / 3600, 1), round(pre / 3600, 1), round(train / 3600, 1), round(wise / 60)]
    assert f"{int(cells)} cells at {cell:.1f} s a cell" in last
    assert f"about {cells * cell / 3600:.1f} h of one core" in last


def test_the_confirmatory_answer_in_words_is_the_rule_applied_to_the_record():
    """verdict2-answer's words against the rule recomputed here: the confirmatory outcome from its interval and the
    smallest effect of interest, Holm's step-down by a loop over the rows' p, each decided row named on its side."""
    rec = records.load_record("verdict2")
    d = rec["results"]["decision"]
    c = d["confirmatory"]
    if c["low"] > 0:
        outcome = "above the front"
    elif c["high"] < 0:
        outcome = "under the front"
    elif -c["sesoi"] < c["low"] and c["high"] < c["sesoi"]:
        outcome = "no effect of interest"
    else:
        outcome = "not decided"
    assert c["outcome"].startswith(outcome)
    rows = d["rows"]
    order = sorted(rows, key=lambda r: rows[r]["p"])
    running, holm = 0.0, {}
    for i, r in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * rows[r]["p"]))
        holm[r] = running
    for r, row in rows.items():
        assert abs(row["p_holm"] - holm[r]) < 1e-12
        assert row["decided"] == ("-" if holm[r] > d["alpha"] else "under" if row["mean"] < 0 else "above")
    text = records._decision_answer(rec)
    under = text.split("decided under the front: ")[1].split("; decided above: ")[0]
    named = [r for r in rows if f"{records.VERDICT_LABELS.get(r, r)} ({rows[r]['mean']:+.1f}, Holm p" in under]
    assert named == [r for r in rows if rows[r]["decided"] == "under"] and named
    assert f"**{c['outcome']}**" in text and f"[{c['low']:+.1f}, {c['high']:+.1f}]" in text
