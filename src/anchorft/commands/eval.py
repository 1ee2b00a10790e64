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
from pathlib import Path

from anchorft.commands.eval_suite import main as suite_main
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, keyword_defaults
from anchorft.eval.arguments import EvalArguments, SamplingArguments, ScoreArguments
from anchorft.io import write_jsonl
from anchorft.preflight import check_eval_spec, check_input_file
from anchorft.rpsft.prechecks import source_defaults
from anchorft.runs import check_output_dir


def _score_parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft eval score", description=" ".join(ScoreArguments.__doc__.split()))
    both_spellings(add_field_flags(p, ScoreArguments))
    return p


def _eval_parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft eval", description=" ".join(EvalArguments.__doc__.split()))
    # run_eval's defaults, from its source: importing the runner loads torch (seconds before a mistake is reported)
    d = source_defaults("anchorft.eval.runner", "run_eval")
    if d is None:
        from anchorft.eval.runner import run_eval  # lazy: loads torch

        d = keyword_defaults(run_eval)
    sampling = ("n", "temperature", "top_p", "max_new_tokens", "seed", "batch_size")
    add_field_flags(p, EvalArguments)
    both_spellings(add_field_flags(p, SamplingArguments, defaults={k: d[k] for k in sampling}))
    return p


def _score(argv: list[str]) -> int:
    args = _score_parser().parse_args(argv)
    # the files and values before torch loads (seconds); a user error: one line, by anchorft.cli
    check_input_file(args.bench, "--bench", jsonl=False)
    check_input_file(args.responses, "--responses", jsonl=False)
    if args.k is not None and args.k < 1:
        raise ValueError(f"--k: must be >= 1, got {args.k}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout: must be > 0 seconds, got {args.timeout}")
    if args.records is not None and Path(args.records).is_dir():
        raise ValueError(f"--records: {args.records} is a folder; give a file (JSONL) to write")
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
    check_output_dir(args.out)
    from anchorft.eval.runner import eval_into  # lazy: loads torch

    result = eval_into(args.out, run, args.overwrite, args.timeout)
    if result is None:
        return 0
    print(json.dumps(result["results"], default=str) if args.lm_eval else json.dumps(result))
    return 0
