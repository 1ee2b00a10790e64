"""Configuration of the weak-to-strong simulator: every choice of docs/w2s.md is a field.

Defaults are the values of docs/w2s.md; presets are YAML files in configs/w2s/ loaded by name or path, and
`key=value` overrides are coerced to the field's type. `validate()` raises ValueError naming the field before
any work is done.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from anchorft.dataclass_yaml import resolve_presets, update
from anchorft.io import write_text
from anchorft.resources import configs_dir
from anchorft.w2s.names import TRANSFORM_NAMES, activation_terms
from anchorft.w2s.stats import digest

__all__ = ["W2SConfig", "load_config", "apply_overrides", "save_config", "config_hash"]

MODES = ("w2s", "sft", "sft_anchor", "ceiling")  # ceiling: W2S inputs with the true labels (PGR)
PRESET_DIR = configs_dir("w2s")


@dataclass
class W2SConfig:
    # geometry (problem)
    d: int = 1024  # ambient dimension
    s: int = 128  # dimension of each pretrained subspace V_k
    n_tasks: int = 2  # K; task 0 is the target kappa
    rho: float = 0.3  # overlap theta_k^T theta_kappa of every non-target task
    pi: list[float] = field(default_factory=lambda: [1.0, 1.0])  # reward weights pi_k
    link: str = "he4"  # sigma*_kappa, the target task's link (labels r*_kappa; the other tasks enter by theta_k, pi_k)
    # strong model
    activation: str = "he2+he4"  # student activation sigma
    group_sizes: list[int] = field(default_factory=lambda: [32, 128])  # N_k
    pretrained_alignment: float = 0.9  # init alignment of non-target neurons with their theta_k
    c: float = 0.3  # second layer a_j = c pi_k / N_k
    # weak model
    weak: str = "planted"  # "planted", or "trained" (= "scratch": trained from scratch by online SGD)
    weak_neurons: int = 16  # M
    weak_alignment: float = 0.95  # planted: u_j = a theta_kappa + sqrt(1 - a^2) xi_j
    weak_activation: str = "he4"
    weak_space: str = "subspace"  # trained: "subspace" (the s-dim problem: x = B z in V_kappa) or "ambient" (R^d)
    weak_steps: int = 2000  # trained: online SGD steps with the true labels
    weak_eta: float = 1.0  # trained: step size (times M / s in the subspace, M / d in R^d)
    weak_stop: float = 0.0  # trained, > 0: a seed's weak model stops once its mean alignment reaches this
    # W2S data
    transform: str = "zexp"  # label transformation T
    clip: float = 2.0  # labels T(clip(f_weak, -clip, clip)); <= 0 disables the clip
    lambda_kappa: float = 1.0  # localisation of the generative distribution (1: inputs in V_kappa)
    # label model (anchorft.w2s.labels)
    label_center: str = "none"  # "none" or "mean": subtract the labels' mean (estimated on independent samples)
    center_samples: int = 65536  # inputs per seed for that estimate
    weak_bound: float = 0.0  # > 0: weak output b tanh(f_weak / b) (bounded; then clip=0 needs no clip)
    weak_norm: str = "planted"  # "planted" or "unit": weak neurons with unit norm inside V_kappa, same alignment
    strong_bias: str = "none"  # "none" or "trained": a scalar output bias of the strong model, trained by the same SGD
    bias_eta: float = 0.05  # its step size (b <- b - bias_eta * mean residual); squared loss only
    label_samples: int = 32768  # inputs per seed for the labels' reported mean, variance, Hermite coefficients
    risk_samples: int = 8192  # fresh inputs per seed (and per distribution) for the test risks and PGR
    # optimisation
    loss: str = "squared"  # "squared" or "correlation"
    batch_size: int = 32
    steps: int = 10000  # SGD steps per mode (the same sample budget for every mode)
    eta_w2s: float = 0.15  # step size, times N_kappa / (c s)
    eta_sft: float = 1.0  # step size, times N_kappa / (c d)
    schedule: str = "anneal"  # "constant" or "anneal"
    anneal_start: float = 0.5  # fraction of steps at constant step size before annealing
    anneal_final: float = 0.1  # step size at the last step, as a fraction of the initial one (geometric decay)
    # RPSFT inside the two-layer model (mode "sft_anchor")
    # penalty weight on R(W) = ||U_0^T (W - W_0) V_0||_F^2: RPSFT's anchor_lambda; not named lambda here, which is
    # the paper's localisation lambda_kappa above
    anchor_weight: float = 1.0
    anchor_rank: int = 128  # k of the top-k singular subspace of W_0 (N x d)
    # run
    modes: list[str] = field(default_factory=lambda: ["w2s", "sft"])
    n_seeds: int = 3
    seed: int = 0
    n_log: int = 40  # log-spaced logging points
    chunk: int = 32  # steps whose noise is drawn at once (per seed)
    dtype: str = "float32"
    device: str = "cpu"

    def validate(self) -> W2SConfig:
        """Raise ValueError naming the offending field; return self."""

        def bad(name: str, why: str) -> None:
            raise ValueError(f"invalid w2s config: {name}={getattr(self, name)!r}: {why}")

        for name in (
            *("d", "s", "n_tasks", "batch_size", "weak_neurons", "n_seeds", "n_log", "chunk", "anchor_rank"),
            *("center_samples", "label_samples", "risk_samples", "steps"),
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, "must be a positive integer")
        if self.s > self.d:
            bad("s", f"must be <= d={self.d}")
        if self.n_tasks * self.s > self.d:
            bad("s", f"the {self.n_tasks} subspaces of dimension s need n_tasks*s <= d={self.d}")
        if not (0.0 <= self.rho < 1.0):
            bad("rho", "must be in [0, 1)")
        for name in ("lambda_kappa", "pretrained_alignment", "weak_alignment", "anneal_start"):
            if not (0.0 <= getattr(self, name) <= 1.0):
                bad(name, "must be in [0, 1]")
        for name in ("pi", "group_sizes"):
            if len(getattr(self, name)) != self.n_tasks:
                bad(name, f"needs one entry per task (n_tasks={self.n_tasks})")
        if any(p <= 0 for p in self.pi):
            bad("pi", "reward weights must be positive")
        if any((not isinstance(n, int)) or n < 1 for n in self.group_sizes):
            bad("group_sizes", "must be positive integers")
        for name in ("eta_w2s", "eta_sft", "c", "bias_eta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                bad(name, "must be a positive number")
        if not (isinstance(self.weak_bound, (int, float)) and math.isfinite(self.weak_bound) and self.weak_bound >= 0):
            bad("weak_bound", "must be a finite number >= 0 (0: unbounded)")
        if self.weak in ("scratch", "trained") and (self.weak_eta <= 0 or self.weak_steps < 1):
            bad("weak_eta", "weak_eta and weak_steps must be positive")
        if not (isinstance(self.weak_stop, (int, float)) and 0.0 <= self.weak_stop < 1.0):
            bad("weak_stop", "must be in [0, 1) (0: train for weak_steps)")
        if self.anchor_weight < 0:
            bad("anchor_weight", "must be >= 0")
        if not (0.0 < self.anneal_final <= 1.0):
            bad("anneal_final", "must be in (0, 1]")
        for name in ("activation", "weak_activation", "link"):
            try:
                activation_terms(getattr(self, name))
            except ValueError as e:
                bad(name, str(e))
        choices = {
            "weak": ("planted", "trained", "scratch"),
            "weak_norm": ("planted", "unit"),
            "weak_space": ("subspace", "ambient"),
            "label_center": ("none", "mean"),
            "strong_bias": ("none", "trained"),
            "transform": TRANSFORM_NAMES,
            "loss": ("squared", "correlation"),
            "schedule": ("constant", "anneal"),
            "dtype": ("float32", "float64"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                bad(name, f"must be one of {list(allowed)}")
        if self.strong_bias == "trained" and self.loss != "squared":
            bad(
                "strong_bias",
                "needs loss=squared (with the correlation loss a bias never enters the first layer's step)",
            )
        if not self.device.startswith(("cpu", "cuda")):
            bad("device", "must be 'cpu' or 'cuda[:i]'")
        if not self.modes or any(m not in MODES for m in self.modes):
            bad("modes", f"must be a non-empty list from {list(MODES)}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_overrides(config: W2SConfig, overrides: dict[str, Any] | list[str]) -> W2SConfig:
    """Return a copy with overrides applied: a dict, or 'key=value' strings, coerced to the fields' types
    (`anchorft.dataclass_yaml`). Unknown keys raise ValueError with the closest known keys."""
    return update(config, overrides, "w2s config")


def load_config(preset: str | list | None = None, overrides: dict[str, Any] | list[str] | None = None) -> W2SConfig:
    """Defaults, then the preset's YAML (if any: a name, a path or a list), then overrides; validated."""
    config = W2SConfig()
    if preset is not None:
        config = apply_overrides(config, resolve_presets({"preset": preset}, PRESET_DIR, "w2s config"))
    if overrides:
        config = apply_overrides(config, overrides)
    return config.validate()


def save_config(config: W2SConfig, path: str | os.PathLike, header: str | None = None) -> None:
    """Write the resolved config as YAML, atomically (tmp file then os.replace)."""
    write_text(path, (f"# {header}\n" if header else "") + yaml.safe_dump(config.to_dict(), sort_keys=False))


def config_hash(config: W2SConfig, exclude: tuple[str, ...] = ()) -> str:
    """Stable hash of the resolved config (every field counts: device and chunk change the random stream)."""
    return digest({k: v for k, v in config.to_dict().items() if k not in exclude})
