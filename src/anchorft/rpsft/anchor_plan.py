"""Which matrices the anchor covers and at what rank: rank rules, the name map, layer selection, a memory budget.

Everything here is decided from names, shapes and (for the rules and the budget) singular values or Fisher
curves, before any basis is computed; every bad input is a one-line `anchorft.errors.UsageError` (a ValueError;
exit code 2 in the commands) raised before any SVD. The options, the rules "energy:F" and "fisher:F" (their
definitions: `anchorft.subspace.energy_rank`, `_fisher_rank`), the map, the layers and the budget's algorithm
(the greedy on the upper concave hull for the multiple-choice knapsack, Sinha and Zoltners 1979, never over
budget; `allocate_ranks`) are described in docs/anchoring.md.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import yaml
from torch import nn

from anchorft.errors import UsageError
from anchorft.rpsft.paper import PAPER_RANK
from anchorft.rpsft.sharding import full_matrix, logical_shape, unwrap
from anchorft.subspace import cumulative_block_energy, energy_rank

__all__ = [
    "AnchorPlan",
    "plan_anchor",
    "select_parameters",
    "layer_index",
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
# the release skips names holding "vision", "cross" or "multi_modal"; here module names starting with vision
# (vision_tower, vision_model, vision_encoder), visual (Qwen2-VL) or multi_modal (multi_modal_projector), and
# image_encoder, cross_attn, cross_attention
_EXCLUDED = re.compile(r"(^|\.)(vision\w*|visual\w*|image_encoder|cross_attn|cross_attention|multi_modal\w*)\b")
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
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise UsageError(f"{where}: rank must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        return int(value) if value.strip().isdigit() else parse_rank_rule(value, where)
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
    """The decoder layer index in a parameter name ('model.layers.3.self_attn.q_proj.weight' -> 3; also `h.<i>`,
    `blocks.<i>`, `layer.<i>`), or None outside the layers (embeddings, lm_head). The anchor's layer selection and
    the weight analysis's grouping both read it."""
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


def linear_types() -> tuple[type, ...]:
    """The linear layer types, as PEFT's 'all-linear' counts them: nn.Linear and transformers' Conv1D (GPT-2's
    attention and MLP layers, a linear layer with its weight stored transposed, (in, out))."""
    from transformers.pytorch_utils import Conv1D  # lazy: this module loads without transformers

    return (nn.Linear, Conv1D)


def _named_matrices(model: nn.Module) -> list[tuple[str, nn.Parameter, str]]:
    """Every trainable 2-D weight of a linear layer (`linear_types`) or nn.Embedding, once (tied weights once).

    Returns (parameter name, parameter, kind) with kind "linear" or "embedding"; the output embedding
    (lm_head) counts as an embedding. Vision and cross-attention modules are excluded. A Conv1D weight is anchored
    as stored, W^T: eq. 3's penalty is the same for W and W^T (the top-k bases swap sides).
    """
    model = unwrap(model)
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    seen: set[int] = set()
    result = []
    kinds = (*linear_types(), nn.Embedding)
    for mod_name, module in model.named_modules():
        if not isinstance(module, kinds) or _EXCLUDED.search(mod_name):
            continue
        p = module.weight
        if p is None or len(logical_shape(p)) != 2 or not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        kind = "embedding" if isinstance(module, nn.Embedding) or module is out_emb else "linear"
        result.append((f"{mod_name}.weight" if mod_name else "weight", p, kind))
    return result


def select_parameters(
    model: nn.Module, targets: str | Sequence[str] = "all-linear", include_embeddings: bool = True
) -> list[tuple[str, nn.Parameter]]:
    """The matrices an anchor covers, as (name, parameter); tied weights appear once.

    `targets`: "all-linear" (every linear weight, lm_head included when `include_embeddings`), a
    regular expression searched in the parameter names, or a list of names (a full parameter name, a
    module name, or a module's last name component such as "q_proj"). Raises ValueError, listing the
    names available, when nothing matches.
    """
    candidates = _named_matrices(model)
    if isinstance(targets, str) and targets == "all-linear":
        chosen = [(n, p) for n, p, kind in candidates if kind == "linear" or include_embeddings]
    else:
        if isinstance(targets, str):
            try:
                pattern = re.compile(targets)
            except re.error as e:
                raise ValueError(f"anchor_targets: invalid regular expression {targets!r}: {e}") from None
            chosen = [(n, p) for n, p, _ in candidates if pattern.search(n)]
        elif isinstance(targets, Iterable):
            wanted = set(targets)
            chosen = []
            for n, p, _ in candidates:
                mod = n.removesuffix(".weight")
                if wanted & {n, mod, mod.rsplit(".", 1)[-1]}:
                    chosen.append((n, p))
        else:
            raise ValueError(f"anchor_targets must be 'all-linear', a regex or a list of names, got {targets!r}")
        if not include_embeddings:
            emb = {n for n, _, kind in candidates if kind == "embedding"}
            chosen = [(n, p) for n, p in chosen if n not in emb]
    if not chosen:
        names = [n for n, _, _ in candidates]
        leaves = sorted({n.rsplit(".", 2)[-2] if n.count(".") else n for n in names})
        raise ValueError(
            f"anchor_targets={targets!r} matches no trainable 2-D weight of {type(unwrap(model)).__name__}. "
            f"Module names available: {leaves}; e.g. parameters {names[:6]}{' ...' if len(names) > 6 else ''}"
        )
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


@dataclass
class AnchorPlan:
    """What `plan_anchor` decides: the selected matrices `named` [(name, parameter)], their `shapes`, the resolved
    `ranks` {name: k} (0: not anchored; min(m, n): the L2 fallback), the global `rule` (an int or a RankRule), the
    map's entries and {name: the entry it matched} (`mapped`), and the memory budget's {"cost", "gap_bound"}
    (`budget`, empty without one)."""

    named: list[tuple[str, nn.Parameter]]
    ranks: dict[str, int]
    mapped: dict[str, MapEntry]
    rule: int | RankRule
    map_entries: list[MapEntry]
    budget: dict
    shapes: dict[str, tuple[int, ...]]


def _fisher_rank(cum: torch.Tensor, total: float, fraction: float, k_max: int) -> int:
    """The smallest k with ||U_k^T (F G) V_k||^2 >= fraction * ||F G||^2 (k_max, the whole matrix, if no block
    reaches it; 0 for fraction 0, k_max for fraction 1)."""
    if fraction == 0.0:
        return 0
    if fraction == 1.0 or total <= 0.0:
        return k_max if fraction > 0 and total > 0 else 0
    hit = (cum >= fraction * total).nonzero()
    return int(hit[0, 0]) + 1 if hit.numel() else k_max


def plan_anchor(
    model: nn.Module,
    rank: int | str = PAPER_RANK,
    targets: str | Sequence[str] = "all-linear",
    include_embeddings: bool = True,
    dtype: torch.dtype = torch.float32,
    *,
    rank_map=None,
    layers: str | None = None,
    memory: int | None = None,
    lambda_rest: float = 0.0,
    kind: str = "block",
    base_lambda: float = 1.0,
    fisher: dict[str, torch.Tensor] | None = None,
    svd: str = "exact",
) -> AnchorPlan:
    """The anchor's plan without its bases (what `SubspaceAnchor.from_model` builds; `anchorft train --estimate`
    prints its ranks), from the arguments of `from_model`. Checks every input (one-line ValueError) before any
    SVD; then only singular values (and, for fisher rules, the bases of F_ood G's projection) are computed."""
    if isinstance(rank, str) and rank.strip().isdigit():
        rank = int(rank)
    if isinstance(rank, str):
        rule = parse_rank_rule(rank, "anchor rank")
    elif isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise UsageError(f"anchor rank must be an integer >= 1 or 'energy:F' / 'fisher:F', got {rank!r}")
    else:
        rule = rank
    if svd not in ("exact", "randomized"):
        raise UsageError(f"anchor svd must be 'exact' or 'randomized', got {svd!r}")
    if kind not in ("block", "subspace"):
        raise UsageError(f"anchor kind must be 'block' or 'subspace', got {kind!r}")
    if not lambda_rest >= 0:
        raise UsageError(f"anchor lambda_rest must be >= 0, got {lambda_rest!r}")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 1):
        raise UsageError(f"anchor memory must be a number of bytes >= 1, got {memory!r}")
    entries_map = parse_anchor_map(rank_map)
    if (lambda_rest > 0 or any(e.lam is not None for e in entries_map)) and not base_lambda > 0:
        raise UsageError("anchor: a map lambda or lambda_rest needs a global anchor lambda > 0")
    named = select_parameters(model, targets, include_embeddings)
    keep = set(select_layers([n for n, _ in named], layers))
    named = [(n, p) for n, p in named if n in keep]
    names = [n for n, _ in named]
    mapped = map_for(names, entries_map)
    shapes = {n: tuple(logical_shape(p)) for n, p in named}
    bpn = torch.empty((), dtype=dtype).element_size()
    rest = lambda_rest > 0
    fixed = {n: e.rank for n, e in mapped.items() if e.rank is not None}
    free = [n for n in names if n not in fixed]
    if memory is not None:
        need = min_block_bytes([shapes[n] for n in free] or list(shapes.values()), bpn, rest)
        if memory < need:
            raise UsageError(
                f"anchor memory {memory:,} bytes is below the cheapest rank-1 block ({need:,} bytes at "
                f"{bpn} bytes/number)"
            )
    specs = {n: fixed.get(n, rule) for n in names}
    objective = rule.kind if isinstance(rule, RankRule) else "energy"
    # a matrix's curve: its rule's, or (the budget's free matrices) the budget objective's
    needs_curve = [n for n in names if isinstance(specs[n], RankRule) or (memory is not None and n not in fixed)]
    kind = {n: specs[n].kind if isinstance(specs[n], RankRule) else objective for n in needs_curve}
    missing = [n for n in needs_curve if kind[n] == "fisher" and (fisher is None or n not in fisher)]
    if missing:
        raise UsageError(
            f"anchor: fisher rules need F_ood G per matrix (fisher=, from "
            f"anchorft.rpsft.calibration.fisher_gradient_product); missing for {missing[:4]}"
        )
    compute_dtype = torch.float64 if dtype == torch.float64 else torch.float32

    # ---- resolve the per-matrix ranks (spectra and Fisher curves where a rule or the budget needs them)
    params = dict(named)
    curves: dict[str, dict] = {}
    for n in needs_curve:
        w0 = full_matrix(params[n]).to(compute_dtype)
        if kind[n] == "fisher":
            u, _, vh = torch.linalg.svd(w0, full_matrices=False)
            fg = fisher[n].to(w0.device, compute_dtype)
            curves[n] = {"fisher": cumulative_block_energy(fg, u, vh.mT), "fisher_total": float(fg.pow(2).sum())}
        else:
            curves[n] = {"s": torch.linalg.svdvals(w0)}
    ranks: dict[str, int] = {}
    for n in names:
        k_max = min(shapes[n])
        spec = specs[n]
        if isinstance(spec, int):
            ranks[n] = min(spec, k_max)
        elif isinstance(spec, RankRule) and spec.kind == "energy":
            ranks[n] = energy_rank(curves[n]["s"], spec.fraction)
        elif isinstance(spec, RankRule):
            ranks[n] = _fisher_rank(curves[n]["fisher"], curves[n]["fisher_total"], spec.fraction, k_max)
    budget_info: dict = {}
    if memory is not None:
        used = sum(anchor_numbers(*shapes[n], ranks[n], rest) for n in fixed) * bpn
        if used > memory:
            raise ValueError(f"anchor memory {memory:,} bytes: the map's fixed ranks alone take {used:,} bytes")
        costs, gains = [], []
        fisher_norm = sum(curves[n].get("fisher_total", 0.0) for n in free) or 1.0
        for n in free:
            m, nn_ = shapes[n]
            r = min(m, nn_)
            costs.append([anchor_numbers(m, nn_, k, rest) * bpn for k in range(r + 1)])
            if objective == "fisher":
                cum = curves[n]["fisher"].tolist()
                g = [0.0] + [c / fisher_norm for c in cum]
                g[r] = curves[n]["fisher_total"] / fisher_norm  # the fallback (L2) covers the whole matrix
            else:
                e = torch.cumsum(curves[n]["s"].double().pow(2), 0)
                g = [0.0] + (e / e[-1].clamp_min(1e-300)).tolist()
            gains.append(g)
        alloc = allocate_ranks(costs, gains, memory - used, budget_info)
        ranks.update(dict(zip(free, alloc)))
        budget_info["cost"] += used  # allocate_ranks set the free matrices' cost

    return AnchorPlan(named, ranks, mapped, rule, entries_map, budget_info, shapes)


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
    if layers not in (None, ""):  # a range list ("0-1,3") is a valid regex too
        try:
            re.compile(str(layers))
        except re.error as e:
            raise UsageError(f"anchor_layers: invalid regular expression {layers!r}: {e}") from None


def build_kwargs(obj, lam: float, full_rank: bool = False) -> dict:
    """Keyword arguments of `SubspaceAnchor.from_model` from the anchor_* attributes of `obj` and the global
    lambda `lam`. `full_rank` (the l2 method): every matrix at full rank; rank rules and the budget are off."""
    rule = getattr(obj, "anchor_rank_rule", None) or None
    return dict(
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
