"""A study record resumes: every cell key in `records/verdict/` (the six bases' cells.jsonl) is the key the code of
now computes for the same preset's cell (`Grid`'s `Cell.key` over the comparison's context), so `toy unpack` then
`toy compare --preset verdict` reuses every recorded base instead of running its 100 fine-tunes again. A change to
the key's recipe, to a preset's resolved fields or to a run's fields fails here before a user's resume does."""

from __future__ import annotations

import dataclasses
import json

import pytest

from anchorft.studies import records
from anchorft.studies.testbed.compare import comparison_cells, resolve_comparison
from anchorft.studies.testbed.compare_config import per_base

BASES = (12, 13, 14, 15, 16, 17)


@pytest.mark.parametrize("base", BASES)
def test_the_recorded_cell_keys_are_the_ones_the_code_computes(base):
    rec = json.loads((records.repo_root() / "records" / "verdict" / f"base-seed{base}.json").read_text())
    recorded = [json.loads(line) for line in rec["text"]["cells.jsonl"].splitlines()]
    one = dict(per_base(resolve_comparison("verdict")))[base]
    context = dataclasses.asdict(one)
    cells = comparison_cells(one)  # as `run_compare` builds them, on the context it gives its grid
    assert len(cells) == len(recorded) == 100
    assert {c.name: c.key(context) for c in cells} == {r["name"]: r["key"] for r in recorded}
