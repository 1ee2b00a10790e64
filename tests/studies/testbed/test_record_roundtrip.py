"""The study record (anchorft.studies.testbed.record) on a small study folder made here: what `pack_study` writes
and returns, what `unpack_study` writes back and counts, the grade vectors' compact form at its edges, and the
refusals by name. Written for the mutants the comparison's end-to-end tests left alive (docs/testing.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anchorft.studies.testbed.record import FORMAT, pack_folder, pack_study, unpack_folder, unpack_study


def _scored(grades: list) -> str:
    obj = {"id": {"math": ["q1", "q2", "q3"]}, "ood": {"sort": ["s1", "s2", "s3"]},
           "scores": {"id": {"math": {"greedy": grades}}, "ood": {"sort": {"greedy": [0, 1, 1]}}}}  # fmt: skip
    return json.dumps(obj, indent=1) + "\n"


def _study(root: Path) -> dict[str, str]:
    files = {
        "config.yaml": "seeds: [0]\n",
        "verdict.json": '{"a": 1}\n',
        "base-seed3/config.yaml": "base: 3\n",
        "base-seed3/runs/sft/scored_items.json": _scored([0, 9, 1]),
        "base-seed3/runs/l2/scored_items.json": _scored([10, 0, 1]),  # a grade above 9: kept as a list
        "base-seed5/runs/sft/scored_items.json": _scored([0.5, 1, 0]),  # not integers: kept as a list
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "base-seed3" / ".tmp-half.json").write_text("{")  # an unfinished write: never recorded
    (root / "base-seed3" / "runs" / "sft" / "log.txt").write_text("a fine-tune's own log\n")  # left out
    return files


def test_pack_and_unpack_a_study_give_back_every_recorded_file(tmp_path):
    files = _study(tmp_path / "study")
    written = pack_study(tmp_path / "study", tmp_path / "records")
    assert [p.name for p in written] == ["base-seed3.json", "base-seed5.json", "study.json"]
    assert all(p.is_file() for p in written)
    study = json.loads((tmp_path / "records" / "study.json").read_text())
    assert sorted(study["text"]) == ["config.yaml", "verdict.json"] and study["scored"] == {}  # bases apart
    assert "\n" not in (tmp_path / "records" / "study.json").read_text().strip()  # one compact line
    assert unpack_study(tmp_path / "records", tmp_path / "back") == len(files)
    for rel, text in files.items():
        assert (tmp_path / "back" / rel).read_text() == text, rel
    assert not list((tmp_path / "back").rglob(".tmp-*")) and not list((tmp_path / "back").rglob("log.txt"))
    # the same record again over identical files is accepted; a changed file is refused before anything is written
    assert unpack_study(tmp_path / "records", tmp_path / "back") == len(files)
    (tmp_path / "back" / "config.yaml").write_text("seeds: [1]\n")
    with pytest.raises(ValueError, match=r"exists with other content; unpack into an empty folder"):
        unpack_study(tmp_path / "records", tmp_path / "back")


def test_grade_vectors_are_packed_as_digits_only_for_integers_0_to_9(tmp_path):
    _study(tmp_path / "study")
    rec = pack_folder(tmp_path / "study" / "base-seed3")
    assert rec["scored"]["runs/sft/scored_items.json"]["scores"]["id"]["math"]["greedy"] == "091"
    assert rec["scored"]["runs/l2/scored_items.json"]["scores"]["id"]["math"]["greedy"] == [10, 0, 1]
    rec5 = pack_folder(tmp_path / "study" / "base-seed5")
    assert rec5["scored"]["runs/sft/scored_items.json"]["scores"]["id"]["math"]["greedy"] == [0.5, 1, 0]


def test_refusals_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match=r"pack: .*nowhere is not a folder"):
        pack_folder(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=rf"unpack: not a study record \(format 'other', expected '{FORMAT}'\)"):
        unpack_folder({"format": "other"}, tmp_path / "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"unpack: no records \(\*\.json\) in .*empty"):
        unpack_study(tmp_path / "empty", tmp_path / "y")
    bad = tmp_path / "bad" / "runs" / "sft"
    bad.mkdir(parents=True)
    (bad / "scored_items.json").write_text(json.dumps({"scores": {}}) + "\n")  # not indent 1
    with pytest.raises(ValueError, match=r"pack: .*scored_items.json is not in the layout the comparison writes"):
        pack_folder(tmp_path / "bad")
