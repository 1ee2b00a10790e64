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

from anchorft.commands.flags import add_executor_flags, add_sampling_flags, cluster_from, pass_k
from anchorft.dataclass_flags import FlagParser, both_spellings, field_values, parse_named
from anchorft.errors import UsageError
from anchorft.eval.vllm_backend import VLLMOptions

PRESETS = ("paper",)


def _parser() -> argparse.ArgumentParser:
    from anchorft.eval.protocol import SuiteSettings

    d, v = SuiteSettings(), VLLMOptions()
    p = FlagParser(
        prog="anchorft eval suite",
        description="Run every model on every benchmark of the RPSFT paper's protocol (resumable: rerun the same "
        "command after an interruption) and write the main table (table.json, table.md, table.png).",
    )
    p.add_argument(
        "--models",
        nargs="+",
        required=True,
        metavar="NAME=HUB_ID_OR_DIR",
        help="a model folder or a hub id (e.g. Qwen/Qwen2.5-3B-Instruct); the first is the base of the deltas",
    )
    from anchorft.eval.benchmarks import benchmarks_dir

    p.add_argument(
        "--bench-dir",
        default=str(benchmarks_dir()),
        help="folder with id/ and ood/ JSONL files in the paper's format (default: $ANCHORFT_BENCHMARKS, else the "
        "user's data folder, where `anchorft data benchmarks` writes them: %(default)s)",
    )
    p.add_argument("--out", required=True, help="output folder (reuse it to resume, or to add models or benchmarks)")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    p.add_argument("--preset", default="paper", help=f"the release's protocol (the defaults): {', '.join(PRESETS)}")
    p.add_argument("--benches", default=None, help="comma-separated file names instead of the preset's list")
    p.add_argument("--rl-checkpoint", action="store_true", help=f"RL checkpoints: {d.rl_max_new_tokens} new tokens")
    p.add_argument("--prompt", choices=["boxed-fewshot", "file"], default=d.prompt, help="system prompt")
    add_sampling_flags(
        p, n=d.n, temperature=d.temperature, top_p=d.top_p, max_new_tokens=d.max_new_tokens, seed=d.seed,
        batch_size=d.batch_size,
    )  # fmt: skip
    p.add_argument("--chunk", type=int, default=d.chunk, help="items between two saves of generations")
    p.add_argument("--max-batch-tokens", dest="max_batch_tokens", type=int, default=None, help="hf: padded tokens")
    p.add_argument(
        "--tensor-parallel", dest="tp", type=int, default=v.tensor_parallel_size, help="vllm: GPUs per engine"
    )
    p.add_argument("--data-parallel", dest="dp", type=int, default=None, help="vllm: engines (default: GPUs // tp)")
    p.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false", help="vllm")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false", help="skip the timing estimate")
    add_executor_flags(p)
    p.add_argument(
        "--cell-cpus", dest="cell_cpus", type=int, default=None,
        help="with --executor ray: the CPUs (torch threads) each model's task holds (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--cell-gpus", dest="cell_gpus", type=float, default=None,
        help="with --executor ray: the GPUs each model's task holds (default: --tensor-parallel x --data-parallel "
        "(1 when not given) with --backend vllm, else 0: give 1 for the hf backend on GPU nodes)",
    )  # fmt: skip
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from anchorft.eval.protocol import SuiteSettings  # lazy: loads torch
    from anchorft.studies.eval_suite import suite_into

    # a user error here and below: one line, by anchorft.cli
    gpus = args.cell_gpus
    if gpus is None:
        gpus = args.tp * (args.dp or 1) if args.backend == "vllm" else 0.0
    if args.cell_cpus is not None and args.cell_cpus < 1:
        raise ValueError(f"--cell-cpus: must be >= 1, got {args.cell_cpus}")
    cluster = cluster_from(args, gpus, **{"--cell-cpus": args.cell_cpus, "--cell-gpus": args.cell_gpus})
    if args.preset not in PRESETS:
        raise UsageError(f"--preset: unknown preset {args.preset!r}; choose from {list(PRESETS)}")
    vllm = dict(tensor_parallel_size=args.tp, data_parallel_size=args.dp, enable_prefix_caching=args.prefix_caching)
    settings = SuiteSettings(**field_values(args, SuiteSettings, k=pass_k(args), extra={"vllm": vllm}))
    benches = [b.strip() for b in args.benches.split(",") if b.strip()] if args.benches else None
    table = suite_into(
        parse_named(args.models, "--models"), args.bench_dir, args.out, settings, benches=benches,
        backend=args.backend, timeout_s=args.timeout, cluster=cluster, threads=args.cell_cpus or 1,
        overwrite=args.overwrite, log=lambda m: print(m, file=sys.stderr, flush=True),
    )  # fmt: skip
    print(json.dumps({m: {k: v for k, v in r.items() if "mean" in k} for m, r in table["models"].items()}))
    return 0
