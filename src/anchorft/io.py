"""The project's files: atomic writes of JSON, JSONL, text and PNG figures (temp file, then `os.replace`),
and JSONL reading.

One place for what every run writes, so that a run killed half-way never leaves a truncated
metrics.json or figure behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "write_text",
    "write_json",
    "write_jsonl",
    "iter_jsonl",
    "pyplot",
    "save_figure",
    "new_file_mode",
]


def new_file_mode() -> int:
    """The mode `open()` gives a new file under the user's umask (0o666 & ~umask), e.g. 0o644.

    `tempfile.mkstemp` creates files 0o600 whatever the umask; the atomic writers chmod their temporary
    file to this mode, so results are as readable as any file the user writes (on a shared cluster too)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """A temporary file beside `path` (parents created, mode `new_file_mode()`) for the block to write; it
    replaces `path` when the block ends without an error, and is removed in any case."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, new_file_mode())  # after the write: a writer that replaces the file (safetensors) leaves 0o600
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_path(path, ".txt") as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any, indent: int = 1, **dump_kwargs: Any) -> None:
    """Write `obj` as JSON (trailing newline) to `path` atomically; `dump_kwargs` go to `json.dumps`."""
    write_text(path, json.dumps(obj, indent=indent, **dump_kwargs) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Write one JSON object per line to `path` atomically."""
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def iter_jsonl(
    path: str | Path,
    skip_bad: bool = False,
    bad: list[str] | None = None,
    parse: Callable[[int, int, dict], Any] | None = None,
) -> Iterator[tuple[int, int, Any]]:
    """Yield (index, line number, object) for each non-blank line of a JSONL file; with `parse`, the object is
    `parse(index, line number, object)`, which raises ValueError (one line, no file or line) for a row it cannot use.

    A line that is not a JSON object, or that `parse` refuses, raises ValueError naming the file and line, or with
    `skip_bad` is skipped and described in `bad`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such JSONL file: {path}")
    with path.open(encoding="utf-8") as fh:
        numbered = ((lineno, line) for lineno, line in enumerate(fh, start=1) if line.strip())
        for index, (lineno, line) in enumerate(numbered):
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            except ValueError as e:
                why, what = e, f"malformed JSON line ({e})"
            else:
                try:
                    row = obj if parse is None else parse(index, lineno, obj)
                except ValueError as e:
                    why = what = e
                else:
                    yield index, lineno, row
                    continue
            if not skip_bad:
                raise ValueError(f"{path}: line {lineno}: {what}; pass --skip-bad to skip such lines") from None
            if bad is not None:
                bad.append(f"line {lineno}: {why}")


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend: the one place the project sets the backend."""
    import matplotlib  # lazy: loads matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: loads matplotlib

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 100, **savefig_kwargs: Any) -> None:
    """Save a matplotlib figure as PNG to `path` atomically, then close it."""
    import matplotlib.pyplot as plt  # lazy: loads matplotlib

    try:
        with atomic_path(path, ".png") as tmp:
            fig.savefig(tmp, dpi=dpi, format="png", **savefig_kwargs)
    finally:
        plt.close(fig)
