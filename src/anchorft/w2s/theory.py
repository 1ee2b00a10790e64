"""Predicted exponents and sample complexities (Awano and Suzuki, arXiv:2605.12908, Thm. 1 and the comparison
that follows it), and the labels' Hermite coefficients, idealised and measured. All predictions hold up to
constants and logarithmic factors.

- W2S (Thm. 1): O~(s^{3/2}) samples to align the target neurons with theta_kappa;
- weak model trained from scratch: O~(d^{p/2} s^{(p-2)/2});
- SFT on isotropic inputs: O~(d^{p-1}),
with p the information exponent of the link. Two exponents of the transformed labels are kept apart:
the information exponent of T(clip(sigma*)) for the chosen T, and the generative exponent, the minimum of the
information exponent over a class of transforms (here: polynomials of degree <= 6; `hermite.generative_exponent`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from anchorft.w2s.config import load_config
from anchorft.w2s.drift import drift, fixed_point
from anchorft.w2s.hermite import (
    generative_exponent,
    get_activation,
    get_transform,
    hermite_coefficients,
    information_exponent,
    transformed_information_exponent,
)
from anchorft.w2s.labels import label_mean, label_report
from anchorft.w2s.modes import prepare_weak
from anchorft.w2s.problem import build_problem

__all__ = ["theory_report", "predicted_slopes", "preset_theory_report", "first_significant", "rho_star_report"]
__all__ += ["theory_text"]

N_COEF = 6
MAX_POWER = 6


def predicted_slopes(p: int) -> dict[str, dict[str, float]]:
    """Log-log slopes of the predicted sample complexities in s and in d."""
    return {
        "w2s": {"s": 1.5, "d": 0.0},
        "weak": {"s": (p - 2) / 2, "d": p / 2},
        "sft": {"s": 0.0, "d": float(p - 1)},
    }


def _he_series(f, n: int) -> list[float]:
    """c_n = E[f He_n] / n! (the convention of `measured_coefficients`), by quadrature."""
    h = hermite_coefficients(f, n)
    return [round(float(h[j]) / math.sqrt(math.factorial(j)), 6) for j in range(n + 1)]


def first_significant(c: list[float], se: list[float], k: float = 3.0) -> int | None:
    """The lowest degree n >= 1 whose measured coefficient exceeds k standard errors (None if none)."""
    for n in range(1, len(c)):
        if abs(c[n]) > k * se[n]:
            return n
    return None


def theory_report(link: str, transform: str, clip: float, d: int, s: int) -> dict:
    """JSON-able report: exponents, Hermite coefficients of the link, predicted sample complexities at (d, s)."""
    if d < 1 or s < 1 or s > d:
        raise ValueError(f"need 1 <= s <= d, got d={d}, s={s}")
    p = information_exponent(link)
    if p is None:
        raise ValueError(f"link {link!r} has no nonzero Hermite coefficient of degree 1..12")
    cl = clip if clip > 0 else None
    p_t = transformed_information_exponent(link, transform, cl)
    p_star, power = generative_exponent(link, max_power=MAX_POWER)
    slopes = predicted_slopes(p)
    f, tr = get_activation(link).numpy, get_transform(transform, cl)
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
        "transformed_information_exponent": p_t,
        "generative_exponent": p_star,
        "generative_exponent_class": f"polynomial transforms T of degree <= {MAX_POWER}",
        "generative_exponent_attained_by": f"T(y) = y^{power}" if power is not None else None,
        "hermite_coefficients": [round(float(c), 10) for c in hermite_coefficients(link, 8)],
        "transformed_hermite_coefficients": [round(float(c), 6) for c in transformed],
        "coefficient_normalisation": "E[f h_j], h_j = He_j / sqrt(j!) (orthonormal)",
        "predicted_sample_complexity": complexities,
        "predicted_slopes": slopes,
        "note": "up to constants and log factors",
    }


def preset_theory_report(preset: str, overrides: list[str] | None = None, n_seeds: int | None = None) -> dict:
    """`theory_report` for a preset's link, transform, clip, d and s, plus the Hermite coefficients of the labels
    along theta_kappa in the convention c_n = E[y He_n(z)] / n!: idealised (T(clip(sigma*_kappa(z))), by
    quadrature: a weak model equal to the link) and measured on the preset's own W2S labels (its weak model,
    weak options and centring, `label_samples` generative inputs per seed, standard errors); the measured
    exponent is the lowest degree whose coefficient exceeds 3 standard errors."""
    extra = list(overrides or [])
    if n_seeds is not None:
        extra.append(f"n_seeds={n_seeds}")
    config = load_config(preset, extra)
    rep = theory_report(config.link, config.transform, config.clip, config.d, config.s)
    f, tr = get_activation(config.link).numpy, get_transform(config.transform, config.clip or None)
    ideal = _he_series(lambda z: tr(f(z)), N_COEF)
    if config.label_center == "mean":
        ideal[0] = 0.0  # centred: the constant is removed
    with torch.no_grad():
        problem = build_problem(config)
        prepare_weak(config, problem)
        center = label_mean(config, problem) if config.label_center == "mean" else None
        labels = label_report(config, problem, "w2s", center)
    c, se = labels["hermite"], labels["hermite_se"]
    rep["preset"] = preset
    rep["labels"] = {
        "normalisation": "c_n = E[y He_n(z)] / n!, z = theta_kappa^T x",
        "idealised": {"what": "T(clip(sigma*_kappa(z))) (a weak model equal to the link), quadrature", "c": ideal},
        "measured": {
            "what": "the preset's W2S labels on its generative inputs",
            "weak": config.weak,
            "weak_norm": config.weak_norm,
            "weak_bound": config.weak_bound,
            "label_center": config.label_center,
            "n_seeds": config.n_seeds,
            "n_samples_per_seed": labels["n_samples_per_seed"],
            "mean": labels["mean"],
            "var": labels["var"],
            "c": [round(float(v), 6) for v in c],
            "se": [round(float(v), 6) for v in se],
            "lowest_significant_degree": first_significant(c, se),
        },
    }
    rep["labels"]["measured"]["c2_over_se"] = float(np.round(c[2] / se[2], 2)) if se[2] > 0 else None
    star = rho_star_report(config, c, se)
    rep["rho_star"] = star["rho_star"]
    rep["rho_star_detail"] = star
    return rep


def rho_star_report(config, c: list[float], se: list[float], k: float = 3.0, target_alignment: float = 1.0) -> dict:
    """The non-target neurons' turn boundary predicted by the population drift (`anchorft.w2s.drift`): the unstable
    fixed point m* of their V_kappa component from the labels' measured coefficients (those below `k` standard
    errors set to 0) and the student's activation, loss, second layer and bias; rho* = m* / pretrained_alignment,
    the overlap theta_k^T theta_kappa at which a non-target neuron starts at m*. None, with the reason, where there
    is no interior fixed point or W2S is not at lambda_kappa = 1 (where the drift is derived). Under the squared
    loss the target group enters the residual: it is taken at `target_alignment` (1: learnt)."""
    used = [float(v) if abs(v) > k * e else 0.0 for v, e in zip(c, se)]
    out: dict = {
        "what": "unstable fixed point of the non-target neurons' V_kappa part under the W2S population drift",
        "activation": config.activation,
        "loss": config.loss,
        "strong_bias": config.strong_bias,
        "coefficients_used": used,
        "coefficients_rule": f"measured c_n, those below {k:g} standard errors set to 0",
        "m_star": None,
        "rho_star": None,
        "reason": None,
    }
    if config.lambda_kappa != 1.0:
        out["reason"] = "the drift is derived for lambda_kappa = 1 (every input in V_kappa)"
        return out
    kw = {"loss": config.loss, "c": config.c, "pi": list(config.pi), "bias": config.strong_bias == "trained"}
    if config.loss == "squared":
        kw["target_alignment"] = target_alignment
        out["assumption"] = f"squared loss: the target group taken at alignment {target_alignment:g} with theta_kappa"
    fp = fixed_point(used, config.activation, **kw)
    a = config.pretrained_alignment
    m0 = a * config.rho
    d0 = drift(m0, used, config.activation, **kw)
    out.update(
        m_star=fp["m_star"],
        rho_star=None if fp["m_star"] is None or a <= 0 or fp["m_star"] / a >= 1 else fp["m_star"] / a,
        reason=fp["reason"],
        stable_fixed_points=fp["stable"],
        m_init=m0,
        drift_at_init=d0,
        predicted_at_init=(
            "no drift"
            if (fp["reason"] or "").startswith("no drift")
            else "captured (turns to theta_kappa)"
            if d0 > 0
            else "pushed out of V_kappa"
        ),
    )
    if fp["m_star"] is not None and out["rho_star"] is None:
        out["reason"] = f"m* = {fp['m_star']:.3f} needs an overlap m* / pretrained_alignment >= 1"
    return out


def theory_text(r: dict) -> str:
    """`theory_report` / `preset_theory_report`'s result as the lines `anchorft w2s theory` prints."""
    lines = [
        f"link {r['link']}, transform {r['transform']}, clip {r['clip']}, d = {r['d']}, s = {r['s']}",
        f"information exponent of the link: {r['information_exponent']}",
        f"information exponent of T(clip(link)) for this T: {r['transformed_information_exponent']}",
        f"generative exponent (min over {r['generative_exponent_class']}): {r['generative_exponent']}"
        f" (attained by {r['generative_exponent_attained_by']})",
    ]
    for k, v in r["predicted_sample_complexity"].items():
        lines.append(f"predicted samples {k:>4}: {v['formula']:<20} = {v['value']:.3g} (up to constants and logs)")
    if lab := r.get("labels"):
        m = lab["measured"]
        lines.append(f"label coefficients c_n = E[y He_n(z)]/n!, n = 0..{len(m['c']) - 1}:")
        lines.append("  idealised " + " ".join(f"{c:+.4f}" for c in lab["idealised"]["c"]))
        lines.append("  measured  " + " ".join(f"{c:+.4f}" for c in m["c"]))
        lines.append("  (se)      " + " ".join(f"{c:.4f} " for c in m["se"]))
        lines.append(
            f"  measured on {m['n_seeds']} seed(s) x {m['n_samples_per_seed']} inputs; weak {m['weak']}, "
            f"norm {m['weak_norm']}, bound {m['weak_bound']}, centring {m['label_center']}; lowest degree above "
            f"3 se: {m['lowest_significant_degree']}"
        )
    if star := r.get("rho_star_detail"):
        if star["rho_star"] is not None:
            lines.append(
                f"non-target turn boundary (population drift, {star['activation']}, {star['loss']} loss): "
                f"m* = {star['m_star']:.3f}, rho* = {star['rho_star']:.3f}; at the preset's overlap "
                f"(m = {star['m_init']:.3f}): {star['predicted_at_init']}"
            )
        else:
            lines.append(f"non-target turn boundary: none ({star['reason']})")
    return "\n".join(lines)
