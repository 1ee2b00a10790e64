"""Which matrices the anchor covers and at what rank: rank rules, the name map, layer selection, a memory budget.

Everything here is decided from names, shapes and (for the rules and the budget) singular values or Fisher
curves, before any basis is computed; every bad input is a one-line ValueError raised before any SVD.

- Rank rules (`parse_rank_rule`): "energy:F", per matrix the smallest k whose top-k squared singular values hold
  fraction F of ||W_0||_F^2 (`anchorft.subspace.energy_rank`; energy:1 is min(m, n), the full-rank fallback;
  energy:0 anchors nothing); "fisher:F", per matrix the smallest k whose top-k block holds fraction F of the
  Fisher-projected gradient energy ||U_k^T (F_ood G) V_k||_F^2 / ||F_ood G||_F^2 (F_ood G from
  `anchorft.rpsft.calibration.fisher_gradient_product`).
- The map (`parse_anchor_map`): {name regex: rank | rule | {rank: .., lambda: ..}}; the first matching entry
  overrides the global rank (and lambda) of a matrix; a regex that matches no anchored matrix is an error.
- Layers (`select_layers`): "0-1,3" (decoder layer indices; matrices outside the decoder layers, such as
  embeddings, are left out) or a regular expression searched in the names; composes with `anchor_targets`.
- Budget (`allocate_ranks`): ranks that maximise the protected energy under a byte budget, by the greedy on the
  upper concave hull of each matrix's (bytes, energy) points (Sinha and Zoltners 1979, for the multiple-choice
  knapsack): never over budget; its gap to the optimum is bounded by the value of one hull segment.

Bad input is an `anchorft.errors.UsageError` (a ValueError): one line, exit code 2 in the commands.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from anchorft.errors import UsageError

__all__ = [
    "RankRule",
    "MapEntry",
    "parse_rank_rule",
    "parse_anchor_map",
    "select_layers",
    "anchor_numbers",
    "min_block_bytes",
    "hull_points",
    "allocate_ranks",
]

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_RANGES = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


@dataclass(frozen=True)
class RankRule:
    """A per-matrix rank rule: kind "energy" (spectrum) or "fisher" (Fisher-projected gradient), fraction F."""

    kind: str
    fraction: float

    def __str__(self) -> str:
        return f"{self.kind}:{self.fraction:g}"


@dataclass(frozen=True)
class MapEntry:
    """One map entry: a regex, and its rank (int, a RankRule, or None: the global rank) and lambda (or None)."""

    pattern: str
    rank: int | RankRule | None = None
    lam: float | None = None


def parse_rank_rule(rule: str, field: str = "anchor_rank_rule") -> RankRule:
    """'energy:F' or 'fisher:F' with F in [0, 1]; ValueError (one line) otherwise."""
    kind, sep, frac = str(rule).partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in ("energy", "fisher"):
        raise UsageError(f"{field}: expected 'energy:F' or 'fisher:F' (F in [0, 1]), got {rule!r}")
    try:
        f = float(frac)
    except ValueError:
        raise UsageError(f"{field}: fraction must be a number in [0, 1], got {frac!r} in {rule!r}") from None
    if not 0.0 <= f <= 1.0:
        raise UsageError(f"{field}: fraction must be in [0, 1], got {f:g} in {rule!r}")
    return RankRule(kind, f)


def _rank_value(value, where: str) -> int | RankRule:
    if isinstance(value, bool):
        raise UsageError(f"{where}: rank must be an integer >= 0 or 'energy:F' / 'fisher:F', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"{where}: rank must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        if value.strip().isdigit():
            return int(value)
        return parse_rank_rule(value, where)
    raise UsageError(f"{where}: rank must be an integer >= 0 or 'energy:F' / 'fisher:F', got {value!r}")


def parse_anchor_map(spec) -> list[MapEntry]:
    """The map from a dict, a YAML / JSON string, or a path to a YAML file.

    Values: a rank (int >= 0, 0 = not anchored), a rule string, or {rank: .., lambda: ..} (either key optional)."""
    if spec is None or spec == "" or spec == {}:
        return []
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        import yaml

        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UsageError(f"anchor_map: not YAML / JSON: {str(e).splitlines()[0]}") from None
    if isinstance(spec, list):  # [[regex, value], ...] keeps the order explicit
        spec = dict(spec)
    if not isinstance(spec, dict):
        raise UsageError(f"anchor_map: expected a mapping of name regex -> rank / {{rank, lambda}}, got {spec!r}")
    out = []
    for pattern, value in spec.items():
        where = f"anchor_map[{pattern!r}]"
        try:
            re.compile(str(pattern))
        except re.error as e:
            raise UsageError(f"{where}: invalid regular expression: {e}") from None
        rank, lam = None, None
        if isinstance(value, dict):
            unknown = set(value) - {"rank", "lambda"}
            if unknown:
                raise UsageError(f"{where}: unknown key(s) {sorted(unknown)}; use 'rank' and 'lambda'")
            if "rank" in value:
                rank = _rank_value(value["rank"], where)
            if "lambda" in value:
                lam = value["lambda"]
                if isinstance(lam, bool) or not isinstance(lam, (int, float)) or lam < 0:
                    raise UsageError(f"{where}: lambda must be a number >= 0, got {lam!r}")
                lam = float(lam)
        else:
            rank = _rank_value(value, where)
        out.append(MapEntry(str(pattern), rank, lam))
    return out


def layer_index(name: str) -> int | None:
    """The decoder layer index in a parameter name ('model.layers.3.self_attn.q_proj.weight' -> 3), or None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def select_layers(names: Sequence[str], layers: str | None) -> list[str]:
    """The names in the chosen layers: ranges of layer indices ("0-1,3") or a regex searched in the names.

    ValueError (one line, listing the names) when nothing is left."""
    if layers is None or str(layers).strip() == "":
        return list(names)
    spec = str(layers)
    if _RANGES.match(spec):
        wanted: set[int] = set()
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
            if b < a:
                raise UsageError(f"anchor_layers: empty range {part.strip()!r} in {spec!r}")
            wanted.update(range(a, b + 1))
        chosen = [n for n in names if layer_index(n) in wanted]
    else:
        try:
            pattern = re.compile(spec)
        except re.error as e:
            raise UsageError(f"anchor_layers: invalid regular expression {spec!r}: {e}") from None
        chosen = [n for n in names if pattern.search(n)]
    if not chosen:
        raise UsageError(f"anchor_layers={spec!r} matches none of the anchored matrices {list(names)}")
    return chosen


def map_for(names: Sequence[str], entries: Sequence[MapEntry]) -> dict[str, MapEntry]:
    """{name: the first map entry whose regex it matches}; ValueError (one line, listing the names) for an entry
    that matches no name."""
    out: dict[str, MapEntry] = {}
    for e in entries:
        hits = [n for n in names if re.search(e.pattern, n)]
        if not hits:
            raise UsageError(f"anchor_map: {e.pattern!r} matches none of the anchored matrices {list(names)}")
        for n in hits:
            out.setdefault(n, e)
    return out


def anchor_numbers(m: int, n: int, k: int, rest: bool = False) -> int:
    """Numbers stored for an m x n matrix at rank k: 0 (k = 0), (m + n) k + k^2 (U_k, V_k, S_ref), or m n
    (W_0, k >= min(m, n)); plus m n for W_0 when the remainder penalty (`rest`) needs it."""
    if k <= 0:
        return 0
    if k >= min(m, n):
        return m * n
    return (m + n) * k + k * k + (m * n if rest else 0)


def min_block_bytes(shapes: Sequence[tuple[int, int]], bytes_per_number: int, rest: bool = False) -> int:
    """Bytes of the cheapest rank-1 anchor over `shapes`: a budget below it anchors nothing."""
    return min(anchor_numbers(m, n, 1, rest) for m, n in shapes) * bytes_per_number


def hull_points(costs: Sequence[float], gains: Sequence[float]) -> list[int]:
    """Indices (ranks) on the upper concave hull of the points (costs[k], gains[k]), from k = 0 (cost 0).

    Points dominated (no more gain for at least the cost of another point) are dropped first."""
    order = sorted(range(len(costs)), key=lambda k: (costs[k], -gains[k]))
    front: list[int] = []
    for k in order:  # Pareto front: strictly increasing gain with cost
        if not front or gains[k] > gains[front[-1]]:
            front.append(k)
    hull: list[int] = []
    for k in front:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b lies on or below the segment a -> k: drop it
            if (gains[b] - gains[a]) * (costs[k] - costs[a]) <= (gains[k] - gains[a]) * (costs[b] - costs[a]):
                hull.pop()
            else:
                break
        hull.append(k)
    return hull


def allocate_ranks(
    costs: Sequence[Sequence[float]], gains: Sequence[Sequence[float]], budget: float, info: dict | None = None
) -> list[int]:
    """Per matrix a rank k_l (an index into its costs / gains, k = 0 free) with sum_l costs[l][k_l] <= budget,
    maximising sum_l gains[l][k_l] greedily.

    Greedy on the upper concave hull (Sinha and Zoltners 1979): each matrix's hull segments, taken in order, by
    decreasing gain per byte across matrices; a segment that does not fit ends that matrix's allocation, and
    the others go on; if one matrix alone at its best affordable rank beats that, it is taken instead (the
    classical guard); then what is left buys the best single upgrade (any rank), while one fits. Never over
    budget. Without the fill it is optimal for the LP relaxation, so its gap to the integer optimum is at most
    the gain of the first segment it could not take (measured against brute force in the tests);
    `info`, when given, receives {"gap_bound": that gain (0 when every segment fit), "cost": the cost used}."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    ranks = [0] * len(costs)
    heap: list[tuple[float, int, int]] = []
    hulls = []
    for i, (c, g) in enumerate(zip(costs, gains)):
        if c[0] != 0 or g[0] != 0:
            raise ValueError("allocate_ranks: rank 0 must cost 0 and gain 0")
        h = hull_points(c, g)
        hulls.append(h)
        if len(h) > 1:
            heapq.heappush(heap, (-(g[h[1]] - g[h[0]]) / max(c[h[1]] - c[h[0]], 1e-300), i, 1))
    left = budget
    bound = None
    while heap:
        _, i, j = heapq.heappop(heap)
        h, c, g = hulls[i], costs[i], gains[i]
        step = c[h[j]] - c[h[j - 1]]
        if step > left:
            if bound is None:
                bound = g[h[j]] - g[h[j - 1]]
            continue  # this matrix stops here: its later segments build on this one
        left -= step
        ranks[i] = h[j]
        if j + 1 < len(h):
            heapq.heappush(heap, (-(g[h[j + 1]] - g[h[j]]) / max(c[h[j + 1]] - c[h[j]], 1e-300), i, j + 1))
    # the classical guard of the greedy (a 1/2-approximation with it): one matrix alone at its best rank that fits
    single = max(
        ((g[k], i, k) for i, (c, g) in enumerate(zip(costs, gains)) for k in range(len(c)) if c[k] <= budget),
        default=(0.0, 0, 0),
    )
    if single[0] > sum(g[k] for g, k in zip(gains, ranks)):
        ranks = [0] * len(costs)
        ranks[single[1]] = single[2]
        left = budget - costs[single[1]][single[2]]
    # fill: spend what is left on the single best upgrade (any rank, not only hull points), while one fits
    while True:
        best = None
        for i, (c, g) in enumerate(zip(costs, gains)):
            k0 = ranks[i]
            for k in range(len(c)):
                dc, dg = c[k] - c[k0], g[k] - g[k0]
                if dg > 0 and dc <= left and (best is None or dg > best[0]):
                    best = (dg, i, k, dc)
        if best is None:
            break
        _, i, k, dc = best
        ranks[i], left = k, left - dc
    if info is not None:
        info.update(gap_bound=float(bound or 0.0), cost=float(budget - left))
    return ranks


def describe(ranks: dict[str, int], shapes: dict[str, tuple[int, int]]) -> str:
    """One line per matrix: name, shape, rank (and 'full' at min(m, n), '-' when not anchored)."""
    lines = []
    for name, k in ranks.items():
        m, n = shapes[name]
        tag = "-" if k == 0 else ("full (L2)" if k >= min(m, n) else str(k))
        lines.append(f"  {name:<48} {m}x{n:<8} {tag}")
    return "\n".join(lines)


def to_json(entries: Sequence[MapEntry]) -> str:
    """The map as JSON (for the anchor's metadata)."""
    return json.dumps(
        {e.pattern: {"rank": str(e.rank) if e.rank is not None else None, "lambda": e.lam} for e in entries}
    )


def validate_options(obj) -> None:
    """One-line ValueErrors for the anchor options of `obj` (any object with the anchor_* attributes), checked
    before any model is loaded: rule fractions in [0, 1], the map's syntax, kind, lambda_rest, memory."""
    rule = getattr(obj, "anchor_rank_rule", None)
    if rule not in (None, ""):
        parse_rank_rule(rule)
    parse_anchor_map(getattr(obj, "anchor_map", None))
    kind = getattr(obj, "anchor_kind", "block")
    if kind not in ("block", "subspace"):
        raise UsageError(f"anchor_kind must be 'block' or 'subspace', got {kind!r}")
    rest = getattr(obj, "anchor_lambda_rest", 0.0)
    if isinstance(rest, bool) or not isinstance(rest, (int, float)) or not rest >= 0:
        raise UsageError(f"anchor_lambda_rest must be a number >= 0, got {rest!r}")
    mem = getattr(obj, "anchor_memory", None)
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 1):
        raise UsageError(f"anchor_memory must be a number of bytes >= 1, got {mem!r}")
    layers = getattr(obj, "anchor_layers", None)
    if layers not in (None, "") and not _RANGES.match(str(layers)):
        try:
            re.compile(str(layers))
        except re.error as e:
            raise UsageError(f"anchor_layers: invalid regular expression {layers!r}: {e}") from None


def build_kwargs(obj, lam: float, full_rank: bool = False) -> dict:
    """Keyword arguments of `SubspaceAnchor.from_model` from the anchor_* attributes of `obj` and the global
    lambda `lam`. `full_rank` (the l2 method): every matrix at full rank; rank rules and the budget are off."""
    rule = getattr(obj, "anchor_rank_rule", None) or None
    kw = dict(
        rank=2**62 if full_rank else (rule or obj.anchor_rank),
        targets=obj.anchor_targets,
        include_embeddings=obj.anchor_include_embeddings,
        rank_map=None if full_rank else getattr(obj, "anchor_map", None),
        layers=getattr(obj, "anchor_layers", None) or None,
        memory=None if full_rank else getattr(obj, "anchor_memory", None),
        lambda_rest=0.0 if full_rank else float(getattr(obj, "anchor_lambda_rest", 0.0) or 0.0),
        kind="block" if full_rank else getattr(obj, "anchor_kind", "block"),
        base_lambda=float(lam),
    )
    return kw
