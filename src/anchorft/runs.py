"""Output folders that are never silently overwritten or mixed: checked first, claimed with a run marker.

Every command that writes a folder runs its work through `run_claimed(out, command, config, work)`, called after
its other input checks and before it loads a model or reads data: the folder is claimed (`claim_output`), a finished
identical run is reused (its line printed, `work` not called), otherwise `work(claim)` runs and the run is marked
complete (`finish`) or, on an error, failed (`fail`). The life cycle is written once, here, so that no command can
forget a step of it. The folder must not be a file and must be writable; `out/anchorft-run.json` (the run
marker) records the command, a hash of its resolved config and the run's status ("running",
"complete", "interrupted", "failed"). The same command and hash again is the same run: `RunClaim.resume` is
True and the command picks up where it stopped; `RunClaim.complete` says the run had finished. Another hash,
or a non-empty folder without a marker, is a `UsageError` unless `overwrite` (a folder without a marker never
is replaced). docs/runs.md ("Output folders and run markers") has every case, and how nothing is lost on the
way: the folder's lock (OUT/.anchorft-lock, held by the claiming process while the run is active), the entries a
stopped run's marker lists as its own (`files`), the old run that `--overwrite` keeps aside (OUT/.anchorft-replaced)
until the new one finishes and puts back if it does not.

`finish(claim)` marks the run complete, unless a signal was recorded (anchorft.stop): then it raises it;
`anchorft.cli.main` marks every claimed run "interrupted" on Ctrl-C or SIGTERM and "failed" on an error, so
partial outputs are never mistaken for results.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from anchorft import stop
from anchorft.errors import UsageError
from anchorft.io import write_json

__all__ = [
    "MARKER",
    "LOCK",
    "ASIDE",
    "RunClaim",
    "claim_output",
    "config_diff",
    "check_output_dir",
    "config_hash",
    "finish",
    "mark_active",
    "run_claimed",
]
__all__ += ["same_run", "reused", "existing_files", "fail", "read_marker"]

MARKER = "anchorft-run.json"
LOCK = ".anchorft-lock"  # flock'ed while a run is active; holds "PID HOST" of the process that holds it
ASIDE = ".anchorft-replaced"  # the run that --overwrite replaces, until the new one finishes
_INTERNAL = (MARKER, LOCK, ASIDE)
_ACTIVE: list[RunClaim] = []
_LOCKS: dict[str, int] = {}  # resolved folder -> file descriptor of its lock held by this process
T = TypeVar("T")


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
    foreign: tuple[str, ...] = ()  # entries the folder held that no run of anchorft wrote (never listed as its own)

    @property
    def marker(self) -> Path:
        return self.out / MARKER


def config_hash(config: Any, length: int = 16, separators: tuple[str, str] = (",", ":")) -> str:
    """SHA-256 (`length` hex digits) of `config` as canonical JSON (sorted keys; non-JSON values via str)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=separators)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def config_diff(old: Any, new: Any, limit: int = 4) -> str:
    """The fields where two run configs differ, "key: old -> new" (nested keys dotted, sorted), the first `limit`
    of them and how many more; "another config" when the old one is unknown (a marker without it)."""
    if not isinstance(old, dict):
        return "another config"
    a, b = _flat(json.loads(json.dumps(old, default=str))), _flat(json.loads(json.dumps(new, default=str)))
    missing = object()
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, missing) != b.get(k, missing))
    if not keys:
        return "another config"

    def show(v: Any) -> str:
        return "(unset)" if v is missing else json.dumps(v)

    parts = [f"{k}: {show(a.get(k, missing))} -> {show(b.get(k, missing))}" for k in keys[:limit]]
    more = f"; {len(keys) - limit} more" if len(keys) > limit else ""
    return "; ".join(parts) + more


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def check_output_dir(out: str | os.PathLike, flag: str = "--out") -> Path:
    """`out` is a folder or can be created, and is writable; otherwise a UsageError naming `flag`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag}: {out} exists and is a file, not a folder")
    probe = out
    while not probe.exists() and probe.parent != probe:
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
    write_json(
        claim.marker,
        {
            "command": claim.command,
            "config_hash": claim.config_hash,
            "status": status,
            "config": json.loads(json.dumps(claim.config, default=str)),
            **({"notes": json.loads(json.dumps(claim.notes, default=str))} if claim.notes is not None else {}),
            **({"files": _own_entries(claim)} if status != "running" else {}),
            "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    )


def _entries(out: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """The folder's entries, sorted, anchorft's own bookkeeping (marker, lock, replaced run) and `ignore` aside."""
    return sorted(p.name for p in out.iterdir() if p.name not in _INTERNAL and p.name not in ignore)


def _own_entries(claim: RunClaim) -> list[str]:
    try:
        return [n for n in _entries(claim.out) if n not in claim.foreign]
    except OSError:
        return []


def _foreign(marker: dict, entries: list[str]) -> list[str]:
    """Entries that the run of `marker` did not write (a marker written while the run was active, or by an older
    anchorft, lists nothing: then every entry is the run's)."""
    files = marker.get("files")
    return [n for n in entries if n not in files] if isinstance(files, list) else []


def _remove(p: Path) -> None:
    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _lock(out: Path, flag: str) -> None:
    """Take the exclusive lock of folder `out` (re-entrant within this process), or a UsageError naming the PID and
    host of the process that holds it."""
    key = str(out.resolve())
    if key in _LOCKS:
        return
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):  # a filesystem without locks: go on
            os.close(fd)
            return
        holder = os.pread(fd, 200, 0).decode(errors="replace").split()
        os.close(fd)
        who = f"PID {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
        raise UsageError(
            f"{flag}: {out} is in use by a live run ({who}); wait for it to end or choose another folder"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    _LOCKS[key] = fd


def _unlock(out: Path, remove: bool = False) -> None:
    fd = _LOCKS.pop(str(out.resolve()), None)
    if fd is None:
        return
    if remove:  # the folder is about to go: drop the lock file while it is still held
        (out / LOCK).unlink(missing_ok=True)
    os.close(fd)


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
    "running" until it finishes again. Call it after every other input check: nothing is moved before it."""
    out = check_output_dir(out, flag)
    if out.is_dir() and _read_marker(out / MARKER) is None and _entries(out, ignore):
        _refuse_unmarked(out, flag, overwrite)  # before anything is written into a folder that is not anchorft's
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a read-only file system, a parent the user may not write: name the flag
        why = e.strerror or type(e).__name__
        raise UsageError(f"{flag}: {out} cannot be created ({why}); choose a folder you can write") from None
    try:
        _lock(out, flag)
        claim = _claim_locked(out, command, config, overwrite, flag, ignore, notes, created)
    except BaseException:
        if str(out.resolve()) in _LOCKS:
            _unlock(out, remove=created)
            if created:  # another launch may have taken the folder since the lock was dropped: then it stays
                with contextlib.suppress(OSError):
                    out.rmdir()
        raise
    if not claim.complete or rerun_finished:  # a finished run is otherwise left as it is: the command reuses it
        _write_marker(claim, "running")
        _ACTIVE.append(claim)
    else:
        _unlock(out)
    return claim


def _refuse_unmarked(out: Path, flag: str, overwrite: bool) -> None:
    why = "--overwrite only replaces folders written by anchorft" if overwrite else "choose an empty or new folder"
    raise UsageError(f"{flag}: {out} is not empty and holds no anchorft run marker ({MARKER}); {why}")


def _claim_locked(out, command, config, overwrite, flag, ignore, notes, created) -> RunClaim:
    digest = config_hash(config)
    resume = complete = False
    entries = _entries(out, ignore)
    marker = _read_marker(out / MARKER)
    if marker is not None and not entries and not (out / ASIDE).exists():
        marker = None  # a run that stopped before it wrote anything
    foreign: list[str] = []
    if marker is not None:
        foreign = _foreign(marker, entries)
        same = marker.get("command") == command and marker.get("config_hash") == digest
        if same and not overwrite:
            resume, complete = True, marker.get("status") == "complete"
        elif not overwrite:
            if marker.get("command") != command:
                what = f"{marker.get('command')!r}, not {command!r}"
            else:
                what = f"{command!r} with {config_diff(marker.get('config'), config)}"
            raise UsageError(
                f"{flag}: {out} holds another run ({what}); choose another folder or pass --overwrite to replace it"
            )
        elif foreign:
            raise UsageError(
                f"{flag}: {out} holds files its run did not write ({', '.join(foreign)}); move them away first: "
                "--overwrite replaces only what anchorft wrote"
            )
        else:
            _set_aside(out, entries)
    elif entries:
        _refuse_unmarked(out, flag, overwrite)
    return RunClaim(out, command, digest, resume, complete, config, created, notes, tuple(foreign))


def _set_aside(out: Path, entries: list[str]) -> None:
    """Move the run in `out` (its entries and marker) into OUT/.anchorft-replaced; an exception on the way (Ctrl-C,
    SIGTERM) moves them back. A folder already holding one is in the middle of a replacement that never finished
    (killed): its entries are that unfinished run's, and go; the replaced run stays aside."""
    aside = out / ASIDE
    if aside.exists():
        for name in entries:
            _remove(out / name)
        (out / MARKER).unlink(missing_ok=True)
        return
    aside.mkdir()
    moved: list[str] = []
    try:
        for name in [*entries, MARKER]:
            if (out / name).exists() or (out / name).is_symlink():
                os.replace(out / name, aside / name)
                moved.append(name)
    except BaseException:
        for name in moved:
            os.replace(aside / name, out / name)
        aside.rmdir()
        raise


def _restore_aside(claim: RunClaim) -> bool:
    """Put back the run that this one was replacing (its own entries go); whether there was one."""
    aside = claim.out / ASIDE
    if not aside.is_dir():
        return False
    for name in _own_entries(claim):
        _remove(claim.out / name)
    claim.marker.unlink(missing_ok=True)
    for p in aside.iterdir():
        os.replace(p, claim.out / p.name)
    aside.rmdir()
    return True


def reused(claim: RunClaim) -> str:
    """The message a command prints when `claim` found the same run finished (and does nothing)."""
    return (
        f"{claim.out} already holds this finished run ({claim.command}, config {claim.config_hash}): reusing it "
        "(--overwrite to run it again)"
    )


def finish(claim: RunClaim) -> None:
    """Mark the run complete (and delete the run it replaced, if any); release the folder.

    A signal recorded on the way (anchorft.stop), even one that library code swallowed, raises here instead: the
    caller's interrupt path then marks the run interrupted and puts back the run an --overwrite was replacing."""
    stop.check()
    _write_marker(claim, "complete")
    if (claim.out / ASIDE).exists():
        shutil.rmtree(claim.out / ASIDE)
    if claim in _ACTIVE:
        _ACTIVE.remove(claim)
    _unlock(claim.out)


def run_claimed(
    out: str | os.PathLike,
    command: str,
    config: Any,
    work: Callable[[RunClaim], T],
    *,
    overwrite: bool = False,
    flag: str = "--out",
    notes: Any = None,
    rerun_finished: bool = False,
    ignore: tuple[str, ...] = (),
) -> T | None:
    """Claim `out` for `command` with `config` (`claim_output`: the same arguments), run `work(claim)` in it and
    mark the run complete; `work`'s result, or None when the folder held this run finished (its `reused` line is
    printed and `work` is not called; with `rerun_finished` it runs again). `work` returns something other than None
    (True when it has no result), so that the caller tells the two apart.

    An exception from `work` marks the run failed (its partial files kept and listed, or nothing left when it wrote
    nothing; an --overwrite's old run put back) and propagates: the command, or `anchorft.cli.main`, reports it.
    A signal (KeyboardInterrupt, anchorft.stop's exceptions, an error raised while a signal was recorded) leaves
    the run to `cli.main`, which marks it interrupted; `finish` raises a signal that library code swallowed."""
    claim = claim_output(out, command, config, overwrite, flag, ignore, notes, rerun_finished)
    if claim.complete and not rerun_finished:
        print(reused(claim))
        return None
    try:
        result = work(claim)
        if result is None:
            raise TypeError(f"{command}: its work returned None, which reads as a reused run; return True")
    except Exception:
        if not stop.requested():  # an error that stands for a signal is the interrupt path's (cli.main)
            fail(claim)
        raise
    finish(claim)
    return result


def _stop(claim: RunClaim, status: str) -> bool:
    """Mark `claim` with `status`; a run that failed before writing anything leaves nothing (its marker, and its
    folder when the claim made it, are removed). Whether the folder remains, marked."""
    if claim in _ACTIVE:
        _ACTIVE.remove(claim)
    try:
        if _restore_aside(claim):  # a replacement that did not finish: the old run is back, as it was
            return False
        if status == "failed" and not _own_entries(claim) and not claim.foreign:
            claim.marker.unlink()
            _unlock(claim.out, remove=True)
            if claim.created:
                claim.out.rmdir()
            return False
        _write_marker(claim, status)
        return True
    except OSError:
        return False
    finally:
        _unlock(claim.out)


def fail(claim: RunClaim) -> None:
    """Mark the run "failed" (`run_claimed` calls this on an error from the work; cli.main does it otherwise)."""
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
