"""The drift alarm: each record's replay on the code of now against the one it stored (in the default suite, 16 s
on the 2-core machine; `make drift` runs this file alone)."""

from __future__ import annotations

import pytest

from anchorft.studies import records
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
    for training at the record's thread counts; the verdict's estimates within 1e-9 points): a code change that
    moves a result fails here until the record is made again and the docs regenerated (make docs-tables)."""
    assert records.check_records([name]) == {name: []}
