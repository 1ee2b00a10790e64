"""The `anchorft` console script.

Each subcommand lives in its own module under `anchorft.commands` and exposes `main(argv) -> int`.
The command modules only parse arguments and call library functions: library code never parses
`sys.argv` (torchtune's rule). Modules are imported lazily so that `anchorft w2s ...` does not pay
for importing transformers.

One error path (anchorft.errors): bad input (a UsageError, ValueError or file error) is one line
`anchorft CMD: error: MESSAGE` on stderr and exit code 2; a flag argparse refuses is that line and a
`--help` hint (no usage dump). `--debug` anywhere on the command line, or ANCHORFT_DEBUG=1, prints the
traceback before it. Ctrl-C exits with 130, SIGTERM (what SLURM and Kubernetes send) with 143; both mark the
runs it had started "interrupted" in their run markers (anchorft.runs). The handler also records the signal
(anchorft.stop): one that library code swallowed still stops the run at the next safe point, at the latest when
the command returns.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable

from anchorft import __version__, errors, stop
from anchorft.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, CellLost, MissingExtra, debug_enabled
from anchorft.runs import mark_active
from anchorft.stop import Terminated
from anchorft.threads import apply_thread_policy, keep_torch_threads

__all__ = ["main", "console", "command", "Terminated", "COMMANDS"]

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "w2s": ("anchorft.commands.w2s", "weak-to-strong simulator: run, sweep, theory"),
    "train": ("anchorft.commands.train", "fine-tune with RPSFT or a baseline (TRL SFTTrainer)"),
    "toy": ("anchorft.commands.toy", "embedded testbed: pretrain the tiny model, compare methods"),
    "eval": ("anchorft.commands.eval", "evaluate a model on JSONL benchmarks; score responses; lm-eval bridge"),
    "rl": ("anchorft.commands.rl", "DAPO reinforcement learning from an SFT checkpoint"),
    "data": ("anchorft.commands.data", "prepare fine-tuning data (OpenR1-Math)"),
    "analyze": ("anchorft.commands.analyze", "geometry of forgetting: rotation, drift, Fisher overlap"),
    "configs": ("anchorft.commands.configs", "the shipped configs by name: list, path, copy"),
}
# bad input: one line and exit 2 (anything else is a bug and keeps its traceback)
USER_ERRORS = (
    ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
    MissingExtra,
)  # fmt: skip
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


class _StdoutLogsToStderr(logging.Filter):
    """Moves a logger's handlers that write to stdout over to stderr, the first time it logs anything."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        for h in self.logger.handlers:
            if type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.__stdout__):
                h.setStream(sys.stderr)
        return True


def _library_logs_to_stderr() -> None:
    """DeepSpeed logs to stdout (importing it, as transformers and accelerate do on the way, prints "Setting
    accelerator to CPU" on a machine without a GPU): a command's stdout is its result (a JSON line, a path, a
    summary that scripts read), so that logger writes to stderr instead. A filter on the logger, because DeepSpeed
    adds its stdout handler when it is imported, which may be never or late in a run; nothing is imported here.
    Called when this module is imported, so that the worker processes a command spawns (they import the console
    script, hence this module, but never run `main`) write to stderr too."""
    logger = logging.getLogger("DeepSpeed")
    if not any(isinstance(f, _StdoutLogsToStderr) for f in logger.filters):
        logger.addFilter(_StdoutLogsToStderr(logger))


_library_logs_to_stderr()


def _prog(name: str, rest: list[str]) -> str:
    sub = rest[0] if rest and not rest[0].startswith("-") else ""
    return f"anchorft {name} {sub}".rstrip()


def _unknown_command(name: str) -> str:
    """The one line for a first argument that is no command: the closest command (or option), else the list."""
    if name.startswith("-"):
        hint = errors.close_hint(name, ("--help", "--version", "--debug"))
        return f"unknown option {name!r}{hint or '; options: --help, --version, --debug'}"
    hint = errors.close_hint(name, COMMANDS) or f"; commands: {', '.join(COMMANDS)}"
    return f"unknown command {name!r}{hint} (`anchorft --help`)"


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


def _short_error(self: argparse.ArgumentParser, message: str):
    """argparse's error in one line, without the usage dump: the error (an invalid choice with the closest one),
    and where the options are."""
    m = _INVALID_CHOICE.search(message)
    if m is not None:
        choices = [c.strip().strip("'") for c in m["choices"].split(",")]
        hint = errors.close_hint(m["value"], choices) or f" (choose from {m['choices']})"
        message = f"{message[: m.start()]}invalid choice: {m['value']!r}{hint}"
    self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def command(name: str) -> Callable[[list[str]], int]:
    """`anchorft NAME ...` as a function of its arguments, run as the console script runs it (a user error reported
    in one line with exit code 2, signals, exit codes): for scripts and tests."""
    return lambda argv: main([name, *argv])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, debug_flag = _pop_debug(argv)
    debug = debug_flag or debug_enabled()
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"anchorft: error: {_unknown_command(name)}", file=sys.stderr)
        return EXIT_USAGE

    apply_thread_policy()  # before torch starts: OpenMP wait policy and thread count (anchorft.threads)

    errors._DEBUG_FLAG = debug
    _quiet_dataset_maps()
    restore_signals = stop.install()  # SIGTERM and Ctrl-C: recorded, and raised where the program is
    restore_threads = keep_torch_threads()  # a command's --threads does not outlive it in this process
    old_error, argparse.ArgumentParser.error = argparse.ArgumentParser.error, _short_error
    try:
        module = importlib.import_module(COMMANDS[name][0])
        rc = int(module.main(rest) or 0)
        stop.check()  # a signal swallowed on the way (library code's bare `except`) still stops the run
        if rc:
            mark_active("failed")
        elif (dist := stop.distributed()) is not None:
            # a rank of a launch that finished: its process group taken down here, not by the interpreter's exit,
            # where gloo's threads can still be running and abort the process (SIGABRT, "terminate called without
            # an active exception") after a run marked complete. Local to this rank: no collective, no barrier.
            dist.destroy_process_group()
        return rc
    except SystemExit as e:  # argparse: --help (0) or a refused flag (2, already reported)
        if stop.requested():
            return _stopped(name, rest, stop.interrupt_for(stop.requested()))
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
        if code:
            mark_active("failed")
        return code
    except KeyboardInterrupt as e:
        return _stopped(name, rest, e)
    except USER_ERRORS as e:
        if stop.requested():  # the signal's exception, swallowed and turned into an error on the way
            return _stopped(name, rest, stop.interrupt_for(stop.requested()))
        mark_active("failed")
        return errors.report(_prog(name, rest), e)
    except CellLost as e:  # a cluster lost cells with their workers: the others are recorded, the study resumes
        if stop.requested():
            return _stopped(name, rest, stop.interrupt_for(stop.requested()))
        mark_active("failed")
        errors.report(_prog(name, rest), e)
        return 1
    except BrokenPipeError:  # `anchorft X --help | head`: the reader left; say nothing more (Python's own advice)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except BaseException:
        if stop.requested():
            return _stopped(name, rest, stop.interrupt_for(stop.requested()))
        mark_active("failed")
        raise
    finally:
        errors._DEBUG_FLAG = False
        argparse.ArgumentParser.error = old_error
        restore_signals()
        restore_threads()
        stop.clear()


def console() -> int:
    """The `anchorft` console script (and `python -m anchorft`): `main`, with one rule for a SIGTERM that arrives
    once the command's status is decided. Until `main` returns, a SIGTERM stops the command (exit 143; a run
    already marked complete stays complete). After it, SIGTERM is ignored and the process exits with the command's
    status (0 for a finished run): there is nothing left to stop, and the default action would kill the process
    mid-exit with status -15 (143 in a shell) for a run marked complete. SIGTERM is set to ignored before `main`
    installs its handler, so that `main` puts back "ignored", not the default, when it returns: no window. Child
    processes that `main` starts inherit the default, not "ignored" (a handled signal is reset at exec)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return main()


def _stopped(name: str, rest: list[str], e: KeyboardInterrupt) -> int:
    """Ctrl-C or SIGTERM: the runs this process started marked interrupted (an --overwrite's old run put back), one
    line on stderr, exit 130 or 143."""
    terminated = isinstance(e, Terminated) or stop.requested() == signal.SIGTERM
    marked = mark_active("interrupted")
    where = f"; partial outputs in {', '.join(map(str, marked))} are marked incomplete" if marked else ""
    print(f"\n{_prog(name, rest)}: {'terminated' if terminated else 'interrupted'}{where}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(console())
