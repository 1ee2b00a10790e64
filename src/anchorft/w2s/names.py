"""The names a W2S config chooses its activations, links and label transforms by, read without torch: the config
is checked before torch loads (seconds), and `anchorft.w2s.hermite` builds the functions from the same reading."""

from __future__ import annotations

import re

__all__ = ["MAX_HE_DEGREE", "TRANSFORM_NAMES", "activation_terms"]

MAX_HE_DEGREE = 12
TRANSFORM_NAMES = ("identity", "zexp")  # anchorft.w2s.hermite.TRANSFORMS's keys (a test holds them equal)
_HE_TERM = re.compile(r"^he(\d+)$")


def activation_terms(name: str) -> tuple[str, str | tuple[int, ...]]:
    """(key, what): "relu" / "tanh", or the Hermite degrees of "heJ" and sums such as "he2+he4" (J <= 12); the key
    is the name lower-cased without spaces. Raises ValueError for an unknown name."""
    key = name.strip().lower().replace(" ", "")
    if key in ("relu", "tanh"):
        return key, key
    degrees = []
    for term in key.split("+"):
        m = _HE_TERM.match(term)
        if m is None or int(m.group(1)) > MAX_HE_DEGREE:
            raise ValueError(
                f"unknown activation/link {name!r}: use 'heJ' (J <= {MAX_HE_DEGREE}), sums like 'he2+he4', 'relu', "
                "'tanh'"
            )
        degrees.append(int(m.group(1)))
    return key, tuple(degrees)
