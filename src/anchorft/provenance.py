"""What produced a run: the package version, the git commit of the code (and whether its tree had local changes),
and the versions of the libraries the numbers depend on. Every metrics.json / results.json carries it under the key
"provenance", so a figure can be traced to the code that made it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import anchorft
from anchorft.io import write_json

__all__ = ["provenance", "git_state", "with_provenance", "write_metrics", "LIBRARIES"]

LIBRARIES = ("torch", "transformers", "trl", "numpy")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):  # no git on the machine, or it hangs
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(root: str | os.PathLike | None = None) -> dict[str, Any]:
    """{"commit": sha or None, "dirty": bool or None} of the git checkout holding `root` (default: this package's
    source directory, i.e. the code that runs). None where `root` holds no file tracked by a git checkout (an
    installed wheel, a tarball, a copy inside an ignored folder) or git is missing. "dirty" counts changes to
    tracked files only, not untracked ones."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None or not _git(root, "ls-files", "--", "."):
        return {"commit": None, "dirty": None}
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


@lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    return {
        "anchorft": anchorft.__version__,
        "python": platform.python_version(),
        **{lib: _version(lib) for lib in LIBRARIES},
    }


def provenance() -> dict[str, Any]:
    """The provenance record of a run: package and library versions (None when not installed) and the git state."""
    git = git_state()
    return {**_static(), "git_commit": git["commit"], "git_dirty": git["dirty"]}


def with_provenance(metrics: dict) -> dict:
    """`metrics` with a "provenance" entry (a new dict; the caller's is left as it is)."""
    return {**metrics, "provenance": provenance()}


def write_metrics(path: str | os.PathLike, metrics: dict, indent: int = 1, **dump_kwargs: Any) -> None:
    """Write a run's metrics (or results) JSON atomically, with its provenance (see `provenance`)."""
    write_json(path, with_provenance(metrics), indent=indent, **dump_kwargs)
