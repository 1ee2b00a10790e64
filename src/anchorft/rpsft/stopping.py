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

__all__ = ["StopOnSignal", "add_stop_callback"]


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


def add_stop_callback(trainer) -> None:
    """Add `StopOnSignal` to `trainer` (a transformers Trainer) after its own callbacks, so that its request to
    save and stop is the last word at a step's end."""
    trainer.add_callback(StopOnSignal())
