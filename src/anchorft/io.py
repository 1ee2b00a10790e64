"""Atomic writes of the project's artifacts: JSON, text and PNG figures (temp file, then `os.replace`).

One place for what every run writes, so that a run killed half-way never leaves a truncated
metrics.json or figure behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_text", "write_json", "save_figure"]


def _atomic(path: str | os.PathLike, suffix: str) -> tuple[Path, str]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    return path, tmp


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    path, tmp = _atomic(path, ".txt")
    try:
        Path(tmp).write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_json(path: str | os.PathLike, obj: Any, indent: int = 1, **dump_kwargs: Any) -> None:
    """Write `obj` as JSON (trailing newline) to `path` atomically; `dump_kwargs` go to `json.dumps`."""
    write_text(path, json.dumps(obj, indent=indent, **dump_kwargs) + "\n")


def save_figure(fig, path: str | os.PathLike, dpi: int = 100, **savefig_kwargs: Any) -> None:
    """Save a matplotlib figure as PNG to `path` atomically, then close it."""
    import matplotlib.pyplot as plt

    path, tmp = _atomic(path, ".png")
    try:
        fig.savefig(tmp, dpi=dpi, format="png", **savefig_kwargs)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
