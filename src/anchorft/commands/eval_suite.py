"""`anchorft eval suite`: every (model, benchmark) pair of the paper's evaluation, resumable, and the main table
(`anchorft.studies.eval_suite`: one grid cell per model, recorded in OUT/cells.jsonl).

anchorft eval suite --models base=HUB_ID_OR_DIR sft=DIR rpsft=DIR [--bench-dir DIR] --out runs/suite
                    [--preset paper] [--rl-checkpoint] [--benches aime-24,math500,...] [--prompt file]
                    [--backend auto|hf|vllm] [--tensor-parallel N] [--data-parallel N] [--limit N]
                    [--executor ray [--address HOST:PORT] [--retries N] [--cell-cpus N] [--cell-gpus N]]
"""

from __future__ import annotations

import argparse
import json
import sys

from anchorft.commands.flags import add_executor_flags, cluster_from
from anchorft.dataclass_flags import FlagParser, add_field_flags, both_spellings, field_values, parse_named
from anchorft.eval.arguments import SUITE_PRESETS, SamplingArguments, SuiteArguments, pass_k
from anchorft.rpsft.prechecks import MISSING, UNKNOWN, source_fields
from anchorft.runs import check_output_dir


def _suite_defaults(names: tuple[str, ...]) -> dict:
    """SuiteSettings' defaults of `names` (the flags'), read from its source: importing it loads torch."""
    read = source_fields("anchorft.eval.protocol", "SuiteSettings")
    if read is not None and all(n in read and read[n].default not in (MISSING, UNKNOWN) for n in names):
        return {n: read[n].default for n in names}
    from anchorft.eval.protocol import SuiteSettings  # lazy: loads torch

    d = SuiteSettings()
    return {n: getattr(d, n) for n in names}


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="anchorft eval suite", description=" ".join(SuiteArguments.__doc__.split()))
    own = ("n", "temperature", "top_p", "max_new_tokens", "seed", "batch_size", "prompt", "chunk")
    defaults = _suite_defaults(own)
    for cls in SuiteArguments, SamplingArguments:  # the sampling flags last, SuiteSettings' defaults
        add_field_flags(p, cls, defaults=defaults)
    add_executor_flags(p)
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cell_cpus is not None and args.cell_cpus < 1:  # the command's own values before torch loads
        raise ValueError(f"--cell-cpus: must be >= 1, got {args.cell_cpus}")
    if args.preset not in SUITE_PRESETS:
        raise ValueError(f"--preset: unknown preset {args.preset!r}; choose from {list(SUITE_PRESETS)}")
    models = parse_named(args.models, "--models")
    check_output_dir(args.out)
    from anchorft.eval.benchmarks import benchmarks_dir  # lazy: loads torch
    from anchorft.eval.protocol import SuiteSettings  # lazy: loads torch
    from anchorft.studies.eval_suite import suite_into  # lazy: loads torch

    # a user error here and below: one line, by anchorft.cli
    gpus = args.cell_gpus
    if gpus is None:
        gpus = args.tp * (args.dp or 1) if args.backend == "vllm" else 0.0
    cluster = cluster_from(args, gpus, **{"--cell-cpus": args.cell_cpus, "--cell-gpus": args.cell_gpus})
    vllm = dict(tensor_parallel_size=args.tp, data_parallel_size=args.dp, enable_prefix_caching=args.prefix_caching)
    settings = SuiteSettings(**field_values(args, SuiteSettings, k=pass_k(args), extra={"vllm": vllm}))
    benches = [b.strip() for b in args.benches.split(",") if b.strip()] if args.benches else None
    bench_dir = args.bench_dir or str(benchmarks_dir())
    table = suite_into(
        models, bench_dir, args.out, settings, benches=benches,
        backend=args.backend, timeout_s=args.timeout, cluster=cluster, threads=args.cell_cpus or 1,
        overwrite=args.overwrite, log=lambda m: print(m, file=sys.stderr, flush=True),
    )  # fmt: skip
    print(json.dumps({m: {k: v for k, v in r.items() if "mean" in k} for m, r in table["models"].items()}))
    return 0
