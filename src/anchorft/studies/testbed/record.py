"""A study's record, small enough for a repository: what `toy verdict`, `toy report` and a resumed `toy compare`
read from a study folder, packed into one JSON file per folder (`toy pack`) and written back (`toy unpack`), byte
for byte but for the paths that would name the machine.

A testbed fine-tune writes a 4 MB model and about 50 kB of grades and logs; the grades and the study's small files
are what its conclusions rest on. `pack` keeps the folder's text files outside runs/ (results.json, cells.jsonl,
config.yaml, anchorft-run.json, report.md, ...) verbatim but for the paths that would name the machine
(`_portable`), and each runs/*/scored_items.json compactly: the item keys, which every run of a comparison shares,
once per pack, and each 0-9 grade vector as a string of digits (a base of 100 fine-tunes packs to about 400 kB,
60 kB compressed; with its 60 WiSE-FT interpolations about 760 kB). Models (models/), the fine-tunes' own logs under
runs/, plots and other binary files are left out: WiSE-FT, which reads the models, runs before its folder is
packed. A study over several bases packs to one file per base folder (base-seedB.json) and one for the rest
(study.json), so that a study can be packed and kept base by base.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from anchorft.io import write_json, write_text
from anchorft.studies.testbed.layout import base_folders

__all__ = ["pack_folder", "unpack_folder", "pack_study", "unpack_study", "FORMAT"]

FORMAT = "anchorft-study-record/1"
SCORED = "scored_items.json"
TEXT_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".md", ".txt", ".csv")
SKIPPED_DIRS = ("models",)


def _files(folder: Path, skip: set[Path]) -> list[Path]:
    """The files a record keeps (sorted): text files outside runs/ folders, and every scored_items.json; models/,
    the fine-tunes' own logs and configs under runs/ and the folders in `skip` left out."""
    out = []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and here / d not in skip)
        in_runs = "runs" in here.relative_to(folder).parts
        out += [
            here / n
            for n in sorted(names)
            if (n == SCORED or (not in_runs and n.endswith(TEXT_SUFFIXES))) and not n.startswith(".tmp-")
        ]
    return out


def _grades(values: list) -> str | list:
    """A 0-9 grade vector as a string of digits ('0110...'); any other list as it is."""
    if all(type(v) is int and 0 <= v <= 9 for v in values):
        return "".join(map(str, values))
    return values


def _ungrades(packed: str | list) -> list:
    return [int(c) for c in packed] if isinstance(packed, str) else packed


def _map_grades(scores: dict, f) -> dict:
    """{split: {skill: {kind: f(grades)}}}."""
    return {s: {sk: {k: f(v) for k, v in g.items()} for sk, g in d.items()} for s, d in scores.items()}


def _pack_scored(obj: dict, keys: list[list], index: dict[str, int]) -> dict:
    """scored_items.json ({split: {skill: [item keys]}, ..., "scores": {split: {skill: {kind: grades}}}}) with each
    key list replaced by its index in `keys` (shared by the pack) and each grade vector by `_grades`."""
    out: dict = {}
    for split, skills in obj.items():
        if split == "scores":
            out[split] = _map_grades(skills, _grades)
            continue
        refs = {}
        for skill, item_keys in skills.items():
            text = json.dumps(item_keys)
            if text not in index:
                index[text] = len(keys)
                keys.append(item_keys)
            refs[skill] = index[text]
        out[split] = refs
    return out


def _unpack_scored(obj: dict, keys: list[list]) -> dict:
    out: dict = {}
    for split, skills in obj.items():
        if split == "scores":
            out[split] = _map_grades(skills, _ungrades)
        else:
            out[split] = {skill: keys[i] for skill, i in skills.items()}
    return out


def pack_folder(folder: str | os.PathLike, skip: tuple[str | os.PathLike, ...] = ()) -> dict:
    """The record of `folder`: {"format", "text": {relative path: content}, "scored": {relative path: packed},
    "keys": [item key lists]} (subfolders in `skip` left out)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"pack: {folder} is not a folder")
    keys: list[list] = []
    index: dict[str, int] = {}
    text, scored = {}, {}
    for path in _files(folder, {Path(s) for s in skip}):
        rel = path.relative_to(folder).as_posix()
        content = path.read_text(encoding="utf-8")
        if path.name == SCORED:
            obj = json.loads(content)
            scored[rel] = _pack_scored(obj, keys, index)
            if json.dumps(obj, indent=1) + "\n" != content:  # unpack writes it back this way
                raise ValueError(f"pack: {path} is not in the layout the comparison writes (json, indent 1)")
        else:
            text[rel] = _portable(content)
    return {"format": FORMAT, "text": text, "scored": scored, "keys": keys}


def _portable(content: str) -> str:
    """`content` naming no machine: absolute paths under the working folder relative to it, under the home folder
    from ~ (a study records its base model's cache path and the folders it was given)."""
    for root, short in ((Path.cwd(), ""), (Path.home(), "~/")):
        content = content.replace(f"{root}{os.sep}", short)
    return content


def unpack_folder(record: dict, folder: str | os.PathLike) -> int:
    """Write the files of `record` (`pack_folder`) under `folder`; an existing file with other content is refused
    (ValueError, before anything is written); returns the number of files written."""
    if record.get("format") != FORMAT:
        raise ValueError(f"unpack: not a study record (format {record.get('format')!r}, expected {FORMAT!r})")
    folder = Path(folder)
    files = dict(record["text"])
    for rel, packed in record["scored"].items():
        files[rel] = json.dumps(_unpack_scored(packed, record["keys"]), indent=1) + "\n"
    for rel, content in files.items():
        path = folder / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"unpack: {rel!r} leaves the folder")
        if path.is_file() and path.read_text(encoding="utf-8") != content:
            raise ValueError(f"unpack: {path} exists with other content; unpack into an empty folder")
    for rel, content in files.items():
        write_text(folder / rel, content)
    return len(files)


def pack_study(folder: str | os.PathLike, out: str | os.PathLike, only: list[int] | None = None) -> list[Path]:
    """Pack a study folder into OUT: one base-seedB.json per base folder (those of `only`, when given: a base
    still running is better left out, its models gone with it) and study.json for the rest (a comparison of one
    base: study.json alone). Returns the files written."""
    folder, out = Path(folder), Path(out)
    bases = base_folders(folder)
    if only is not None and (missing := sorted(set(only) - set(bases))):
        raise ValueError(f"pack: no base folder for {missing} in {folder} (found {sorted(bases)})")
    written = []
    for _, sub in sorted((b, f) for b, f in bases.items() if only is None or b in only):
        write_json(out / f"{sub.name}.json", pack_folder(sub), indent=None, separators=(",", ":"))
        written.append(out / f"{sub.name}.json")
    write_json(out / "study.json", pack_folder(folder, skip=tuple(bases.values())), indent=None, separators=(",", ":"))
    return [*written, out / "study.json"]


def unpack_study(records: str | os.PathLike, out: str | os.PathLike) -> int:
    """Write back every record of the folder `records` (`pack_study`) into the study folder OUT; returns the number
    of files written."""
    records, out = Path(records), Path(out)
    files = sorted(records.glob("*.json"))
    if not files:
        raise ValueError(f"unpack: no records (*.json) in {records}")
    n = 0
    for f in files:
        target = out if f.stem == "study" else out / f.stem
        n += unpack_folder(json.loads(f.read_text(encoding="utf-8")), target)
    return n
