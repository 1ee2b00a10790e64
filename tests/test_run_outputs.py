"""What runs write, as the guide says it: a run marker with the resolved config beside results with their
provenance (checked on a command fast enough for the default suite, and on docs/guide/index.md's own sentence); an
evaluation figure whose every score is 0 says so in the plot instead of showing empty axes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anchorft.eval.report as report
from anchorft.cli import command

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "index.md"


def _figure(monkeypatch) -> list:
    saved = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path, **kw: saved.append(fig))
    return saved


def test_an_evaluation_plot_of_zeros_says_all_scores_0(monkeypatch, tmp_path):
    saved = _figure(monkeypatch)
    report.plot_metrics({"aime": {"avg@k": 0.0, "pass@k": 0.0}, "math": {"avg@k": 0.0, "pass@k": 0.0}}, tmp_path / "m")
    report.plot_metrics({"aime": {"avg@k": 0.0, "pass@k": 0.25}}, tmp_path / "m")
    base = {"benches": {"aime": {"avg@k": 0.0}, "gpqa": {"avg@k": None}}, "id_mean_avg@k": 0.0, "ood_mean_avg@k": None}
    table = {"k": 4, "domains": {"aime": "id", "gpqa": "ood"}, "models": {"base": base}}
    report.plot_table(table, tmp_path / "t")
    texts = [[t.get_text() for t in fig.axes[0].texts] for fig in saved]
    assert texts == [["all scores 0"], [], ["all scores 0"]]


def test_a_run_writes_its_marker_with_the_config_and_its_results_with_provenance(tmp_path):
    rows = [
        {"question": f"What is {i} + {i}?", "target": f"Adding, {i} + {i} = \\boxed{{{2 * i}}}."} for i in range(4)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "data"
    assert command("data")(["openr1-math", "--source", str(tmp_path / "rows.jsonl"), "--out", str(out)]) == 0
    marker = json.loads((out / "anchorft-run.json").read_text())
    assert marker["command"] == "data openr1-math" and marker["status"] == "complete"
    assert marker["config"]["source"] == str(tmp_path / "rows.jsonl")  # the resolved config
    assert {"anchorft", "git_commit", "torch", "transformers"} <= set(
        json.loads((out / "metrics.json").read_text())["provenance"]
    )
    assert (out / "lengths.png").is_file()


def test_the_guide_names_what_each_command_writes():
    text = " ".join(GUIDE.read_text().split())
    sentence = re.search(r"Every run writes `anchorft-run.json` into its output folder.*?; a rerun", text)
    assert sentence, "docs/guide/index.md: the sentence on what every run writes"
    said = sentence.group(0)
    for results, commands in {
        "`metrics.json`": ["`train`", "`rl`", "`eval`", "`w2s run`", "`toy pretrain`", "`data openr1-math|dapo-math`"],
        "`results.json`": ["`toy compare|interpolate|rl`"],
        "`table.json`": ["`eval suite`"],
        "`analysis.json`": ["`analyze`"],
        "`sweep.json`": ["`w2s sweep`"],
    }.items():
        assert results in said and all(c in said for c in commands), (results, said)
