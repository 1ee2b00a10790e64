"""`anchorft w2s replicate`: each claim re-run at its documented size on a fresh block of seeds, its statistics read
from the run's metrics.json (checked here against the metrics by hand), its rule judged at the rule's edges."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from anchorft.cli import main
from anchorft.studies.w2s.replicate import CLAIMS, measure, parse_seed_block

# a block no claim was chosen or reported on (the docs use 0-4, 100-104, 300-304; the README's rows 1000-1009)
FRESH = "2000-2001"


def _metrics(target, theta2, turn_init=0.27, turn=None, sft_target=None, gain=(0.2, 0.02)) -> dict:
    """A metrics.json of the shape `run_experiment` writes, with the per-seed finals given."""
    n = len(target)
    turn = turn if turn is not None else [0.4] * n
    sft_target = sft_target if sft_target is not None else [0.07] * n
    per = {"target_alignment": target, "nontarget_alignment": theta2, "nontarget_target_alignment": [0.02] * n}
    mode = {"init": {"target_alignment": 0.076, "nontarget_alignment": 0.9, "nontarget_target_alignment": turn_init},
            "final_per_seed": per}  # fmt: skip
    sft = {"init": mode["init"], "final_per_seed": {**per, "nontarget_target_alignment": turn,
                                                     "target_alignment": sft_target}}  # fmt: skip
    iso = {"risk": {"weak": 0.44, "w2s@link": 0.44 - gain[0]}, "gain_over_weak": {"w2s@link": gain[0]},
           "gain_over_weak_se": {"w2s@link": gain[1]}}  # fmt: skip
    return {"w2s": mode, "sft": sft, "risks": {"isotropic": iso}}


def test_seed_blocks():
    assert parse_seed_block("1000-1002") == [1000, 1001, 1002]
    assert parse_seed_block("7") == [7]
    assert parse_seed_block(["3", "4", "5"]) == [3, 4, 5]
    assert parse_seed_block(["3-4", "5"]) == [3, 4, 5]
    for bad in ("5-3", "a-b", "-1", ["1", "3"], "1,2"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seed_block(bad)


@pytest.mark.parametrize(
    ("target", "theta2", "holds"),
    [
        ([0.95, 0.96], [0.85, 0.86], True),
        ([0.95, 0.899], [0.85, 0.86], False),  # one seed below the target bar
        ([0.95, 0.96], [0.85, 0.799], False),  # one seed lost theta_2
        ([0.9, 0.9], [0.8, 0.8], True),  # on the bars
    ],
)
def test_paper_rule_is_per_seed(target, theta2, holds):
    got = measure(CLAIMS["paper"], _metrics(target, theta2), [0, 1])
    assert got["holds"] is holds
    assert got["statistics"]["target_final"] == pytest.approx(np.mean(target))
    assert got["statistics"]["theta2_final_per_seed"] == theta2


@pytest.mark.parametrize(
    ("turn", "sft_target", "holds"),
    [
        ([0.33, 0.44], [0.07, 0.08], True),
        ([0.33, 0.31], [0.07, 0.08], False),  # one seed turned by 0.04 < 0.05
        ([0.33, 0.44], [0.07, 0.2], False),  # the target learnt in one seed
    ],
)
def test_sft_turn_rule(turn, sft_target, holds):
    m = _metrics([0.1, 0.1], [0.7, 0.7], turn=turn, sft_target=sft_target)
    assert measure(CLAIMS["paper-sft-turn"], m, [0, 1])["holds"] is holds


@pytest.mark.parametrize(
    ("gain", "target", "holds"),
    [((0.2, 0.06), [0.95, 0.95], True), ((0.2, 0.067), [0.95, 0.95], False), ((0.2, 0.02), [0.95, 0.85], False)],
)
def test_gain_rule_is_three_standard_errors(gain, target, holds):
    got = measure(CLAIMS["gain"], _metrics(target, [0.87, 0.87], gain=gain), [0, 1])
    assert got["holds"] is holds
    assert got["statistics"]["gain"] == gain[0] and got["statistics"]["gain_se"] == gain[1]


def _replicate(tmp_path, claim: str, capsys) -> dict:
    out = tmp_path / claim
    assert main(["w2s", "replicate", claim, "--seeds", FRESH, "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    rep = json.loads((out / "replication.json").read_text())
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    assert rep["seeds"] == parse_seed_block(FRESH)
    cfg = yaml.safe_load((out / "run" / "config.yaml").read_text())
    assert (cfg["seed"], cfg["n_seeds"]) == (2000, 2)
    assert ("HOLDS" in text) is rep["holds"] and f"claim {claim}" in text
    return rep | {"metrics": metrics, "config": cfg}


@pytest.mark.parametrize("claim", ["paper", "gain"])
def test_claim_at_its_documented_size_on_a_fresh_block(tmp_path, capsys, claim):
    """The documented size (d, s, steps, step sizes of the preset) with the block's seeds: the statistics are the
    run's own numbers, read here from metrics.json by hand."""
    rep = _replicate(tmp_path, claim, capsys)
    m, cfg = rep["metrics"], rep["config"]
    assert (cfg["d"], cfg["steps"]) == ((1024, 8000) if claim == "paper" else (128, 8000))
    target = m["w2s"]["final_per_seed"]["target_alignment"]
    assert rep["statistics"]["target_final_per_seed"] == target
    if claim == "gain":
        iso = m["risks"]["isotropic"]
        # the paired gain is the difference of the two mean risks (the same test inputs)
        assert rep["statistics"]["gain"] == pytest.approx(iso["risk"]["weak"] - iso["risk"]["w2s@link"], abs=1e-9)
        assert rep["holds"] is (iso["gain_over_weak"]["w2s@link"] > 3 * iso["gain_over_weak_se"]["w2s@link"]
                                and min(target) >= 0.9)  # fmt: skip
    else:
        theta2 = m["w2s"]["final_per_seed"]["nontarget_alignment"]
        assert rep["holds"] is (min(target) >= 0.9 and min(theta2) >= 0.8)


@pytest.mark.slow
def test_sft_turn_at_its_documented_size_on_a_fresh_block(tmp_path, capsys):
    rep = _replicate(tmp_path, "paper-sft-turn", capsys)
    turn = rep["metrics"]["sft"]["final_per_seed"]["nontarget_target_alignment"]
    assert rep["statistics"]["nontarget_theta1_final_per_seed"] == turn


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["papr", "--seeds", "1-2"], "unknown claim 'papr'"),
        (["paper", "--seeds", "3-1"], "ends before it starts"),
        (["paper", "--seeds", "1", "3"], "must be consecutive"),
    ],
)
def test_mistakes_are_one_line_before_work(tmp_path, capsys, argv, message):
    out = tmp_path / "r"
    assert main(["w2s", "replicate", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
