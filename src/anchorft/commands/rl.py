"""`anchorft rl`: DAPO (TRL GRPOTrainer) from an SFT checkpoint, reward = math-verify correctness.

  anchorft rl --model DIR --dataset FILE.jsonl --out DIR [--config configs/rl/dapo.yaml] [--steps N ...]

The dataset is JSONL in the paper's benchmark format (prompt messages, reward_model.ground_truth)
or {"prompt": str | messages, "answer": str}. Settings: the paper's DAPO values by default, then a
YAML --config (keys of anchorft.rpsft.rl.RLSettings), then the command-line flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from anchorft.commands.flags import both_spellings
from anchorft.errors import report


def _parser() -> argparse.ArgumentParser:
    from anchorft.rpsft.rl import RLSettings

    p = argparse.ArgumentParser(prog="anchorft rl", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local SFT checkpoint directory")
    p.add_argument("--dataset", default=None, help="JSONL prompts with gold answers (required unless --estimate)")
    p.add_argument("--out", default=None, help="output directory (required unless --estimate)")
    p.add_argument("--config", default=None, help="YAML of RLSettings fields")
    p.add_argument("--limit", type=int, default=None, help="use the first N prompts")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed dataset lines")
    p.add_argument("--overwrite", action="store_true", help="replace an output folder that holds another run")
    for f in dataclasses.fields(RLSettings):
        flag = "--" + f.name
        if f.type in ("bool", bool):
            p.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=None, metavar="BOOL")
        elif f.name == "overlong_cache":
            p.add_argument(flag, type=int, default=None, help="soft overlong punishment window (tokens); 0: off")
        else:
            t = str(f.type)
            conv = int if t.startswith("int") else float if t.startswith("float") else str
            p.add_argument(flag, type=conv, default=None, help=f"default {f.default}")
    p.add_argument(
        "--estimate", action="store_true",
        help="print the memory estimate for --model (parameters counted from config.json, no weights loaded) "
        "on 1 and 8 GPUs, and exit",
    )  # fmt: skip
    both_spellings(p)
    return p


def _estimate(model_dir: str, settings) -> list[str]:
    from pathlib import Path

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from anchorft.rpsft.rl import format_memory_estimate, rl_memory_estimate

    if not (Path(model_dir) / "config.json").is_file():
        raise ValueError(f"--model {model_dir}: no config.json there")
    cfg = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    colocate = str(settings.use_vllm).lower() != "false"
    return [format_memory_estimate(rl_memory_estimate(n, g, settings.master_dtype, colocate)) for g in (1, 8)]


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.estimate and (args.dataset is None or args.out is None):
        parser.error("--dataset and --out are required (unless --estimate)")
    from anchorft.errors import check_types
    from anchorft.preflight import check_input_file, check_model_source
    from anchorft.rpsft.rl import RLSettings, load_rl_dataset, run_rl
    from anchorft.runs import claim_output, finish, reused

    try:
        values: dict = {}
        names = {f.name for f in dataclasses.fields(RLSettings)}
        if args.config:
            from anchorft.errors import check_keys, read_yaml

            values.update(check_keys(read_yaml(args.config) or {}, RLSettings, args.config))
        values.update({k: v for k, v in vars(args).items() if k in names and v is not None})
        if values.get("overlong_cache") == 0:
            values["overlong_cache"] = None
        settings = RLSettings(**values)
        check_types(settings, f"{args.config}: settings" if args.config else "settings")
        settings.validate()
        if args.estimate:
            print("\n".join(_estimate(args.model, settings)))
            return 0
        check_input_file(args.dataset, "--dataset", jsonl=not args.skip_bad)
        check_model_source(args.model, "--model")
        run = {"model": args.model, "dataset": args.dataset, "limit": args.limit, "settings": vars(settings)}
        claim = claim_output(args.out, "rl", run, overwrite=args.overwrite)
        if claim.complete:
            print(reused(claim))
            return 0
        data = load_rl_dataset(args.dataset, skip_bad=args.skip_bad, limit=args.limit)
        metrics = run_rl(args.model, data, args.out, settings)
        finish(claim)
    except (ValueError, FileNotFoundError) as e:
        return report("anchorft rl", e)
    metrics.pop("model", None)
    print(
        json.dumps({"reward_first": metrics["reward_first"], "reward_last": metrics["reward_last"], "out": args.out})
    )
    return 0
