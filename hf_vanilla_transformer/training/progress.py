"""The real number of steps and the time left, in the progress bar and the log; an optional wall-clock budget; a
stop on Ctrl-C or SIGTERM after a step, with its checkpoint."""

import contextlib
import signal
import time
from pathlib import Path

import torch
from transformers import ProgressCallback, TrainerCallback
from transformers.utils import logging

from ..errors import InputError
from .checkpoints import last_complete_checkpoint


logger = logging.get_logger(__name__)


# Schedules that do not depend on the number of training steps: a time budget leaves them as they are.
OPEN_ENDED_SCHEDULES = {"constant", "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau"}


class TrainingProgressCallback(TrainerCallback):
    """Logs the real total number of steps and the time left; with `max_train_minutes`, stops there.

    Under a time budget, the total is the number of steps the budget allows at the speed so far: the progress bar
    (`bar`, the trainer's [`ProgressCallback`]) is told, so that its total and remaining time are real rather than the
    epoch limit's. Training stops with a final checkpoint, after the same step in every process.

    A schedule that ends at the last step (linear, cosine, warmup_stable_decay...) is re-planned as the total is: its
    steps after the warm-up are stretched onto the steps that the budget allows, so that it reaches its end value when
    the time runs out, as Cramming keys its schedule to the clock. Every process follows the first one's plan.
    """

    def __init__(self, max_train_minutes: float = 0, bar: ProgressCallback | None = None):
        self.budget = max_train_minutes * 60
        self.bar = bar
        self.start = self.first_step = None
        self.planned_steps = None  # the step a time budget is expected to end at

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        self.start, self.first_step = time.monotonic(), state.global_step
        self.planned_steps = state.max_steps
        if self.budget and hasattr(lr_scheduler, "lr_lambdas"):
            if getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type) not in OPEN_ENDED_SCHEDULES:
                self.replan(lr_scheduler, args.get_warmup_steps(state.max_steps), state.max_steps)
        if state.is_world_process_zero:
            plan = f"for at most {self.budget / 60:g} minutes" if self.budget else f"{state.max_steps:,} steps"
            logger.info(f"Training {plan} from step {state.global_step:,}.")

    def replan(self, scheduler, warmup: int, planned_for: int) -> None:
        """Make `scheduler` (a `LambdaLR` planned for `planned_for` steps) follow `planned_steps` instead."""

        def stretched(schedule):
            def lr_lambda(step):
                if step <= warmup or self.planned_steps <= warmup:
                    return schedule(step)
                return schedule(warmup + (step - warmup) * (planned_for - warmup) / (self.planned_steps - warmup))

            return lr_lambda  # a function: the scheduler's state_dict does not try to save it

        scheduler.lr_lambdas = [stretched(schedule) for schedule in scheduler.lr_lambdas]

    def total_steps(self, state) -> int:
        """The step training will stop at: `max_steps`, or the last step that fits in the time budget."""
        if not self.budget or state.global_step == self.first_step:
            return state.max_steps
        done, elapsed = state.global_step - self.first_step, time.monotonic() - self.start
        return min(state.max_steps, max(state.global_step, self.first_step + int(done * self.budget / elapsed)))

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget:
            out_of_time = float(time.monotonic() - self.start >= self.budget)
            plan = torch.tensor([out_of_time, self.total_steps(state)], dtype=torch.float64, device=args.device)
            # Every process must stop after the same step, or DDP hangs, and follow the same schedule.
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.broadcast(plan, src=0)
            out_of_time, self.planned_steps = plan.tolist()
            if out_of_time:
                control.should_training_stop = control.should_save = True
            elif self.bar is not None and self.bar.training_bar is not None:
                self.bar.training_bar.total = int(self.planned_steps)
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


# Ctrl-C, and what schedulers, containers and `torchrun` send to stop a process.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignals(TrainerCallback):
    """Ctrl-C (SIGINT) or SIGTERM in a training command: within [`deferred`], training stops after the step in hand
    with a checkpoint (in every process after the same step, or DDP hangs), which `--resume_from_checkpoint last`
    continues; elsewhere, and at a second Ctrl-C while training, the signal raises `KeyboardInterrupt` at once.
    [`ending`] says in one sentence where the run stopped and how to continue it.

        stop = StopOnSignals()
        with stop.handling():
            try:
                ...
                trainer.add_callback(stop)
                with stop.deferred():
                    trainer.train()
                    save_model(trainer)
            except KeyboardInterrupt:
                ...
        if stop.signal: print(stop.ending()); return stop.exit_status

    `resumable=False`, for a command that does not resume: training stops after the step without a checkpoint.

    transformers' own `enable_jit_checkpoint` handles SIGTERM alone, a few seconds later, and in each process on
    its own.
    """

    def __init__(self, resumable: bool = True):
        self.resumable = resumable  # whether the command resumes from checkpoints
        self.signal = None  # the first signal received
        self.stopped_at = None  # the step whose checkpoint training stopped at
        self.output_dir = self.step = None  # known once training began
        self.trained = False
        self._deferring = self._training = False

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process that a signal ended (130 for Ctrl-C)."""
        return 128 + (self.signal or signal.SIGINT)

    @contextlib.contextmanager
    def handling(self):
        """SIGINT and SIGTERM handled as this callback says while the block runs; the former handlers after."""
        previous = {number: signal.signal(number, self._received) for number in STOP_SIGNALS}
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    @contextlib.contextmanager
    def deferred(self):
        """Signals stop training after a step, and wait for the rest of the block (saving the model) to end."""
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False

    def _received(self, number, frame):
        first = self.signal is None
        self.signal = self.signal or number
        if not self._deferring or (self._training and not first and number == signal.SIGINT):
            raise KeyboardInterrupt

    def on_train_begin(self, args, state, control, **kwargs):
        self._training, self.output_dir, self.step = True, Path(args.output_dir), state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        self._training, self.trained, self.step = False, self.stopped_at is None, state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        self.step = state.global_step
        stop = self.signal is not None
        if torch.distributed.is_available() and torch.distributed.is_initialized():  # one verdict for every process
            verdict = torch.tensor(float(stop), device=args.device)
            torch.distributed.all_reduce(verdict, op=torch.distributed.ReduceOp.MAX)
            stop = bool(verdict.item())
        if stop and state.global_step < state.max_steps:  # (the last step saves the finished model anyway)
            self.signal = self.signal or signal.SIGTERM  # a process that received nothing stops with the others
            self.stopped_at = state.global_step
            control.should_training_stop, control.should_save = True, self.resumable
            control.should_evaluate = False
        return control

    def ending(self) -> str:
        """Where the run stopped, and how to go on, in one sentence."""
        if self.output_dir is None:
            return "interrupted before training started; nothing was written."
        if self.stopped_at is not None and not self.resumable:
            return f"stopped at step {self.stopped_at:,}; this recipe does not resume: run it again to start over."
        if self.stopped_at is not None:
            return (
                f"stopped at step {self.stopped_at:,}, saved as {self.output_dir / f'checkpoint-{self.stopped_at}'}: "
                "run the same command with --resume_from_checkpoint last to continue."
            )
        if self.trained:
            return f"interrupted after training; the trained model is in {self.output_dir}, not scored."
        if not self.resumable:
            return f"interrupted at step {self.step:,}; this recipe does not resume: run it again to start over."
        try:
            checkpoint = last_complete_checkpoint(self.output_dir)
        except InputError:  # none complete
            return f"interrupted at step {self.step:,}, before any checkpoint: run the command again to start over."
        return (
            f"interrupted at step {self.step:,}: run the same command with --resume_from_checkpoint last to continue "
            f"from {checkpoint.name}."
        )
