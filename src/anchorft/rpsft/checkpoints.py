"""Checkpoints that always resume: which checkpoint is complete, and the anchor of one killed mid-save.

`RPSFTTrainer._save_checkpoint` writes, in this order: `checkpoint-N/anchor_meta.json` (the anchor's
settings and the fingerprint of the starting weights, a few bytes), transformers' files (model,
optimizer, RNG, `trainer_state.json` last), `checkpoint-N/anchor/` (the bases), and only then lets
transformers delete older checkpoints. A kill anywhere in between leaves either the previous complete
checkpoint or checkpoint-N without its anchor; `resume_anchor` rebuilds the latter's anchor from the
starting weights, after checking their fingerprint against `anchor_meta.json`.
"""

from __future__ import annotations

import json
import logging
import os
import re

from torch import nn

from anchorft.rpsft.anchor import SubspaceAnchor, select_parameters, weights_fingerprint

__all__ = [
    "ANCHOR_META",
    "anchor_meta",
    "last_complete_checkpoint",
    "resume_anchor",
    "fallback_summary",
    "warn_fallback",
]

logger = logging.getLogger(__name__)
ANCHOR_META = "anchor_meta.json"
_SETTINGS = ("rank", "targets", "include_embeddings", "svd", "dtype")
_CKPT = re.compile(r"^checkpoint-(\d+)$")


def anchor_meta(anchor: SubspaceAnchor) -> dict:
    """What a rebuilt anchor must match: its settings and the starting weights' fingerprint."""
    return {k: anchor.meta.get(k) for k in (*_SETTINGS, "fingerprint")}


def last_complete_checkpoint(folder: str | os.PathLike) -> str | None:
    """The highest `checkpoint-N` in `folder` whose `trainer_state.json` (transformers' last file) exists."""
    if not os.path.isdir(folder):
        return None
    steps = []
    for name in os.listdir(folder):
        m = _CKPT.match(name)
        if m and os.path.isfile(os.path.join(folder, name, "trainer_state.json")):
            steps.append(int(m.group(1)))
    return os.path.join(os.fspath(folder), f"checkpoint-{max(steps)}") if steps else None


def resume_anchor(checkpoint: str | os.PathLike, model: nn.Module, build, anchor_dir: str = "anchor"):
    """The anchor to resume `checkpoint` with; `model` must still hold the starting weights.

    The checkpoint's own `anchor/` when complete (its fingerprint checked against `model`); otherwise,
    when `anchor_meta.json` is there, `build()` (the trainer's anchor construction) after checking that
    `model`'s weights have the recorded fingerprint, and the rebuilt anchor's settings match. The rebuilt
    anchor is not written back (the caller decides). Anything else is a ValueError: the SVD is never
    recomputed from tuned weights, nor from weights other than the recorded ones.
    """
    path = os.path.join(checkpoint, anchor_dir)
    if SubspaceAnchor.exists(path):
        return SubspaceAnchor.load(path, model=model), False
    meta_path = os.path.join(checkpoint, ANCHOR_META)
    if not os.path.isfile(meta_path):
        raise ValueError(
            f"resume: {checkpoint} has no anchor ({anchor_dir}/) and no {ANCHOR_META} to rebuild it from; the SVD "
            "is never recomputed from tuned weights"
        )
    with open(meta_path) as f:
        meta = json.load(f)
    named = select_parameters(model, meta["targets"], meta["include_embeddings"])
    fp = weights_fingerprint(named)
    if fp != meta["fingerprint"]:
        raise ValueError(
            f"resume: {checkpoint} has no anchor, and the model's weights are not the starting weights it recorded "
            f"(fingerprint {fp[:12]}, recorded {meta['fingerprint'][:12]}): load the starting model to rebuild it"
        )
    logger.warning("resume: %s has no anchor; rebuilding it from the starting weights (same fingerprint)", checkpoint)
    anchor = build()
    got = anchor_meta(anchor)
    diff = [k for k in _SETTINGS if got[k] != meta[k]]
    if diff or got["fingerprint"] != meta["fingerprint"]:
        raise ValueError(
            f"resume: the anchor rebuilt for {checkpoint} differs from the recorded one in "
            + ", ".join(f"{k} ({got[k]!r} vs {meta[k]!r})" for k in diff or ["fingerprint"])
        )
    return anchor, True


def fallback_summary(anchor: SubspaceAnchor) -> dict:
    """How many anchored matrices fell back to L2 (rank >= min(m, n)): `matrices`, `fallback`, `fallback_names`."""
    names = [e.name for e in anchor.entries if e.fallback]
    return {"matrices": len(anchor.entries), "fallback": len(names), "fallback_names": names}


def warn_fallback(anchor: SubspaceAnchor) -> dict:
    """Warn when a low-rank anchor falls back to L2 for some or all matrices; returns `fallback_summary`."""
    s = fallback_summary(anchor)
    if s["fallback"]:
        every = "every matrix" if s["fallback"] == s["matrices"] else f"{s['fallback']} of {s['matrices']} matrices"
        logger.warning(
            "anchor: rank %s >= min(m, n) for %s (e.g. %s): %s the plain L2 anchor; a smaller anchor_rank keeps "
            "the subspace anchor",
            anchor.meta.get("rank"),
            every,
            s["fallback_names"][0],
            "the run is" if s["fallback"] == s["matrices"] else "these matrices use",
        )
    return s
