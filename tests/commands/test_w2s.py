import json

import yaml

from anchorft.cli import command

main = command("w2s")  # the command as `anchorft w2s` runs it


def _tiny_args(out):
    return [
        "run",
        "--preset",
        "paper",
        "--out",
        str(out),
        "--n-seeds",
        "2",
        "--steps",
        "30",
        "--quiet",
        "d=48",
        "s=8",
        "group_sizes=4,6",
        "weak_neurons=4",
        "batch_size=8",
        "n_log=6",
        "chunk=8",
    ]


def test_run_writes_config_metrics_and_figure(tmp_path):
    out = tmp_path / "run"
    assert main(_tiny_args(out)) == 0
    cfg_text = (out / "config.yaml").read_text()
    assert cfg_text.splitlines()[0].startswith("# anchorft w2s run --preset paper")
    cfg = yaml.safe_load(cfg_text)
    assert cfg["d"] == 48 and cfg["steps"] == 30 and cfg["n_seeds"] == 2
    m = json.loads((out / "metrics.json").read_text())
    assert m["provenance"]["anchorft"] and "git_dirty" in m["provenance"]
    for mode in ("w2s", "sft"):
        e = m[mode]
        for key in ("steps", "samples", "target_alignment", "nontarget_alignment", "nontarget_target_alignment"):
            assert len(e[key]) == len(e["steps"])
        assert e["steps"][-1] == 30 and e["samples"][-1] == 30 * 8
        assert (
            set(e["init"])
            == set(e["final"])
            == {"target_alignment", "nontarget_alignment", "nontarget_target_alignment"}
        )
        assert abs(e["init"]["nontarget_alignment"] - 0.9) < 1e-5
    assert (out / "alignment.png").stat().st_size > 1000


def test_run_bad_input_fails_before_work(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["run", "--out", str(out), "rho=1.0"]) == 2
    assert "rho" in capsys.readouterr().err
    assert not out.exists()
    assert main(["run", "--out", str(out), "bogus=3"]) == 2
    assert "unknown w2s config key 'bogus'" in capsys.readouterr().err


def test_nan_run_exits_nonzero_and_keeps_metrics(tmp_path, capsys):
    out = tmp_path / "nan"
    assert main(_tiny_args(out) + ["eta_w2s=1e30", "lambda_kappa=0.5"]) == 1
    assert "at step" in capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert m["diverged"]["mode"] == "w2s" and m["diverged"]["step"] >= 1
    assert "sft" not in m and len(m["w2s"]["steps"]) >= 1


def test_theory_prints_json(capsys):
    assert main(["theory", "--json", "--link", "he4", "--transform", "zexp", "--d", "1024", "--s", "128"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["information_exponent"] == 4 and r["generative_exponent"] == 2
    assert abs(r["hermite_coefficients"][4] - 1.0) < 1e-9
    assert r["predicted_sample_complexity"]["w2s"]["value"] == 128**1.5
    assert r["predicted_sample_complexity"]["sft"]["value"] == 1024.0**3
    assert main(["theory", "--json", "--link", "he3", "--transform", "identity", "--clip", "0"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["information_exponent"] == 3 and r["transformed_information_exponent"] == 3
    assert r["generative_exponent"] == 1  # min over polynomial transforms (y^3)


def test_theory_flags_default_to_the_config_and_override_a_preset(capsys):
    from anchorft.w2s.config import W2SConfig

    assert main(["theory", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    c = W2SConfig()
    assert [r[k] for k in ("link", "transform", "clip", "d", "s")] == [c.link, c.transform, c.clip, c.d, c.s]
    small = ["--n-seeds", "1", "label_samples=256"]
    assert main(["theory", "--json", "--preset", "paper", *small, "--link", "he3", "--d", "512"]) == 0
    by_flag = json.loads(capsys.readouterr().out)
    assert main(["theory", "--json", "--preset", "paper", *small, "link=he3", "d=512"]) == 0
    assert by_flag == json.loads(capsys.readouterr().out) and (by_flag["link"], by_flag["d"]) == ("he3", 512)


def test_run_ode_writes_predicted_escape_beside_measured(tmp_path):
    out = tmp_path / "ode"
    assert main([*_tiny_args(out), "--ode"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    for mode in ("w2s", "sft"):
        e = m["ode"][mode]
        assert e["steps"] == m[mode]["steps"]
        for key in ("target_alignment", "nontarget_alignment", "nontarget_target_alignment"):
            assert len(e[key]) == len(e["steps"])
            assert abs(e[key][0] - m[mode][key][0]) < 1e-5  # same initial order parameters as the simulation
        assert len(e["escape_samples_per_seed"]) == len(e["escape_samples_measured"]) == 2
        assert len(e["label_coefficients_per_seed"]) == 2
    assert "--ode" in (out / "config.yaml").read_text().splitlines()[0]


def test_run_ode_skips_the_modes_the_theory_does_not_cover(tmp_path):
    out = tmp_path / "ode_ceiling"
    assert main(["run", "--ode", *_tiny_args(out)[1:], "modes=w2s,ceiling,sft_anchor"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert "skipped" not in m["ode"]["w2s"] and m["ode"]["w2s"]["steps"] == m["w2s"]["steps"]
    for mode in ("ceiling", "sft_anchor"):
        assert "steps" in m[mode] and "mean-field theory covers" in m["ode"][mode]["skipped"]


def test_run_ode_rejects_non_polynomial_activation_before_work(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["run", "--ode", *_tiny_args(out)[1:], "activation=tanh"]) == 2
    assert "polynomial" in capsys.readouterr().err
    assert not out.exists()
