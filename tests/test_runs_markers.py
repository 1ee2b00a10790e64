"""The run marker's readers and messages, through the public functions: `same_run` (what `train` asks on every
process), the entries a folder holds that its run did not write, the end-of-run and reuse messages, and the
refusal of a folder that anchorft did not write."""

from __future__ import annotations

import pytest

from anchorft.errors import UsageError
from anchorft.runs import MARKER, claim_output, existing_files, finish, mark_active, reused, same_run


def test_same_run_is_the_status_of_this_command_and_config_only(tmp_path):
    out = tmp_path / "o"
    assert same_run(out, "train", {"a": 1}) is None  # no folder
    claim = claim_output(out, "train", {"a": 1})
    (out / "model.safetensors").write_text("w")
    assert same_run(out, "train", {"a": 1}) == "running"
    finish(claim)
    assert same_run(out, "train", {"a": 1}) == "complete"
    assert same_run(out, "eval", {"a": 1}) is None  # another command, the same config
    assert same_run(out, "train", {"a": 2}) is None  # the same command, another config


def test_a_finished_folder_names_the_entries_its_run_did_not_write(tmp_path):
    out = tmp_path / "o"
    claim = claim_output(out, "x", {"a": 1})
    (out / "metrics.json").write_text("{}")
    finish(claim)
    (out / "notes.txt").write_text("mine")
    again = claim_output(out, "x", {"a": 1})
    assert again.complete and again.foreign == ("notes.txt",)
    assert reused(again).endswith("reusing it (--overwrite to run it again)")
    with pytest.raises(UsageError, match=r"did not write \(notes\.txt\)"):
        claim_output(out, "x", {"a": 2}, overwrite=True)


def test_existing_files_names_only_what_exists(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    assert existing_files(tmp_path, "a.json", "b.png") == f"{tmp_path / 'a.json'}"
    (tmp_path / "b.png").write_text("")
    assert existing_files(tmp_path, "a.json", "b.png") == f"{tmp_path / 'a.json'}, {tmp_path / 'b.png'}"
    assert existing_files(tmp_path, "c.md") == f"nothing in {tmp_path}"


def test_a_folder_without_a_marker_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "theirs.txt").write_text("x")
    with pytest.raises(
        UsageError, match=rf"holds no anchorft run marker \({MARKER}\); choose an empty or new folder$"
    ):
        claim_output(tmp_path, "x", {"a": 1})
    with pytest.raises(UsageError, match=r"; --overwrite only replaces folders written by anchorft$"):
        claim_output(tmp_path, "x", {"a": 1}, overwrite=True)
    mark_active("failed")  # nothing was claimed: nothing to mark


def test_mark_active_returns_the_folders_left_with_partial_outputs(tmp_path):
    out = tmp_path / "o"
    claim_output(out, "x", {"a": 1})
    (out / "part.json").write_text("{}")
    assert mark_active("interrupted") == [out]  # partial outputs, marked
    claim_output(tmp_path / "empty", "x", {"a": 1})
    assert mark_active("failed") == [] and not (tmp_path / "empty").exists()  # nothing written: nothing left
    finish(claim_output(out, "x", {"a": 1}))
    claim_output(out, "x", {"a": 2}, overwrite=True)  # the finished run set aside ...
    assert mark_active("failed") == []  # ... and put back as it was: no partial outputs
    assert same_run(out, "x", {"a": 1}) == "complete"


def test_check_output_dir_names_the_flag_and_the_file(tmp_path):
    import re

    from anchorft.runs import check_output_dir

    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(UsageError, match=rf"^--out: {re.escape(str(f))} exists and is a file, not a folder$"):
        check_output_dir(f)
    with pytest.raises(
        UsageError, match=rf"^--out: {re.escape(str(f / 'sub'))} cannot be created \({re.escape(str(f))} is"
    ):
        check_output_dir(f / "sub")


def test_a_failed_replacement_leaves_the_old_run_and_none_of_its_own_files(tmp_path):
    out = tmp_path / "o"
    claim = claim_output(out, "x", {"a": 1})
    (out / "old.json").write_text("old")
    finish(claim)
    claim_output(out, "x", {"a": 2}, overwrite=True)
    (out / "new.json").write_text("new")
    assert mark_active("failed") == []
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [MARKER, "old.json"]
    assert same_run(out, "x", {"a": 1}) == "complete"
