"""`anchorft configs`: the configs shipped with anchorft (recipes, accelerate configs, model configs, RL, testbed
and weak-to-strong presets, SLURM templates), usable by name wherever anchorft takes a `--config`.

    anchorft configs list [PREFIX]        names, e.g. rpsft/qwen2.5-7b-instruct/rpsft, accelerate/zero2
    anchorft configs path NAME            the file (for tools that need a path: accelerate's --config_file, sbatch)
    anchorft configs copy NAME DIR        a copy to edit (refuses to overwrite an existing file)
    anchorft configs render NAME [--env K=V ...]   the launch lines a SLURM template runs on each node

A file on disk wins over a shipped config of the same name. `render`: `anchorft.slurm`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from anchorft.dataclass_flags import FlagParser
from anchorft.resources import config_path, shipped_configs
from anchorft.slurm import render

__all__ = ["main"]


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
    rd = sub.add_parser("render", help="the launch lines a SLURM template runs on each node (nothing is launched)")
    rd.add_argument("name", help="a SLURM template: slurm/one-node, slurm/multi-node or a file")
    rd.add_argument("--env", nargs="*", default=[], metavar="K=V",
                    help="the batch job's variables, e.g. SLURM_NNODES=2 SLURM_JOB_NODELIST=gpu[01-02] "
                         "SLURM_GPUS_ON_NODE=8 RECIPE=rpsft/llama-3.1-8b-instruct/rpsft")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "list":
        names = shipped_configs(args.prefix)
        if not names:
            raise ValueError(f"no shipped config under {args.prefix!r}; `anchorft configs list` shows them all")
        print("\n".join(names))
        return 0
    if args.cmd == "render":
        bad = [kv for kv in args.env if "=" not in kv or not kv.split("=", 1)[0]]
        if bad:
            raise ValueError(f"--env: {bad[0]} is not NAME=VALUE")
        print(render(args.name, dict(kv.split("=", 1) for kv in args.env)), end="")
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
