"""The whole analysis (`run_analysis`) through the `anchorft analyze` command: every part, bad input, and the
models of a comparison."""

from __future__ import annotations

import json

from anchorft.cli import command

main = command("analyze")  # the command as `anchorft analyze` runs it


def test_cli_end_to_end(checkpoints, prompt_files, tmp_path, capsys):
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    results = {
        "base": {"id_avg@k": 0.1, "ood_mean": 0.6},
        "methods": {
            "sft": {"id_avg@k": 0.5, "ood_mean": 0.2, "method": "sft", "settings": {}},
            "rpsft-k2": {"id_avg@k": 0.4, "ood_mean": 0.4, "method": "rpsft", "settings": {"anchor_rank": 2}},
        },
    }
    (cmp_dir / "results.json").write_text(json.dumps(results))
    out = tmp_path / "out"
    argv = ["--base", str(checkpoints["base"]), "--tuned", f"small={checkpoints['small']}"]
    argv += ["--tuned", f"large={checkpoints['large']}", "--out", str(out), "--rank", "4"]
    argv += ["--prompts", str(prompt_files["plain"]), "--prompts", str(prompt_files["chat"])]
    argv += ["--fisher-data", str(prompt_files["pc"]), "--fisher-samples", "3", "--compare", str(cmp_dir)]
    argv += ["--fisher-ood-data", str(prompt_files["pc"])]
    assert main(argv) == 0
    res = json.loads((out / "analysis.json").read_text())
    assert set(res) >= {"rotation", "drift", "fisher", "rank_sensitivity"}
    assert set(res["drift"]) == {"plain", "chat"}
    d = res["drift"]["plain"]["models"]
    assert d["large"]["rel_l2"][-1] > d["small"]["rel_l2"][-1] > 0
    assert res["fisher"]["ranks"] == [1, 2, 4] and res["fisher"]["samples"] == 3
    fp = res["fisher_projected"]
    assert (fp["ranks"], fp["id_samples"], fp["ood_samples"]) == ([1, 2, 4], 3, 3)
    assert "fisher_projected_overlap.png" in res["figures"]
    assert [p["k"] for p in res["rank_sensitivity"]["points"]] == [0, 2]
    for f in res["figures"]:
        assert (out / f).stat().st_size > 1000
    assert {"drift_plain.png", "fisher_overlap.png", "rank_sensitivity.png"} <= set(res["figures"])
    assert json.loads((out / "config.json").read_text())["resolved_rank"] == 4
    printed = capsys.readouterr().out
    assert "{" not in printed and "small" in printed and "large" in printed and "turned" in printed


def test_cli_bad_input_returns_2(checkpoints, tmp_path, capsys):
    assert main(["--base", str(checkpoints["base"]), "--tuned", "x", "--out", str(tmp_path)]) == 2
    assert "--tuned must be NAME=DIR" in capsys.readouterr().err
    argv = ["--base", str(tmp_path / "missing"), "--tuned", f"s={checkpoints['small']}", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert f"--base: {tmp_path / 'missing'} does not exist" in capsys.readouterr().err  # before torch loads


def test_cli_finds_models_of_a_comparison(checkpoints, tmp_path):
    import shutil

    cmp_dir = tmp_path / "cmp"
    for name, src in (("base", "base"), ("zeta", "small"), ("alpha", "large"), ("zeta-seed1", "small")):
        shutil.copytree(checkpoints[src], cmp_dir / "models" / name)
    zeta, alpha = {"ood_mean": 0.1, "method": "sft"}, {"ood_mean": 0.2, "method": "dft"}
    results = {"base": {}, "methods": {"zeta": zeta, "alpha": alpha}}
    (cmp_dir / "results.json").write_text(json.dumps(results))
    out = tmp_path / "out"
    assert main(["--compare", str(cmp_dir), "--out", str(out), "--rank", "2", "--no-plots"]) == 0
    res = json.loads((out / "analysis.json").read_text())
    assert list(res["tuned"]) == ["zeta", "alpha"]  # results.json order; seed copies left out
    assert res["base"] == str(cmp_dir / "models" / "base")
