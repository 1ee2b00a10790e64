"""Coverage of the verdict's intervals on known designs, and the power plan of the next study.

    python benchmarks/verdict_coverage.py coverage [--studies 500] [--boot 200] [--seed 0]
    python benchmarks/verdict_coverage.py power --from-verdict VERDICT.json [--row subspace] [--sims 2000] [--seed 0]

coverage: `anchorft.studies.testbed.verdict_sim.coverage` for every design at 6 and 16 bases (an option exactly on
a noisy front: true excess 0), a markdown table of each interval's coverage of 0 and its binomial SE.
power: the bases the modified Hartung-Knapp test needs for 80 % power, with a recorded verdict's row as the input
(`toy verdict --method hull-bc`'s verdict.json: the SD of its bases' corrected excesses, with its 95 % chi-square
interval, for the between-base SD; each base's bootstrap SE for the within-base one), at the smallest effect of
interest (4 points) and at the row's pooled estimate. numpy only; one seeded Generator passed down.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats

from anchorft.studies.testbed import verdict_sim as vs

SESOI = 4.0  # points: the smallest effect of interest of configs/toy/verdict2.yaml


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("coverage", "power"))
    p.add_argument("--studies", type=int, default=500)
    p.add_argument("--boot", type=int, default=200)
    p.add_argument("--sims", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--from-verdict", default=None, help="power: a verdict.json (toy verdict --method hull-bc)")
    p.add_argument("--row", default="subspace", help="power: its row")
    p.add_argument("--se-scale", type=float, default=1.0, help="power: the within-base SEs times this (fewer seeds)")
    p.add_argument("--at", type=int, default=20, help="power: also the power at this many bases")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    out = []
    if args.what == "coverage":
        print(
            "| design | bases | per base: percentile | bias-corrected | bias-aware | pooled: HK plain | HK "
            "corrected | HK bias-aware | mean plain | mean corrected |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for design in vs.DESIGNS.values():
            for bases in (6, 16):
                t = time.time()
                r = vs.coverage(design, bases, args.studies, args.boot, rng)
                c, se = r["coverage"], r["binomial_se"]
                cells = " | ".join(f"{c[k]:.3f} ({se[k]:.3f})" for k in c)
                print(f"| {design.name} | {bases} | {cells} | {r['mean_plain']:+.2f} | {r['mean_corrected']:+.2f} |"
                      f"  <!-- {time.time() - t:.0f} s -->")  # fmt: skip
                out.append(r)
    else:
        with open(args.from_verdict) as f:
            verdict = json.load(f)
        rows = [b[args.row] for b in verdict["per_base"]]
        ys, ses = [r["corrected"] for r in rows], [args.se_scale * r["se"] for r in rows]
        bound = abs(float(np.mean([r["bias"] for r in rows])))
        k0 = len(ys)
        sd = float(np.std(ys, ddof=1))
        low, high = (sd * np.sqrt((k0 - 1) / stats.chi2.ppf(q, k0 - 1)) for q in (0.975, 0.025))
        mean = verdict["pooled"][args.row]["mean"]
        print(f"{args.row}: corrected per base {[round(y, 1) for y in ys]}, SD {sd:.2f} [{low:.2f}, {high:.2f}], "
              f"SEs used {[round(s, 2) for s in ses]}, bias bound {bound:.2f}, pooled {mean:+.2f}")  # fmt: skip
        print(f"| effect (points) | between-base SD | bases for 80 % power | power there | power at {args.at} bases |")
        print("|---|---|---|---|---|")
        for delta in (SESOI, round(mean, 1)):
            for tau in (low, sd, high):
                k, pw = vs.bases_for_power(delta, tau, ses, rng, sims=args.sims, max_bases=120, bound=bound)
                at = vs.power(delta, tau, ses, args.at, args.sims, rng, bound=bound)
                print(f"| {delta:g} | {tau:.1f} | {k if k else '> 120'} | {pw:.3f} | {at:.3f} |")
                out.append({"delta": delta, "tau": tau, "bases": k, "power": pw, "sims": args.sims, "at": at})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
