"""`anchorft eval`: the paper's JSONL benchmarks, scoring of outside responses, the lm-eval bridge.

`anchorft eval --bench` is the evaluation suite's runner with one model (`anchorft.eval.runner.run_eval`):
files by path, each file's own prompt, a greedy pass; resumable like the suite.

anchorft eval --model DIR --bench FILE.jsonl [--bench FILE2.jsonl ...] --out DIR
              [--n 16 --k 16 --temperature 0.7 --top_p 0.95 --max_new_tokens N --limit N]
anchorft eval score --bench FILE.jsonl --responses FILE.jsonl [--k K]
anchorft eval suite --models NAME=DIR ... [--bench-dir DIR] --out DIR [--preset paper]   (see eval_suite.py)
anchorft eval --model DIR --lm-eval TASKS [--include-path DIR] --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys

from anchorft.commands.eval_suite import main as suite_main
from anchorft.commands.flags import add_sampling_flags, add_timeout_flag
from anchorft.dataclass_flags import FlagParser, both_spellings, keyword_defaults
from anchorft.io import write_jsonl
from anchorft.preflight import check_eval_spec
from anchorft.rpsft.prechecks import source_defaults


def _score_parser() -> argparse.ArgumentParser:
    p = FlagParser(
        prog="anchorft eval score",
        description="Score responses produced elsewhere. RESPONSES: one JSON line per item, "
        '{"index": i, "responses": [str, ...]} (optional "greedy": str); i is the 0-based item position '
        "in the benchmark file. Prints the metrics as one JSON object.",
    )
    p.add_argument("--bench", required=True, help="benchmark JSONL file (the paper's format)")
    p.add_argument("--responses", required=True, help="responses JSONL file")
    p.add_argument("--k", type=int, default=None, help="k of Pass@k (default: fewest samples of any item)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines instead of failing")
    p.add_argument("--records", default=None, help="also write per-item records (JSONL) here")
    add_timeout_flag(p)
    both_spellings(p)
    return p


def _eval_parser() -> argparse.ArgumentParser:
    p = FlagParser(
        prog="anchorft eval",
        description="Evaluate a local model on the paper's JSONL benchmarks (Avg@k, unbiased Pass@k, greedy "
        "accuracy), or run lm-evaluation-harness tasks with --lm-eval. `anchorft eval score --help` "
        "scores responses produced elsewhere; `anchorft eval suite --help` evaluates several models on the paper's "
        "whole ID / OOD suite with one table.",
    )
    p.add_argument("--model", required=True, help="local model directory (config.json, weights, tokenizer)")
    p.add_argument("--bench", action="append", default=[], help="benchmark JSONL file; repeat for several")
    p.add_argument("--lm-eval", dest="lm_eval", default=None, help="comma-separated lm-eval task names or YAML files")
    p.add_argument("--include-path", action="append", default=[], help="folder of custom lm-eval task YAMLs")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--no-greedy", dest="greedy", action="store_false", help="skip the greedy pass")

    # run_eval's defaults, from its source: importing the runner loads torch (seconds before a mistake is reported)
    d = source_defaults("anchorft.eval.runner", "run_eval")
    if d is None:
        from anchorft.eval.runner import run_eval

        d = keyword_defaults(run_eval)
    add_sampling_flags(p, **{k: d[k] for k in ("n", "temperature", "top_p", "max_new_tokens", "seed", "batch_size")})
    p.add_argument("--num-fewshot", type=int, default=None, help="lm-eval: few-shot examples")
    p.add_argument("--apply-chat-template", action="store_true", help="lm-eval: apply the model's chat template")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    both_spellings(p)
    return p


def _score(argv: list[str]) -> int:
    args = _score_parser().parse_args(argv)
    from anchorft.eval.benchmarks import score_file  # lazy: loads torch

    metrics, records = score_file(args.bench, args.responses, args.k, args.skip_bad, args.timeout)
    if metrics["n_missing"]:
        print(
            f"anchorft eval score: warning: no responses for {metrics['n_missing']} of "
            f"{metrics['n_missing'] + len(records)} items; the score covers the {len(records)} answered",
            file=sys.stderr,
        )
    if args.records:
        write_jsonl(args.records, records)
    print(json.dumps(metrics))
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "score":
        return _score(argv[1:])
    if argv and argv[0] == "suite":
        return suite_main(argv[1:])
    args = _eval_parser().parse_args(argv)
    run = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite", "timeout")}
    check_eval_spec(run)  # before torch loads (seconds); a user error: one line, by anchorft.cli
    from anchorft.eval.runner import eval_into  # lazy: loads torch

    result = eval_into(args.out, run, args.overwrite, args.timeout)
    if result is None:
        return 0
    print(json.dumps(result["results"], default=str) if args.lm_eval else json.dumps(result))
    return 0
