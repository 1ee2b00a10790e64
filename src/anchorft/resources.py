"""Where the shipped configs are: presets, recipes and model configs, inside the package or in the checkout.

A wheel carries the repository's configs/ as the package data `anchorft/configs` (pyproject.toml maps it in);
code imported from a checkout's src/ (PYTHONPATH, an editable install) has no such copy and reads configs/ of
the checkout. Either way `configs_dir("w2s")` is the folder of the w2s presets.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["configs_dir"]


def configs_dir(*parts: str) -> Path:
    """The folder configs/<parts...> shipped with anchorft (it may not exist when nothing ships there)."""
    root = resources.files("anchorft") / "configs"
    if not (root.is_dir() and isinstance(root, Path)):
        root = Path(__file__).resolve().parents[2] / "configs"  # src/anchorft/resources.py -> the checkout's configs/
    return root.joinpath(*parts)
