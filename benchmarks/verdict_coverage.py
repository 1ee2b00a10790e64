"""Coverage of the verdict's intervals on known designs, and the power plan of the next study.

    python benchmarks/verdict_coverage.py coverage [--studies 500] [--boot 200] [--seed 0]
    python benchmarks/verdict_coverage.py power [--sims 2000] [--seed 0]

coverage: `anchorft.studies.testbed.verdict_sim.coverage` for every design at 6 and 16 bases (an option exactly on
a noisy front: true excess 0), a markdown table of each interval's coverage of 0 and its binomial SE.
power: the bases the modified Hartung-Knapp test needs for 80 % power, the subspace kind's six recorded bases as
the input (between-base SD 6.0, 95 % CI 3.7-14.7; each base's bootstrap SE), at the smallest effect of interest
and at the pilot's estimates. numpy only; one seeded Generator passed down.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from anchorft.studies.testbed import verdict_sim as vs

# the subspace kind's six recorded bases (records/verdict, `toy verdict --method hull-bc`): each base's bootstrap SE
SUBSPACE_SE = (4.75, 2.47, 3.59, 1.51, 2.93, 1.52)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("coverage", "power"))
    p.add_argument("--studies", type=int, default=500)
    p.add_argument("--boot", type=int, default=200)
    p.add_argument("--sims", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
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
        print("| effect (points) | between-base SD | bases for 80 % power | power there |")
        print("|---|---|---|---|")
        for delta in (4.0, 4.4, 6.1):
            for tau in (3.7, 6.0, 14.7):
                k, pw = vs.bases_for_power(delta, tau, SUBSPACE_SE, rng, sims=args.sims, max_bases=120)
                print(f"| {delta:g} | {tau:g} | {k if k else '> 120'} | {pw:.3f} |")
                out.append({"delta": delta, "tau": tau, "bases": k, "power": pw, "sims": args.sims})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
