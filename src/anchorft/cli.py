"""The `anchorft` console script.

Each subcommand lives in its own module under `anchorft.commands` and exposes `main(argv) -> int`.
The command modules only parse arguments and call library functions: library code never parses
`sys.argv` (torchtune's rule). Modules are imported lazily so that `anchorft w2s ...` does not pay
for importing transformers.

One error path (anchorft.errors): bad input (a UsageError, ValueError or file error) is one line
`anchorft CMD: error: MESSAGE` on stderr and exit code 2; `--debug` anywhere on the command line, or
ANCHORFT_DEBUG=1, prints the traceback before it. Ctrl-C exits with 130 and marks the runs it had
started "interrupted" in their run markers (anchorft.runs).
"""

from __future__ import annotations

import importlib
import os
import sys

from anchorft.errors import EXIT_INTERRUPTED, EXIT_USAGE, debug_enabled

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
# bad input: one line and exit 2 (anything else is a bug and keeps its traceback)
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
_TRAINING_DEBUG_VALUES = ("underflow_overflow", "tpu_metrics_debug")  # `--debug VALUE` is a TrainingArguments field


def _usage() -> str:
    lines = ["usage: anchorft <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `anchorft <command> --help` for a command's options.", ""]
    lines += ["options of every command: --debug (show tracebacks; or ANCHORFT_DEBUG=1)"]
    return "\n".join(lines)


def _pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Remove a bare `--debug` (not TrainingArguments' `--debug VALUE`)."""
    out, found = [], False
    for i, a in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a == "--debug" and not nxt.startswith(_TRAINING_DEBUG_VALUES):
            found = True
            continue
        out.append(a)
    return out, found


def _quiet_dataset_maps() -> None:
    """No progress bar per `datasets` map (TRL's tokenization prints several per fine-tune); the runs' own bars
    stay. HF_DATASETS_DISABLE_PROGRESS_BARS=0 brings them back. Worker processes inherit the setting."""
    if os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1") == "1" and "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def _prog(name: str, rest: list[str]) -> str:
    sub = rest[0] if rest and not rest[0].startswith("-") else ""
    return f"anchorft {name} {sub}".rstrip()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, debug_flag = _pop_debug(argv)
    debug = debug_flag or debug_enabled()
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
        return EXIT_USAGE
    from anchorft.threads import apply_thread_policy

    apply_thread_policy()  # before torch starts: OpenMP wait policy and thread count (anchorft.threads)
    from anchorft import errors
    from anchorft.runs import mark_active

    errors._DEBUG_FLAG = debug
    _quiet_dataset_maps()
    try:
        module = importlib.import_module(COMMANDS[name][0])
        rc = int(module.main(rest) or 0)
        if rc:
            mark_active("failed")
        return rc
    except KeyboardInterrupt:
        marked = mark_active("interrupted")
        where = f"; partial outputs in {', '.join(map(str, marked))} are marked incomplete" if marked else ""
        print(f"\n{_prog(name, rest)}: interrupted{where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except USER_ERRORS as e:
        mark_active("failed")
        return errors.report(_prog(name, rest), e)
    except BrokenPipeError:  # `anchorft X --help | head`: the reader left; say nothing more (Python's own advice)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except BaseException:
        mark_active("failed")
        raise
    finally:
        errors._DEBUG_FLAG = False


if __name__ == "__main__":
    sys.exit(main())
