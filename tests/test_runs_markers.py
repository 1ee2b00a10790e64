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


def test_a_folder_locked_by_a_live_run_is_refused_naming_its_holder(tmp_path):
    """The lock is taken in this process through a second open file, as another process would hold it."""
    import fcntl
    import os
    import re
    import socket

    from anchorft.runs import LOCK

    out = tmp_path / "o"
    out.mkdir()
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"4242 {'h' * 150}\n".encode())
        with pytest.raises(
            UsageError,
            match=rf"^--dir: {re.escape(str(out))} is in use by a live run \(PID 4242 on h{{150}}\); wait for it",
        ):
            claim_output(out, "x", {"a": 1}, flag="--dir")
        os.ftruncate(fd, 0)  # a holder that wrote nothing (yet)
        with pytest.raises(UsageError, match=r"in use by a live run \(another process\); wait for it to end"):
            claim_output(out, "x", {"a": 1})
    finally:
        os.close(fd)
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # refused: nothing written
    claim = claim_output(out, "x", {"a": 1})  # the holder is gone: the folder is taken, the old holder's line replaced
    assert (out / LOCK).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    assert not _lockable(out / LOCK)  # held while the run is active ...
    finish(claim)
    assert _lockable(out / LOCK)  # ... and released when it ends
    umask = os.umask(0)
    os.umask(umask)
    finish(claim_output(tmp_path / "new", "x", {"a": 1}))
    assert (tmp_path / "new" / LOCK).stat().st_mode & 0o777 == 0o644 & ~umask


def _lockable(path) -> bool:
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_filesystem_without_locks_is_claimed_unlocked(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    claim = claim_output(tmp_path / "o", "x", {"a": 1})
    (tmp_path / "o" / "m.json").write_text("{}")
    finish(claim)
    assert same_run(tmp_path / "o", "x", {"a": 1}) == "complete"


def test_the_marker_records_the_run_as_json_and_lists_files_once_stopped(tmp_path):
    import datetime as dt
    from pathlib import Path

    from anchorft.runs import read_marker

    out = tmp_path / "o"
    claim = claim_output(out, "x", {"p": Path("a") / "b", "n": 1})
    m = read_marker(out)
    assert m["status"] == "running" and m["config"] == {"p": str(Path("a") / "b"), "n": 1}
    assert "notes" not in m and "files" not in m  # a running marker lists nothing: every entry is then the run's
    when = dt.datetime.fromisoformat(m["updated"])
    assert when.utcoffset() == dt.timedelta(0) and abs(dt.datetime.now(dt.timezone.utc) - when) < dt.timedelta(hours=1)
    (out / "metrics.json").write_text("{}")
    finish(claim)
    m = read_marker(out)
    assert m["status"] == "complete" and m["files"] == ["metrics.json"] and "notes" not in m
    finish(claim_output(tmp_path / "n", "x", {"a": 1}, notes={"from": Path("c")}))
    assert read_marker(tmp_path / "n")["notes"] == {"from": "c"}


def test_another_run_is_refused_naming_its_command_and_what_differs(tmp_path):
    import re

    out = tmp_path / "o"
    claim = claim_output(out, "train", {"a": 1})
    (out / "m.json").write_text("{}")
    finish(claim)
    with pytest.raises(
        UsageError,
        match=rf"^--out: {re.escape(str(out))} holds another run \('train' with a: 1 -> 2\); "
        "choose another folder or pass --overwrite to replace it$",
    ):
        claim_output(out, "train", {"a": 2})
    with pytest.raises(UsageError, match=r"holds another run \('train', not 'eval'\)"):
        claim_output(out, "eval", {"a": 1})


def test_ignored_entries_do_not_make_a_folder_foreign(tmp_path):
    (tmp_path / "cache").mkdir()
    claim = claim_output(tmp_path, "x", {"a": 1}, ignore=("cache",))
    assert not claim.resume and claim.foreign == ()
    finish(claim)


def test_overwrite_is_refused_naming_every_entry_the_run_did_not_write(tmp_path):
    import re

    out = tmp_path / "o"
    claim = claim_output(out, "x", {"a": 1})
    (out / "m.json").write_text("{}")
    finish(claim)
    (out / "a.txt").write_text("mine")
    (out / "b.txt").write_text("mine")
    with pytest.raises(
        UsageError,
        match=rf"^--out: {re.escape(str(out))} holds files its run did not write \(a\.txt, b\.txt\); move them away "
        "first: --overwrite replaces only what anchorft wrote$",
    ):
        claim_output(out, "x", {"a": 2}, overwrite=True)


def test_entries_written_before_the_lock_is_taken_are_refused(tmp_path, monkeypatch):
    """The folder is checked again once locked: a writer between the first look and the lock is caught."""
    import re

    import anchorft.runs as runs

    real = runs._lock

    def lock_late(out, flag):
        (out / "theirs.txt").write_text("x")
        real(out, flag)

    monkeypatch.setattr(runs, "_lock", lock_late)
    with pytest.raises(
        UsageError,
        match=rf"^--dir: {re.escape(str(tmp_path))} is not empty and holds no anchorft run marker \({MARKER}\); "
        "--overwrite only replaces folders written by anchorft$",
    ):
        claim_output(tmp_path, "x", {"a": 1}, overwrite=True, flag="--dir")
    assert (tmp_path / "theirs.txt").read_text() == "x"


def test_claim_output_names_its_flag_in_each_refusal(tmp_path):
    import re

    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(UsageError, match=rf"^--dir: {re.escape(str(f))} exists and is a file, not a folder$"):
        claim_output(f, "x", {"a": 1}, flag="--dir")
    d = tmp_path / "d"
    d.mkdir()
    (d / "theirs.txt").write_text("x")
    with pytest.raises(UsageError, match=rf"^--dir: {re.escape(str(d))} is not empty and holds no anchorft run"):
        claim_output(d, "x", {"a": 1}, flag="--dir")


def test_a_marker_that_is_not_a_json_object_is_no_marker(tmp_path):
    from anchorft.runs import read_marker

    (tmp_path / MARKER).write_text("[1, 2]")
    assert read_marker(tmp_path) is None and same_run(tmp_path, "x", {"a": 1}) is None


def test_a_claim_interrupted_under_the_lock_releases_it_and_removes_the_folder_it_made(tmp_path, monkeypatch):
    import anchorft.runs as runs

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "_claim_locked", interrupted)
    with pytest.raises(KeyboardInterrupt):
        claim_output(tmp_path / "new", "x", {"a": 1})
    assert not (tmp_path / "new").exists()
    with pytest.raises(KeyboardInterrupt):
        claim_output(tmp_path, "x", {"a": 1})
    assert _lockable(tmp_path / runs.LOCK) and str(tmp_path.resolve()) not in runs._LOCKS


def test_a_folder_that_can_no_longer_be_written_is_not_reported_marked(tmp_path, monkeypatch):
    import anchorft.runs as runs

    out = tmp_path / "o"
    claim_output(out, "x", {"a": 1})
    (out / "part.json").write_text("{}")

    def read_only(*args):  # e.g. the disk filled or the file system was remounted read-only mid-run
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(runs, "_write_marker", read_only)
    assert mark_active("interrupted") == []  # no folder named as marked: its marker could not be written
    assert not runs._ACTIVE and _lockable(out / runs.LOCK)  # and the run is let go, its lock released


def _killed(claim):
    """What a killed process leaves behind: its files and marker; the kernel releases its lock."""
    from anchorft import runs

    runs._ACTIVE.remove(claim)
    runs._unlock(claim.out)


@pytest.mark.parametrize("ends", ["failed", "finished"])
def test_a_replacement_after_a_killed_replacement_keeps_the_first_run_aside(tmp_path, ends):
    from anchorft.runs import ASIDE

    out = tmp_path / "o"
    a = claim_output(out, "x", {"a": 1})
    (out / "old.json").write_text("old")
    finish(a)
    b = claim_output(out, "x", {"a": 2}, overwrite=True)  # sets the first run aside
    (out / "b.json").write_text("partial")
    _killed(b)
    c = claim_output(out, "x", {"a": 3}, overwrite=True)
    # the killed replacement's partial output goes; the first run stays aside, as it was
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [MARKER]
    assert sorted(p.name for p in (out / ASIDE).iterdir()) == [MARKER, "old.json"]
    (out / "c.json").write_text("c")
    if ends == "failed":
        assert mark_active("failed") == []
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [MARKER, "old.json"]
        assert (out / "old.json").read_text() == "old" and same_run(out, "x", {"a": 1}) == "complete"
    else:
        finish(c)
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [MARKER, "c.json"]
        assert same_run(out, "x", {"a": 3}) == "complete" and not (out / ASIDE).exists()


def test_an_out_that_cannot_be_created_is_refused_naming_the_flag(tmp_path, monkeypatch):
    """A read-only file system or parent (faked: root may write anywhere): one line naming the flag and the reason."""

    def denied(self, *a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(type(tmp_path), "mkdir", denied)
    with pytest.raises(UsageError, match=r"^--output_dir: .*new cannot be created \(Read-only file system\); choose"):
        claim_output(tmp_path / "new", "train", {}, flag="--output_dir")
