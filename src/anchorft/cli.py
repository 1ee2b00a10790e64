"""The `anchorft` console script.

Each subcommand lives in its own module under `anchorft.commands` and exposes `main(argv) -> int`.
The command modules only parse arguments and call library functions: library code never parses
`sys.argv` (torchtune's rule). Modules are imported lazily so that `anchorft w2s ...` does not pay
for importing transformers.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "w2s": ("anchorft.commands.w2s", "weak-to-strong simulator: run, sweep, theory"),
    "train": ("anchorft.commands.train", "fine-tune with RPSFT or a baseline (TRL SFTTrainer)"),
    "toy": ("anchorft.commands.toy", "embedded testbed: pretrain the tiny model, compare methods"),
    "eval": ("anchorft.commands.eval", "evaluate a model on JSONL benchmarks; score responses; lm-eval bridge"),
    "rl": ("anchorft.commands.rl", "DAPO reinforcement learning from an SFT checkpoint"),
    "data": ("anchorft.commands.data", "prepare fine-tuning data (OpenR1-Math)"),
    "analyze": ("anchorft.commands.analyze", "geometry of forgetting: rotation, drift, Fisher overlap"),
}


def _usage() -> str:
    lines = ["usage: anchorft <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `anchorft <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from anchorft import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"anchorft: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
