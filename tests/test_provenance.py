"""Run provenance: package/library versions and the git state recorded in every metrics file."""

import json
import shutil
import subprocess
from importlib import metadata

import pytest

import anchorft
from anchorft.provenance import git_state, provenance, write_metrics

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo, *args):
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@needs_git
def test_git_state_commit_and_dirty(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    ref = (repo / ".git" / "HEAD").read_text().split()[1]  # "ref: refs/heads/<branch>", whatever its name
    expected = (repo / ".git" / ref).read_text().strip()
    assert git_state(repo) == {"commit": expected, "dirty": False}
    (repo / "copy").mkdir()  # a directory with no tracked file (e.g. a copy of the code in an ignored folder)
    (repo / "copy" / "b.txt").write_text("copied\n")
    assert git_state(repo / "copy") == {"commit": None, "dirty": None}
    (repo / "new.txt").write_text("untracked\n")  # untracked files do not make the tree dirty
    assert git_state(repo)["dirty"] is False
    (repo / "a.txt").write_text("two\n")
    assert git_state(repo) == {"commit": expected, "dirty": True}


def test_git_state_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path counts
    assert git_state(tmp_path) == {"commit": None, "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable at all
    assert git_state(tmp_path) == {"commit": None, "dirty": None}


def test_provenance_versions_and_written_metrics(tmp_path):
    p = provenance()
    assert p["anchorft"] == anchorft.__version__
    for lib in ("torch", "transformers", "trl"):
        assert p[lib] == metadata.version(lib)
    assert {"git_commit", "git_dirty", "python"} <= set(p)
    metrics = {"loss": 1.5}
    write_metrics(tmp_path / "m" / "metrics.json", metrics)
    on_disk = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert on_disk["loss"] == 1.5 and on_disk["provenance"] == p
    assert metrics == {"loss": 1.5}  # the caller's dict is left as it is
