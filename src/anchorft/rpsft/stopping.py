"""Training stops at a step's end on SIGTERM or Ctrl-C, with a checkpoint, on every rank at the same step.

`anchorft.stop` records the signal. A single process also raises it where it lands; when library code swallows
that (a bare `except:`), or in a group of processes, where the handler only records, `StopOnSignal` finds the
record at the end of each optimiser step: the ranks agree on it (one MAX all-reduce of the recorded signal on the
trainer's device), then every rank asks the trainer to save a checkpoint (unless the run saves none,
`save_strategy: no`) and to stop. `trainer.train()` then returns normally, and the caller's `anchorft.stop.check()`
raises the signal, so that the run is marked interrupted and resumes from that checkpoint.
"""

from __future__ import annotations

from transformers import TrainerCallback

from anchorft import stop

__all__ = ["StopOnSignal", "add_stop_callback", "CountsAcrossResume", "whole_run_loss"]


class StopOnSignal(TrainerCallback):
    """At each step's end: the signal recorded on any rank (`anchorft.stop.agreed`) stops every rank there, after
    a checkpoint. Also a safe point between evaluation batches in a single process (in a group, evaluation runs
    to its end: the ranks agree at the next step's end)."""

    def on_step_end(self, args, state, control, **kwargs):
        if stop.agreed(args.device):  # a collective in a group: every rank passes here at every step
            control.should_training_stop = True
            if args.save_strategy != "no":
                control.should_save = True
        return control

    def on_prediction_step(self, args, state, control, **kwargs):
        stop.check_alone()
        return control


class CountsAcrossResume(TrainerCallback):
    """A resumed run's token count goes on from the checkpoint's: TRL's SFTTrainer counts `num_tokens` from 0 in
    each `train()` call (its count is not in the checkpoint), so after a stop and a resume the logged count would
    cover the resumed part only. At the start of training (the checkpoint's state is loaded by then) the count is
    set to the last one logged before the checkpoint."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        logged = [h["num_tokens"] for h in state.log_history if "num_tokens" in h]
        if logged and hasattr(self.trainer, "_total_train_tokens"):
            self.trainer._total_train_tokens = int(logged[-1])
        return control


def whole_run_loss(log_history: list[dict]) -> tuple[float | None, int]:
    """The training loss of the whole run (before and after any resume) from the logged losses, each weighted by
    the steps it covers (a log's "loss" is the mean over the steps since the previous log); and the number of
    steps covered. transformers' own `train_loss` covers the steps of the last `train()` call only."""
    total, covered, last = 0.0, 0, 0
    for h in log_history:
        if "loss" in h and "step" in h:
            n = int(h["step"]) - last
            if n > 0:
                total, covered, last = total + float(h["loss"]) * n, covered + n, int(h["step"])
    return (total / covered if covered else None), covered


def add_stop_callback(trainer) -> None:
    """Add `StopOnSignal` to `trainer` (a transformers Trainer) after its own callbacks, so that its request to
    save and stop is the last word at a step's end."""
    trainer.add_callback(StopOnSignal())
    trainer.add_callback(CountsAcrossResume(trainer))
