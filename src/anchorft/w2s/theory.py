"""Predicted exponents and sample complexities (Awano and Suzuki, arXiv:2605.12908, Thm. 1 and the comparison
that follows it). All predictions hold up to constants and logarithmic factors.

- W2S (Thm. 1): O~(s^{3/2}) samples to align the target neurons with theta_kappa;
- weak model trained from scratch: O~(d^{p/2} s^{(p-2)/2});
- SFT on isotropic inputs: O~(d^{p-1}),
with p the information exponent of the link and p* its generative exponent under the label transformation.
"""

from __future__ import annotations

from anchorft.w2s.hermite import (
    generative_exponent,
    get_activation,
    get_transform,
    hermite_coefficients,
    information_exponent,
)

__all__ = ["theory_report", "predicted_slopes"]


def predicted_slopes(p: int) -> dict[str, dict[str, float]]:
    """Log-log slopes of the predicted sample complexities in s and in d."""
    return {
        "w2s": {"s": 1.5, "d": 0.0},
        "weak": {"s": (p - 2) / 2, "d": p / 2},
        "sft": {"s": 0.0, "d": float(p - 1)},
    }


def theory_report(link: str = "he4", transform: str = "zexp", clip: float = 2.0, d: int = 1024, s: int = 128) -> dict:
    """JSON-able report: exponents, Hermite coefficients of the link, predicted sample complexities at (d, s)."""
    if d < 1 or s < 1 or s > d:
        raise ValueError(f"need 1 <= s <= d, got d={d}, s={s}")
    p = information_exponent(link)
    if p is None:
        raise ValueError(f"link {link!r} has no nonzero Hermite coefficient of degree 1..12")
    p_star = generative_exponent(link, transform, clip if clip > 0 else None)
    slopes = predicted_slopes(p)
    f, tr = get_activation(link).numpy, get_transform(transform, clip if clip > 0 else None)
    transformed = hermite_coefficients(lambda z: tr(f(z)), 8)
    complexities = {
        "w2s": {"formula": "s^(3/2)", "value": s**1.5},
        "weak": {"formula": "d^(p/2) s^((p-2)/2)", "value": d ** (p / 2) * s ** ((p - 2) / 2)},
        "sft": {"formula": "d^(p-1)", "value": float(d ** (p - 1))},
    }
    return {
        "link": link,
        "transform": transform,
        "clip": clip,
        "d": d,
        "s": s,
        "information_exponent": p,
        "generative_exponent": p_star,
        "hermite_coefficients": [round(float(c), 10) for c in hermite_coefficients(link, 8)],
        "transformed_hermite_coefficients": [round(float(c), 6) for c in transformed],
        "predicted_sample_complexity": complexities,
        "predicted_slopes": slopes,
        "note": "up to constants and log factors",
    }
