"""The drift alarm: each record's replay on the code of now against the one it stored, bit for bit on the CPU kind
that made it, within the measured cross-kind tolerance elsewhere (in the default suite, 16 s on the 2-core machine;
`make drift` runs this file alone)."""

from __future__ import annotations

import shutil

import pytest

from anchorft.io import write_json
from anchorft.studies import drift, records
from anchorft.studies.drift import differences


def test_differences_are_bitwise_unless_a_tolerance_is_given():
    rec = {"a": [1.0, 2.0], "b": {"c": "x"}, "d": 0.1 + 0.2}
    assert differences(rec, {"a": [1.0, 2.0], "b": {"c": "x"}, "d": 0.1 + 0.2}) == []
    assert differences(rec, {**rec, "d": 0.3}) == ["/d: recorded 0.30000000000000004, now 0.3"]
    assert differences(rec, {**rec, "d": 0.3}, tolerance=1e-9) == []
    assert differences(rec, {**rec, "a": [1.0]}) == ["/a: 2 values recorded, 1 now"]
    assert differences(rec, {**rec, "b": {"c": "y"}}) == ['/b/c: recorded "x", now "y"']
    assert differences(rec, {"a": [1.0, 2.0], "b": {"c": "x"}}) == ["/d: missing now"]
    # an undefined value (a one-task problem has no non-target group) is the same as itself, not as a number
    assert differences({"x": float("nan")}, {"x": float("nan")}) == []
    assert differences({"x": float("nan")}, {"x": 0.5}) == ["/x: recorded nan, now 0.5"]
    assert differences({"x": 0.5}, {"x": float("nan")}, tolerance=1e-3) == ["/x: recorded 0.5, now nan"]


@pytest.mark.parametrize("name", sorted(p.stem for p in (records.repo_root() / "records").glob("*.json")))
def test_record_replays_as_recorded(name):
    """The record's replay, made with the code that made the record, is what the code of now gives (bit for bit
    for training at the record's thread counts on the CPU kind that made the replay, within 1e-4 relative on
    another; the verdict's estimates within 1e-9 points): a code change that moves a result fails here until the
    record is made again and the docs regenerated (make docs-tables)."""
    assert records.check_records([name]) == {name: []}


def test_differences_take_a_relative_tolerance_and_skip_keys():
    rec = {"a": [2.0, 4.0], "checksum": "x", "m": {"cpu": "A"}}
    assert differences(rec, {**rec, "a": [2.0002, 4.0]}, rtol=1e-4) == []
    assert differences(rec, {**rec, "a": [2.0003, 4.0]}, rtol=1e-4) == ["/a[0]: recorded 2.0, now 2.0003"]
    assert differences(rec, {"a": [2.0, 4.0], "checksum": "y", "m": {"cpu": "B"}}, skip=("checksum", "m")) == []
    assert differences(rec, {"a": [2.0, 4.0]}, skip=("checksum", "m")) == []  # skipped: not even missing


HERE = {"cpu": "CPU A", "simd": "AVX2", "torch": "2.13.0+cpu"}
ELSEWHERE = {**HERE, "cpu": "CPU B", "simd": "AVX512"}


def _toy(losses, checksum, machine=None, **more):
    return {"toy": {"pretrain": {"losses": losses, "checksum": checksum}, **({"machine": machine} if machine else {}),
                    **more}}  # fmt: skip


def test_a_replay_is_bitwise_on_its_own_kind_and_within_the_cross_kind_tolerance_elsewhere():
    stored = _toy([2.0, 1.5], "abc", HERE)
    rounding = _toy([2.0, 1.50003], "def", HERE)  # what another CPU kind measurably does
    moved = _toy([2.0, 1.5045], "def", HERE)  # what a 1% step size change did (test below)
    lines, how = drift.compare_replays(stored, rounding, here=HERE)
    assert how.startswith("bit for bit") and lines == [
        "/toy/pretrain/losses[1]: recorded 1.5, now 1.50003",
        '/toy/pretrain/checksum: recorded "abc", now "def"',
    ]
    for made_on in (ELSEWHERE, None):  # another kind, or a replay from before replays said their kind
        stored = _toy([2.0, 1.5], "abc", made_on)
        lines, how = drift.compare_replays(stored, rounding, here=HERE)
        assert lines == [] and how.startswith(f"within {drift.CROSS_MACHINE_RTOL:g} relative, checksums not")
        assert drift.compare_replays(stored, moved, here=HERE)[0] == [
            "/toy/pretrain/losses[1]: recorded 1.5, now 1.5045"
        ]
    # measured to amplify rounding between two kinds: compared on its own kind only
    amplifies = _toy([2.0, 1.5], "abc", ELSEWHERE, across_kinds={"largest_relative_difference": 0.17})
    lines, how = drift.compare_replays(amplifies, moved, here=HERE)
    assert lines == [] and how.startswith("not compared")
    assert drift.compare_replays(amplifies, _toy([2.0, 1.5], "abc", ELSEWHERE), here=ELSEWHERE) == (
        [],
        "bit for bit (made on this CPU kind)",
    )
    assert drift.compare_replays(amplifies, moved, here=ELSEWHERE)[0]  # on its kind, bit for bit
    # the verdict's estimates: within 1e-9 points wherever
    v = {"verdict": {"base-seed20": {"sft": {"estimate": -1.0}}}}
    assert drift.compare_replays(v, {"verdict": {"base-seed20": {"sft": {"estimate": -1.0 + 1e-12}}}})[0] == []
    assert drift.compare_replays(v, {"verdict": {"base-seed20": {"sft": {"estimate": -1.0 + 1e-6}}}})[0]


def test_a_one_percent_step_size_change_is_caught_across_cpu_kinds():
    """Across kinds the alarm is coarser (no checksums, 1e-4 relative): a 1% change of either step size of a W2S
    record still moves its replay 4e-4 to 3e-3 relative (measured), beyond the tolerance."""
    rec = records.load_record("w2s-paper")
    other = {**drift.machine_kind(), "cpu": "another CPU"}
    for key in ("eta_w2s", "eta_sft"):
        stored = {"w2s": {**rec["replay"]["w2s"], "machine": other}}
        now = {"w2s": drift.w2s_replay({**rec["config"], key: rec["config"][key] * 1.01}, rec["threads"]["torch"])}
        lines, how = drift.compare_replays(stored, now)
        assert how.startswith("within") and lines, key


def test_replay_again_keeps_what_agrees_and_leaves_what_drifted(tmp_path, monkeypatch):
    (tmp_path / "records").mkdir()
    for name in ("w2s-he6-sft", "w2s-trained-teacher"):
        shutil.copy(records.repo_root() / "records" / f"{name}.json", tmp_path / "records")
    first = {**drift.machine_kind(), "cpu": "the kind that made them"}
    for name in ("w2s-he6-sft", "w2s-trained-teacher"):  # as if made on another kind, the same code
        rec = records.load_record(name, tmp_path)
        rec["replay"] = records.replay(rec)
        rec["replay"]["w2s"]["machine"] = first
        if name == "w2s-trained-teacher":  # a replay that amplifies rounding: the other kind ended 17% apart
            rec["replay"]["w2s"]["final"]["w2s"]["target_alignment"] *= 1.17
        else:  # rounding of another kind
            rec["replay"]["w2s"]["final"]["sft"]["target_alignment"] *= 1 + 3e-6
        write_json(tmp_path / "records" / f"{name}.json", rec, indent=1)
    said = records.replay_again(root=tmp_path)
    assert said["w2s-trained-teacher"].startswith("left as it is: it drifted")
    assert said["w2s-he6-sft"].startswith("made again here; 3e-06 relative")
    rec = records.load_record("w2s-he6-sft", tmp_path)
    assert rec["replay"]["w2s"]["machine"] == drift.machine_kind()
    assert rec["replay"]["w2s"]["across_kinds"]["other"] == first
    said = records.replay_again(root=tmp_path, amplifying=("w2s-trained-teacher",))
    assert said["w2s-he6-sft"].startswith("kept") and said["w2s-trained-teacher"].startswith("made again here")
    assert records.check_records(root=tmp_path) == {"w2s-he6-sft": [], "w2s-trained-teacher": []}
    # on another kind: the one is compared within the tolerance, the other not at all
    monkeypatch.setattr(drift, "machine_kind", lambda: first)
    how = {}
    assert records.check_records(root=tmp_path, how=how) == {"w2s-he6-sft": [], "w2s-trained-teacher": []}
    assert how["w2s-he6-sft"].startswith("within") and how["w2s-trained-teacher"].startswith("not compared")


def test_the_cross_kind_tolerance_is_the_measured_differences_with_margin():
    """The numbers drift.py's docstring gives for the error model are the records' own measurements between two CPU
    kinds (`across_kinds`): the tolerance is at least 8x the largest difference of the replays compared across
    kinds, and the ones beyond it are the ones said to amplify rounding."""
    measured = {}
    for p in sorted((records.repo_root() / "records").glob("*.json")):
        replay = records.load_record(p.stem)["replay"]
        kind = next(iter(replay))
        if "across_kinds" in replay[kind]:
            measured[p.stem] = replay[kind]["across_kinds"]["largest_relative_difference"]
    compared = {k: v for k, v in measured.items() if v <= drift.CROSS_MACHINE_RTOL}
    assert sorted(set(measured) - set(compared)) == ["w2s-trained-teacher"]
    assert len(compared) == 15 and 8 * max(compared.values()) <= drift.CROSS_MACHINE_RTOL
    doc = " ".join(drift.__doc__.split())

    def g(x: float) -> str:
        return f"{x:.2g}".replace("e-0", "e-")  # 1.2e-05 as the docstring writes it, 1.2e-5

    assert (
        f"was {g(max(compared.values()))} (the demo's" in doc and f"{measured['w2s-trained-teacher']:.0%} apart" in doc
    )
    w2s = [v for k, v in compared.items() if k.startswith("w2s-")]
    assert f"alignments {g(min(w2s))} to {g(max(w2s))})" in doc
    readme = " ".join((records.repo_root() / "records" / "README.md").read_text().split())
    assert f"at most {g(max(compared.values()))} relative for {len(compared)} of them;" in readme
    assert f"{measured['w2s-trained-teacher']:.2g} for `w2s-trained-teacher`" in readme
