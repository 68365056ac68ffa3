"""The real number of steps and the time left, in the progress bar and the log; an optional wall-clock budget."""

import time

import torch
from transformers import ProgressCallback, TrainerCallback
from transformers.utils import logging


logger = logging.get_logger(__name__)


class TrainingProgressCallback(TrainerCallback):
    """Logs the real total number of steps and the time left; with `max_train_minutes`, stops there.

    Under a time budget, the total is the number of steps the budget allows at the speed so far: the progress bar
    (`bar`, the trainer's [`ProgressCallback`]) is told, so that its total and remaining time are real rather than the
    epoch limit's. Training stops with a final checkpoint, after the same step in every process.
    """

    def __init__(self, max_train_minutes: float = 0, bar: ProgressCallback | None = None):
        self.budget = max_train_minutes * 60
        self.bar = bar
        self.start = self.first_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start, self.first_step = time.monotonic(), state.global_step
        if state.is_world_process_zero:
            plan = f"for at most {self.budget / 60:g} minutes" if self.budget else f"{state.max_steps:,} steps"
            logger.info(f"Training {plan} from step {state.global_step:,}.")

    def total_steps(self, state) -> int:
        """The step training will stop at: `max_steps`, or the last step that fits in the time budget."""
        if not self.budget or state.global_step == self.first_step:
            return state.max_steps
        done, elapsed = state.global_step - self.first_step, time.monotonic() - self.start
        return min(state.max_steps, max(state.global_step, self.first_step + int(done * self.budget / elapsed)))

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget:
            out_of_time = torch.tensor(float(time.monotonic() - self.start >= self.budget), device=args.device)
            # Every process must stop after the same step, or DDP hangs.
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.broadcast(out_of_time, src=0)
            if out_of_time.item():
                control.should_training_stop = control.should_save = True
            elif self.bar is not None and self.bar.training_bar is not None:
                self.bar.training_bar.total = self.total_steps(state)
                self.bar.training_bar.refresh()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.first_step is None:  # an evaluation before any training
            return
        done = state.global_step - self.first_step
        if state.is_world_process_zero and done > 0 and logs and "loss" in logs:
            total = self.total_steps(state)
            left = (time.monotonic() - self.start) / done * (total - state.global_step)
            logger.info(f"Step {state.global_step:,} of {total:,}, about {left / 60:.1f} min left.")
