"""Where the shipped configs are: presets, recipes and model configs, inside the package or in the checkout.

A wheel carries the repository's configs/ as the package data `anchorft/configs` (pyproject.toml maps it in);
code imported from a checkout's src/ (PYTHONPATH, an editable install) has no such copy and reads configs/ of
the checkout. Either way `configs_dir("w2s")` is the folder of the w2s presets.

A shipped config is named by its path under configs/ without `.yaml` (`rpsft/qwen2.5-7b-instruct/rpsft`,
`accelerate/zero2`, `rl/dapo`) or `.sbatch` (the SLURM templates, `slurm/multi-node`); `config_path` resolves a
name or a path, a file on disk winning over a shipped config of the same name, and `anchorft configs
list|path|copy|render` shows them.
"""

from __future__ import annotations

import difflib
import os
from importlib import resources
from pathlib import Path

__all__ = ["configs_dir", "shipped_configs", "config_path"]
_SUFFIXES = (".yaml", ".yml", ".json", ".sbatch")
_DROPPED = (".yaml", ".yml", ".sbatch")  # left out of a config's name (a .json name keeps its suffix)


def configs_dir(*parts: str) -> Path:
    """The folder configs/<parts...> shipped with anchorft (it may not exist when nothing ships there)."""
    root = resources.files("anchorft") / "configs"
    if not (root.is_dir() and isinstance(root, Path)):
        root = Path(__file__).resolve().parents[2] / "configs"  # src/anchorft/resources.py -> the checkout's configs/
    return root.joinpath(*parts)


def shipped_configs(prefix: str = "") -> list[str]:
    """The names of the shipped configs (paths under configs/, `.yaml` and `.sbatch` dropped), sorted; those under
    `prefix`."""
    root = configs_dir()
    if not root.is_dir():
        return []
    names = []
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in _SUFFIXES:
            rel = path.relative_to(root).as_posix()
            names.append(rel[: -len(path.suffix)] if path.suffix in _DROPPED else rel)
    return sorted(n for n in names if n.startswith(prefix.strip("/")))


def config_path(spec: str | os.PathLike, what: str = "--config") -> Path:
    """The config file `spec` names: a file on disk (it wins over a shipped config of the same name), else the
    shipped one (configs/SPEC, configs/SPEC.yaml). ValueError naming close shipped names otherwise."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    text = os.fspath(spec).strip("/")
    for name in (text, *(text + s for s in _SUFFIXES)):
        shipped = configs_dir(name)
        if shipped.is_file():
            return shipped

    close = difflib.get_close_matches(text.removesuffix(".yaml"), shipped_configs(), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; `anchorft configs list` shows them"
    raise ValueError(f"{what}: {spec} is neither a file nor a shipped config{hint}")
