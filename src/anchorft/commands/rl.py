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
    p.add_argument("--dataset", required=True, help="JSONL prompts with gold answers")
    p.add_argument("--out", required=True, help="output directory")
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
            conv = int if isinstance(f.default, int) else float if isinstance(f.default, float) else str
            p.add_argument(flag, type=conv, default=None, help=f"default {f.default}")
    both_spellings(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
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
