"""The verdict's decision rule: one confirmatory row judged alone, every row judged again under Holm.

Written before a study (its preset names the confirmatory row and the smallest effect of interest), so that "decided"
means what the rule says and not what the table invites:

- **Confirmatory**: one option's pooled excess over the front. Above the front if its interval's lower end is > 0,
  under it if the upper end is < 0, no effect of interest if the interval lies inside (-SESOI, +SESOI) (an
  equivalence reading, Lakens 2017), not decided otherwise; the interval at the verdict's level, unadjusted (one
  question).
- **Exploratory**: every row (the confirmatory one included) tested against 0 and the p-values adjusted by Holm's
  step-down over all of them (`intervals.holm`): a row is decided (above or under) when its adjusted p <= 1 - level.

The interval and p of a row are the items-shared ones where the bases scored the same items (conservative; their
item error does not average out over bases), the Hartung-Knapp ones otherwise.
"""

from __future__ import annotations

from anchorft.eval.intervals import holm

__all__ = ["decide", "decision_markdown"]


def _interval(row: dict) -> dict:
    sh = row.get("shared_items")
    src = sh if sh else row
    return {"low": src["low"], "high": src["high"], "p": src["p"], "interval": "items shared" if sh else "HK"}


def decide(pooled: dict[str, dict], confirm: str | None, sesoi: float | None, level: float = 0.95) -> dict:
    """{"rows": {row: mean, low, high, p, p_holm, decided ("above", "under" or "-"), interval}, "alpha",
    "confirmatory": {row, mean, low, high, sesoi, outcome} or None} from `verdict.pooled_verdict`'s rows (each with
    "p", and "shared_items" with its own "p" where the bases share items)."""
    alpha = 1 - level
    names = list(pooled)
    rows = {r: {"mean": pooled[r]["mean"], **_interval(pooled[r])} for r in names}
    adjusted = holm([rows[r]["p"] for r in names]) if names else []
    for r, p_adj in zip(names, adjusted):
        rows[r]["p_holm"] = float(p_adj)
        rows[r]["decided"] = ("above" if rows[r]["mean"] > 0 else "under") if p_adj <= alpha else "-"
    conf = None
    if confirm is not None:
        c = rows[confirm]
        if c["low"] > 0:
            outcome = "above the front" + (" by at least the SESOI" if sesoi is not None and c["low"] >= sesoi else "")
        elif c["high"] < 0:
            outcome = "under the front"
        elif sesoi is not None and -sesoi < c["low"] and c["high"] < sesoi:
            outcome = "no effect of interest (inside +-SESOI)"
        else:
            outcome = "not decided"
        conf = {"row": confirm, "mean": c["mean"], "low": c["low"], "high": c["high"], "sesoi": sesoi}
        conf["outcome"] = outcome
    return {"alpha": alpha, "rows": rows, "confirmatory": conf}


def decision_markdown(decision: dict) -> str:
    """The confirmatory row's line and the Holm-adjusted table, as `anchorft toy verdict` prints them."""
    pct = round(100 * (1 - decision["alpha"]))
    lines = []
    if c := decision.get("confirmatory"):
        sesoi = "none given" if c["sesoi"] is None else f"{c['sesoi']:g} points"
        lines += [
            "## Confirmatory",
            "",
            f"{c['row']}: {c['mean']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}] ({pct} %, unadjusted; smallest effect "
            f"of interest {sesoi}): **{c['outcome']}**",
            "",
        ]
    lines += [
        f"## Every row, Holm-adjusted over {len(decision['rows'])} (exploratory)",
        "",
        f"Decided: Holm-adjusted p <= {decision['alpha']:.2g}.",
        "",
        "| row | pooled excess | interval | p | p (Holm) | decided |",
        "|---|---|---|---|---|---|",
    ]
    for r, d in decision["rows"].items():
        lines.append(
            f"| {r} | {d['mean']:+.1f} | [{d['low']:+.1f}, {d['high']:+.1f}] ({d['interval']}) | {d['p']:.3f} "
            f"| {d['p_holm']:.3f} | {d['decided']} |"
        )
    return "\n".join(lines)
