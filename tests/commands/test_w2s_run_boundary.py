"""`anchorft w2s run`'s metrics.json and printed summary, recomputed from the per-seed curves and per-seed risks
written beside them: every mean over seeds, init and final value, the groups' means, the risks' means, the gains
over the weak model, the "surpasses its teacher" flags and the PGR."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from anchorft.cli import command

main = command("w2s")  # the command as `anchorft w2s` runs it

KEYS = ("target_alignment", "nontarget_alignment", "nontarget_target_alignment")


def test_w2s_run_metrics_are_the_per_seed_values_summarised(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--preset", "paper", "--out", str(out), "--n-seeds", "3", "--steps", "30", "--quiet"]
    args += ["d=48", "s=8", "group_sizes=4,6", "weak_neurons=4", "batch_size=8", "n_log=6", "chunk=8"]
    assert main([*args, "modes=w2s,sft,ceiling", "risk_samples=256"]) == 0
    printed = capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    for mode in ("w2s", "sft", "ceiling"):
        e = m[mode]
        assert e["samples"] == [8 * t for t in e["steps"]] and e["steps"][-1] == 30
        for k in KEYS:
            seeds = np.asarray(e[f"{k}_seeds"])  # (logs, seeds)
            assert seeds.shape == (len(e["steps"]), 3)
            assert e[k] == pytest.approx(seeds.mean(1).tolist(), abs=1e-12), (mode, k)  # the mean over seeds
            assert e["init"][k] == e[k][0] and e["final"][k] == e[k][-1], (mode, k)
            assert e["final_per_seed"][k] == seeds[-1].tolist(), (mode, k)
        # every seed has the same group sizes: the groups' means over all neurons are the per-seed means' means
        g = e["groups"]
        assert g["group0_theta0"]["mean"] == pytest.approx(e["target_alignment"], abs=1e-12)
        assert g["group1_theta1"]["mean"] == pytest.approx(e["nontarget_alignment"], abs=1e-12)
        assert g["group1_theta0"]["mean"] == pytest.approx(e["nontarget_target_alignment"], abs=1e-12)
        # the printed line: init -> final of the three alignments
        line = next(ln for ln in printed.splitlines() if ln.strip().startswith(f"{mode}:"))
        nums = [float(x) for x in re.findall(r"\d+\.\d+", line)][:6]
        want = [v for k in KEYS for v in (e["init"][k], e["final"][k])]
        assert nums == pytest.approx(want, abs=5e-4), line
    for dist in ("isotropic", "generative"):
        r = m["risks"][dist]
        for name, per_seed in r["risk_per_seed"].items():
            assert len(per_seed) == 3 and r["risk"][name] == pytest.approx(np.mean(per_seed), abs=1e-12), name
        for name, gain in r["gain_over_weak"].items():  # paired on the same inputs: the difference of the means
            assert gain == pytest.approx(r["risk"]["weak"] - r["risk"][name], abs=1e-12), name
            assert r["surpasses_teacher"][name] == (gain > 3 * r["gain_over_weak_se"][name]), name
        for suffix in ("", "@link"):
            ceil = f"ceiling{suffix}"
            den = r["risk"]["weak"] - r["risk"][ceil]
            assert r["pgr_denominator"][ceil] == pytest.approx(den, abs=1e-12)
            assert r["pgr_denominator_se"][ceil] == pytest.approx(r["gain_over_weak_se"][ceil], abs=1e-12)
            for mode in ("w2s", "sft"):
                name = f"{mode}{suffix}"
                if den > 3 * r["pgr_denominator_se"][ceil]:
                    assert r["pgr"][name] == pytest.approx((r["risk"]["weak"] - r["risk"][name]) / den, rel=1e-9)
                else:
                    assert r["pgr"][name] is None
