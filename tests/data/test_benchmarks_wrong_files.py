"""`anchorft data benchmarks` over a folder that already holds a wrong file where a release file goes.

Each way a file can be wrong (truncated, extended, edited at the same size and time, empty, a folder in its place,
unreadable) is refused with one line that names the file and `--overwrite` (exit 2), or replaced under `--overwrite`;
it is never counted as checked. A small stand-in manifest (three files, their SHA-256) replaces the release's, so
the tests need neither the release's files nor the network."""

from __future__ import annotations

import builtins
import hashlib
import os
from pathlib import Path

import pytest

import anchorft.data.benchmarks as benchmarks_module
from anchorft.cli import main
from anchorft.data.benchmarks import fetch_benchmarks

CONTENT = {
    "id/first.jsonl": b'{"prompt": "one", "reward_model": {"ground_truth": "1"}}\n' * 40,
    "id/second.jsonl": b'{"prompt": "two", "reward_model": {"ground_truth": "2"}}\n' * 40,
    "ood/third.jsonl": b'{"prompt": "three", "reward_model": {"ground_truth": "C"}}\n' * 40,
}
WRONG = "id/second.jsonl"  # between a file before it (checked) and one after it (not reached when refused)


@pytest.fixture
def release(tmp_path, monkeypatch) -> Path:
    """A --from folder holding the stand-in release, whose manifest replaces the real one."""
    src = tmp_path / "release"
    for rel, data in CONTENT.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    manifest = {rel: (len(data), hashlib.sha256(data).hexdigest()) for rel, data in CONTENT.items()}
    monkeypatch.setattr(benchmarks_module, "FILES", manifest)
    return src


def _truncated(path: Path, monkeypatch) -> None:
    path.write_bytes(CONTENT[WRONG][:-7])


def _extended(path: Path, monkeypatch) -> None:
    path.write_bytes(CONTENT[WRONG] + b"\n")


def _same_size_and_time(path: Path, monkeypatch) -> None:
    """One byte changed; the size and the modification time those of the release's file."""
    data = bytearray(CONTENT[WRONG])
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    assert path.stat().st_size == len(CONTENT[WRONG])
    st = (path.parents[2] / "release" / WRONG).stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _empty(path: Path, monkeypatch) -> None:
    path.write_bytes(b"")


def _folder(path: Path, monkeypatch) -> None:
    path.mkdir()


def _unreadable(path: Path, monkeypatch) -> None:
    """The release's very bytes, but unreadable: what cannot be hashed is not checked. chmod 000 does not stop root
    from reading, so as root an open of this path raises PermissionError instead (as it does for anyone else)."""
    path.write_bytes(CONTENT[WRONG])
    if os.geteuid() != 0:
        path.chmod(0)
        return
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(benchmarks_module, "open", refusing_open, raising=False)  # the module's `open`: sha256's


CASES = {
    "truncated": _truncated,
    "extended": _extended,
    "same size and time, one byte edited": _same_size_and_time,
    "empty": _empty,
    "an empty folder": _folder,
    "unreadable": _unreadable,
}


def _out_with_a_wrong_file(tmp_path: Path, monkeypatch, make) -> Path:
    out = tmp_path / "out"
    (out / "id").mkdir(parents=True)
    (out / "id" / "first.jsonl").write_bytes(CONTENT["id/first.jsonl"])  # right: kept, and counted as checked
    make(out / WRONG, monkeypatch)
    return out


def _state(path: Path) -> object:
    """What is at `path`, to see it left as it was: a folder's listing or a file's bytes (read as root may)."""
    if path.is_dir():
        return sorted(p.name for p in path.iterdir())
    mode = path.stat().st_mode
    path.chmod(0o600)
    try:
        return path.read_bytes()
    finally:
        path.chmod(mode)


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_file_is_refused_in_one_line_naming_it_and_overwrite(release, tmp_path, monkeypatch, capsys, case):
    out = _out_with_a_wrong_file(tmp_path, monkeypatch, CASES[case])
    before = _state(out / WRONG)
    assert main(["data", "benchmarks", "--from", str(release), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(out / WRONG) in err and "--overwrite" in err, err
    assert "[1/3] id/first.jsonl: already there, checked" in captured.out  # the right file before it: checked
    assert f"{WRONG}: already there" not in captured.out and "files in" not in captured.out  # never counted
    assert _state(out / WRONG) == before  # left as it was
    assert not (out / "ood" / "third.jsonl").exists()  # nothing after the refusal


@pytest.mark.parametrize("case", list(CASES))
def test_overwrite_replaces_a_wrong_file_with_the_checked_one(release, tmp_path, monkeypatch, capsys, case):
    out = _out_with_a_wrong_file(tmp_path, monkeypatch, CASES[case])
    assert main(["data", "benchmarks", "--from", str(release), "--out", str(out), "--overwrite"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"[2/3] {WRONG}: copied, SHA-256 checked ({len(CONTENT[WRONG]):,} bytes)" in lines  # checked as a copy
    assert not any(line.startswith(f"[2/3] {WRONG}: already there") for line in lines)  # not as already there
    assert "[1/3] id/first.jsonl: already there, checked" in lines and "3 files in " + str(out) in "\n".join(lines)
    monkeypatch.undo()  # an unreadable stand-in reads again
    for rel, data in CONTENT.items():
        assert (out / rel).is_file() and (out / rel).read_bytes() == data


def test_a_folder_with_files_in_it_is_refused_even_with_overwrite(release, tmp_path, capsys):
    """--overwrite replaces a file or an empty folder; it never deletes files that anchorft did not write."""
    out = tmp_path / "out"
    (out / WRONG).mkdir(parents=True)
    (out / WRONG / "notes.txt").write_text("the user's\n")
    for extra in ([], ["--overwrite"]):
        assert main(["data", "benchmarks", "--from", str(release), "--out", str(out), *extra]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and str(out / WRONG) in err and "--overwrite" in err, err
        assert "folder with files" in err and f"{WRONG}: already there" not in captured.out
        assert (out / WRONG / "notes.txt").read_text() == "the user's\n"


@pytest.mark.parametrize("case", list(CASES))
def test_the_download_path_refuses_a_wrong_file_too(release, tmp_path, monkeypatch, case):
    """Without --from (file:// URLs stand in for the release's host): the same refusal, before any download."""
    out = _out_with_a_wrong_file(tmp_path, monkeypatch, CASES[case])
    seen: list[str] = []
    with pytest.raises(ValueError, match="--overwrite") as info:
        fetch_benchmarks(out, base_url=release.resolve().as_uri(), log=seen.append)
    assert str(out / WRONG) in str(info.value) and "\n" not in str(info.value)
    assert seen == ["[1/3] id/first.jsonl: already there, checked"]


def test_a_right_file_is_checked_by_its_bytes_whatever_its_time(release, tmp_path, capsys):
    """The same bytes with an old modification time (and a second run, unchanged) are checked, not re-copied."""
    out = tmp_path / "out"
    for rel, data in CONTENT.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    os.utime(out / WRONG, (1, 1))
    assert main(["data", "benchmarks", "--from", str(release), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "already there, checked" in line] == [
        f"[{i}/3] {rel}: already there, checked" for i, rel in enumerate(sorted(CONTENT), 1)
    ]
    assert (out / WRONG).stat().st_mtime == 1  # kept, not rewritten
