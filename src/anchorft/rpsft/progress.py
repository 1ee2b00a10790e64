"""Trainer output a person reads: a progress bar and one short line per logging step; the full dicts go to the
run's log file (`OUTPUT_DIR/log.jsonl`, one JSON object per logging step, with `attempt` (1 for the first training
of the folder, one more for each resume) and `resumed_from` (the step the attempt started at), so that the steps an
interrupted attempt logged and the resumed attempt logged again can be told apart).

transformers' ProgressCallback writes every log dict as text (floats as quoted strings, every key); with two runs
on one terminal the lines carry no run name. `use_readable_progress(trainer)` swaps it (and PrinterCallback, used
when the bar is off) for `ReadableProgress`.
"""

from __future__ import annotations

import json
import math
import os

from transformers.trainer_callback import PrinterCallback, ProgressCallback

__all__ = ["ReadableProgress", "LOG_FILE", "short_line", "use_readable_progress"]

LOG_FILE = "log.jsonl"
# the keys of the short line, in order (at most these; the rest are in the log file)
SHORT_KEYS = ("loss", "eval_loss", "reward", "learning_rate", "grad_norm", "anchor/penalty", "anchor/drift_max")
_NAMES = {"learning_rate": "lr", "anchor/penalty": "penalty", "anchor/drift_max": "drift_max"}


def _num(v: float) -> str:
    if not isinstance(v, float) or v == 0 or not math.isfinite(v):  # ints, bools and non-numbers as they are
        return str(v)
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"


def short_line(name: str, step: int, max_steps: int, logs: dict) -> str:
    """`NAME step S/T  loss 1.23  lr 2.00e-05 ...` from a Trainer log dict."""
    parts = [f"{_NAMES.get(k, k)} {_num(logs[k])}" for k in SHORT_KEYS if k in logs]
    if not parts:  # an end-of-training summary (train_runtime, ...): its first few keys
        parts = [f"{k} {_num(v)}" for k, v in list(logs.items())[:3] if k != "total_flos"]
    total = f"/{max_steps}" if max_steps and max_steps > 0 else ""
    return f"{name} step {step}{total}  " + "  ".join(parts)


def _last_attempt(output_dir: str | None) -> int:
    """The highest `attempt` in OUTPUT_DIR/log.jsonl (0: no log yet, or one written before attempts were counted)."""
    path = os.path.join(output_dir or "", LOG_FILE)
    if not output_dir or not os.path.isfile(path):
        return 0
    last = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                last = max(last, int(json.loads(line).get("attempt", 0)))
            except (ValueError, TypeError, AttributeError):  # a torn line from a killed run
                continue
    return last


class ReadableProgress(ProgressCallback):
    """ProgressCallback's bar (unless `disable_tqdm`), a short line per log, the full log dict in log.jsonl."""

    def _name(self, args) -> str:
        run = getattr(args, "run_name", None)
        out = os.path.basename(os.path.normpath(args.output_dir or "")) if args.output_dir else ""
        return f"[{run if run and run != args.output_dir else out or 'run'}]"

    def on_train_begin(self, args, state, control, **kwargs):
        self._attempt = {"attempt": _last_attempt(args.output_dir) + 1, "resumed_from": state.global_step}
        if not args.disable_tqdm:
            super().on_train_begin(args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_step_end(args, state, control, **kwargs)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if not args.disable_tqdm:
            super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)

    def on_evaluate(self, args, state, control, **kwargs):
        if not args.disable_tqdm:
            super().on_evaluate(args, state, control, **kwargs)

    def on_predict(self, args, state, control, **kwargs):
        if not args.disable_tqdm:
            super().on_predict(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            with open(os.path.join(args.output_dir, LOG_FILE), "a", encoding="utf-8") as f:
                attempt = getattr(self, "_attempt", {})
                f.write(json.dumps({"step": state.global_step, **attempt, **logs}, default=str) + "\n")
        line = short_line(self._name(args), state.global_step, state.max_steps, logs)
        if self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line, flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)


def use_readable_progress(trainer) -> None:
    """Replace `trainer`'s ProgressCallback / PrinterCallback with ReadableProgress."""
    handler = getattr(trainer, "callback_handler", None)  # None: a trainer built without Trainer.__init__
    if handler is None:
        return
    popped = [handler.pop_callback(cb) for cb in (ProgressCallback, PrinterCallback)]  # both, whichever is there
    if any(cb is not None for cb in popped):
        trainer.add_callback(ReadableProgress())
