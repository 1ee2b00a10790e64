"""`anchorft configs`: the configs shipped with anchorft (recipes, accelerate configs, model configs, RL, testbed
and weak-to-strong presets), usable by name wherever anchorft takes a `--config`.

    anchorft configs list [PREFIX]        names, e.g. rpsft/qwen2.5-7b-instruct/rpsft, accelerate/zero2
    anchorft configs path NAME            the file (for tools that need a path: accelerate's --config_file)
    anchorft configs copy NAME DIR        a copy to edit (refuses to overwrite an existing file)

A file on disk wins over a shipped config of the same name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from anchorft.commands.flags import FlagParser
from anchorft.resources import config_path, shipped_configs


def _parser() -> FlagParser:
    p = FlagParser(prog="anchorft configs", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="names of the shipped configs (under PREFIX)")
    ls.add_argument("prefix", nargs="?", default="")
    path = sub.add_parser("path", help="the file of a shipped config (or of a file given by path)")
    path.add_argument("name")
    cp = sub.add_parser("copy", help="copy a shipped config into DIR to edit it")
    cp.add_argument("name")
    cp.add_argument("dir")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "list":
        names = shipped_configs(args.prefix)
        if not names:
            raise ValueError(f"no shipped config under {args.prefix!r}; `anchorft configs list` shows them all")
        print("\n".join(names))
        return 0
    src = config_path(args.name, "NAME")
    if args.cmd == "path":
        print(src)
        return 0
    dst = Path(args.dir) / src.name
    if dst.exists():
        raise FileExistsError(f"DIR: {dst} exists; copy into another folder or move it away first")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    print(dst)
    return 0
