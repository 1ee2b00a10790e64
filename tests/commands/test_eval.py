"""`anchorft eval` and `anchorft eval score` through their main(argv)."""

from __future__ import annotations

import json

from anchorft.cli import command

main = command("eval")  # the command as `anchorft eval` runs it


def _bench(tmp_path):
    mc = "Q?\n\nChoices:\nA. x\nB. y\n\nPlease answer with the single correct option letter (e.g., A)."
    rows = [
        {
            "prompt": [{"role": "user", "content": "What is 1/2 as a decimal?"}],
            "reward_model": {"ground_truth": "0.5"},
        },
        {"prompt": [{"role": "user", "content": mc}], "reward_model": {"ground_truth": "B"}},
        {"prompt": [{"role": "user", "content": "2+2?"}], "reward_model": {"ground_truth": 4}},
    ]
    f = tmp_path / "bench.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_score_prints_metrics(tmp_path, capsys):
    bench = _bench(tmp_path)
    resp = tmp_path / "resp.jsonl"
    lines = [
        {"index": 0, "responses": [r"\boxed{\frac{1}{2}}", r"\boxed{0.25}", "none"], "greedy": r"\boxed{1/2}"},
        {"index": 1, "responses": [r"\boxed{B}", "A", "The answer is (B)"]},
        {"index": 2, "responses": [r"\boxed{5}", r"\boxed{5}", r"\boxed{4}"]},
    ]
    resp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert (
        main(
            [
                "score",
                "--bench",
                str(bench),
                "--responses",
                str(resp),
                "--k",
                "2",
                "--records",
                str(tmp_path / "r.jsonl"),
            ]
        )
        == 0
    )
    m = json.loads(capsys.readouterr().out)
    assert m["n_items"] == 3 and m["k"] == 2
    assert abs(m["avg@k"] - (1 / 3 + 2 / 3 + 1 / 3) / 3) < 1e-12
    # pass@2 from 3 samples: c=1 -> 2/3, c=2 -> 1, c=1 -> 2/3
    assert abs(m["pass@k"] - (2 / 3 + 1 + 2 / 3) / 3) < 1e-12
    assert m["greedy_acc"] == 1.0 and m["n_greedy"] == 1
    recs = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert recs[1]["answers"] == ["B", "A", "B"]


def test_score_bad_line_error_and_skip_bad(tmp_path, capsys):
    bench = _bench(tmp_path)
    resp = tmp_path / "resp.jsonl"
    resp.write_text('{"index": 0, "responses": ["\\\\boxed{0.5}"]}\n{"index": 1, "responses": [\n')
    assert main(["score", "--bench", str(bench), "--responses", str(resp)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert main(["score", "--bench", str(bench), "--responses", str(resp), "--skip-bad"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n_items"] == 1 and m["avg@k"] == 1.0 and m["n_bad_response_lines"] == 1 and m["n_missing"] == 2


def test_eval_command_on_a_local_bench(tiny_model_dir, tmp_path, capsys):
    bench = _bench(tmp_path)
    out = tmp_path / "out"
    argv = ["--model", str(tiny_model_dir), "--bench", str(bench), "--n", "2", "--k", "2", "--max_new_tokens", "3"]
    assert main(argv + ["--out", str(out), "--backend", "hf"]) == 0
    m = json.loads(capsys.readouterr().out)["bench"]
    assert m["n_items"] == 3 and "greedy_acc" in m
    assert (out / "bench" / "records.jsonl").is_file() and (out / "config.json").is_file()


def test_eval_command_errors(tmp_path, capsys):
    assert main(["--model", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "--bench" in capsys.readouterr().err
    bench = _bench(tmp_path)
    assert (
        main(["--model", str(tmp_path), "--bench", str(bench), "--out", str(tmp_path / "o"), "--n", "2", "--k", "3"])
        == 2
    )
    assert "k" in capsys.readouterr().err
