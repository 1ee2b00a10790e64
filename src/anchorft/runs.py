"""Output folders that are never silently overwritten or mixed: checked first, claimed with a run marker.

Every command that writes a folder calls `claim_output(out, command, config)` before it loads a model
or reads data. The folder must not be a file and must be writable; `out/anchorft-run.json` (the run
marker) records the command, a hash of its resolved config and the run's status ("running",
"complete", "interrupted", "failed"):

- no folder, or an empty one (or one holding only a marker): a new run;
- a marker with the same config hash: the same run again. `RunClaim.resume` is True and the command
  picks up where it stopped (the testbed comparison keeps its finished fine-tunes, `train` resumes
  from its last complete checkpoint); `RunClaim.complete` says the run had finished;
- a marker with another hash, or a non-empty folder without a marker: a `UsageError`, unless
  `overwrite` (then a folder holding a marker is emptied first; a folder without one never is).

`finish(claim)` marks the run complete; `anchorft.cli.main` marks every claimed run "interrupted" on
Ctrl-C and "failed" on an error, so partial outputs are never mistaken for results.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anchorft.errors import UsageError

__all__ = ["MARKER", "RunClaim", "claim_output", "check_output_dir", "config_hash", "finish", "mark_active"]
__all__ += ["same_run", "reused", "existing_files", "fail", "read_marker"]

MARKER = "anchorft-run.json"
_ACTIVE: list[RunClaim] = []


@dataclass
class RunClaim:
    out: Path
    command: str
    config_hash: str
    resume: bool  # the folder held this same run (same command and config hash)
    complete: bool  # ... and it had finished
    config: Any = None
    created: bool = False  # the folder did not exist before this claim
    notes: Any = None  # recorded in the marker, not part of the hash

    @property
    def marker(self) -> Path:
        return self.out / MARKER


def config_hash(config: Any) -> str:
    """SHA-256 (16 hex digits) of `config` as canonical JSON (sorted keys; non-JSON values via str)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_output_dir(out: str | os.PathLike, flag: str = "--out") -> Path:
    """`out` is a folder or can be created, and is writable; otherwise a UsageError naming `flag`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag}: {out} exists and is a file, not a folder")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag}: {out} cannot be created ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: {probe} is not writable")
    return out


def same_run(out: str | os.PathLike, command: str, config: Any) -> str | None:
    """The status of the run of `command` with `config`'s hash that `out` holds, else None (read only: every
    process of a distributed run may ask, while only the first claims the folder)."""
    marker = _read_marker(Path(out) / MARKER)
    if marker is None or marker.get("command") != command or marker.get("config_hash") != config_hash(config):
        return None
    return str(marker.get("status"))


def read_marker(out: str | os.PathLike) -> dict | None:
    """The run marker of folder `out` (command, config_hash, status, config, notes), or None."""
    return _read_marker(Path(out) / MARKER)


def _read_marker(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(claim: RunClaim, status: str) -> None:
    from anchorft.io import write_json

    write_json(
        claim.marker,
        {
            "command": claim.command,
            "config_hash": claim.config_hash,
            "status": status,
            "config": json.loads(json.dumps(claim.config, default=str)),
            **({"notes": json.loads(json.dumps(claim.notes, default=str))} if claim.notes is not None else {}),
            "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    )


def claim_output(
    out: str | os.PathLike,
    command: str,
    config: Any,
    overwrite: bool = False,
    flag: str = "--out",
    ignore: tuple[str, ...] = (),
    notes: Any = None,
    rerun_finished: bool = False,
) -> RunClaim:
    """Check `out` and claim it for this run (module docstring); `ignore`: entries that do not make it non-empty;
    `notes`: recorded in the marker, outside the hash; `rerun_finished`: the command runs again over a finished
    run of the same hash (keeping what it finished, e.g. the evaluation suite's pairs), so the marker says
    "running" until it finishes again."""
    out = check_output_dir(out, flag)
    digest = config_hash(config)
    resume = complete = False
    if out.is_dir():
        entries = [p for p in out.iterdir() if p.name not in ignore]
        marker = _read_marker(out / MARKER)
        if [p.name for p in entries] == [MARKER]:  # a run that stopped before it wrote anything
            marker, entries = None, []
        if marker is not None:
            same = marker.get("command") == command and marker.get("config_hash") == digest
            if same and not overwrite:
                resume, complete = True, marker.get("status") == "complete"
            elif not overwrite:
                raise UsageError(
                    f"{flag}: {out} holds another run ({marker.get('command')!r}, config {marker.get('config_hash')}; "
                    f"this one: config {digest}); choose another folder or pass --overwrite to replace it"
                )
            else:
                for p in entries:
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        elif entries:
            why = "choose an empty or new folder"
            if overwrite:
                why = "--overwrite only replaces folders written by anchorft"
            raise UsageError(f"{flag}: {out} is not empty and holds no anchorft run marker ({MARKER}); {why}")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    claim = RunClaim(out, command, digest, resume, complete, config, created, notes)
    if not complete or rerun_finished:  # a finished run is otherwise left as it is: the command reuses it
        _write_marker(claim, "running")
        _ACTIVE.append(claim)
    return claim


def reused(claim: RunClaim) -> str:
    """The message a command prints when `claim` found the same run finished (and does nothing)."""
    return (
        f"{claim.out} already holds this finished run ({claim.command}, config {claim.config_hash}): reusing it "
        "(--overwrite to run it again)"
    )


def finish(claim: RunClaim) -> None:
    """Mark the run complete."""
    _write_marker(claim, "complete")
    if claim in _ACTIVE:
        _ACTIVE.remove(claim)


def _stop(claim: RunClaim, status: str) -> bool:
    """Mark `claim` with `status`; a run that failed before writing anything leaves nothing (its marker, and its
    folder when the claim made it, are removed). Whether the folder remains, marked."""
    if claim in _ACTIVE:
        _ACTIVE.remove(claim)
    try:
        if status == "failed" and [p.name for p in claim.out.iterdir()] == [MARKER]:
            claim.marker.unlink()
            if claim.created:
                claim.out.rmdir()
            return False
        _write_marker(claim, status)
        return True
    except OSError:
        return False


def fail(claim: RunClaim) -> None:
    """Mark the run "failed" (a command that reports an error itself calls this; cli.main does it otherwise)."""
    _stop(claim, "failed")


def mark_active(status: str) -> list[Path]:
    """Mark every run claimed in this process and not finished with `status` ("interrupted" / "failed");
    the folders that hold partial outputs."""
    done = []
    while _ACTIVE:
        claim = _ACTIVE[-1]
        if _stop(claim, status):
            done.append(claim.out)
    return done


def existing_files(out: str | os.PathLike, *names: str) -> str:
    """ "OUT/a, OUT/b" for the `names` that exist in `out` (end-of-run messages name only files written)."""
    return ", ".join(str(Path(out) / n) for n in names if (Path(out) / n).exists()) or f"nothing in {out}"
