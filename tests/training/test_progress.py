"""A stop on Ctrl-C or SIGTERM (`StopOnSignals`): while training, after the step in hand with a checkpoint to resume
from; elsewhere, and at a second Ctrl-C, at once; each ending in one sentence saying how to go on."""

import os
import signal
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from transformers import TrainerControl, TrainerState

from hf_vanilla_transformer.training.progress import StopOnSignals


def send(number: int) -> None:
    """`number` to this process; Python runs its handler before the next statement."""
    os.kill(os.getpid(), number)


def training(stop: StopOnSignals, tmp_path, step: int = 3, max_steps: int = 10):
    """`stop` told that training began in `tmp_path` and reached `step`: (arguments, state, control)."""
    args = SimpleNamespace(output_dir=str(tmp_path), device=torch.device("cpu"))
    state = TrainerState(global_step=step, max_steps=max_steps)
    stop.on_train_begin(args, state, TrainerControl())
    return args, state, TrainerControl()


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_training_stops_after_the_step_with_a_checkpoint(tmp_path, number):
    before = signal.getsignal(signal.SIGINT)  # Python's Ctrl-C, or ignored in a run started in the background
    stop = StopOnSignals()
    with stop.handling(), stop.deferred():
        args, state, control = training(stop, tmp_path)
        send(number)  # no KeyboardInterrupt: the step goes on
        control.should_evaluate = True  # an evaluation step: skipped, the stop saves at once
        stop.on_step_end(args, state, control)
    assert control.should_training_stop and control.should_save and not control.should_evaluate
    assert stop.exit_status == 128 + number
    assert stop.ending() == (
        f"stopped at step 3, saved as {tmp_path / 'checkpoint-3'}: run the same command with "
        "--resume_from_checkpoint last to continue."
    )
    assert signal.getsignal(signal.SIGINT) is before  # the handlers are given back


def test_a_second_ctrl_c_while_training_stops_at_once_and_points_to_the_last_complete_checkpoint(tmp_path):
    stop = StopOnSignals()
    with stop.handling(), stop.deferred():
        args, state, control = training(stop, tmp_path, step=7)
        send(signal.SIGTERM)
        send(signal.SIGTERM)  # torchrun sends SIGTERM after the terminal's Ctrl-C: still after the step
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)
    assert stop.exit_status == 128 + signal.SIGTERM
    assert stop.ending() == "interrupted at step 7, before any checkpoint: run the command again to start over."
    complete, half_written = tmp_path / "checkpoint-4", tmp_path / "checkpoint-5"
    for folder in (complete, half_written):
        folder.mkdir()
        save_file({"weight": torch.zeros(2)}, folder / "model.safetensors")
    (complete / "trainer_state.json").write_text("{}")  # written last: its absence marks a half-written checkpoint
    assert stop.ending() == (
        "interrupted at step 7: run the same command with --resume_from_checkpoint last to continue from checkpoint-4."
    )


def test_outside_training_a_signal_stops_at_once(tmp_path):
    stop = StopOnSignals()
    with stop.handling():
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGTERM)
    assert (stop.exit_status, stop.ending()) == (143, "interrupted before training started; nothing was written.")
    # At the last step training ends anyway, with the finished model saved; a signal there does not mark a stop.
    stop = StopOnSignals()
    with stop.handling(), stop.deferred():
        args, state, control = training(stop, tmp_path, step=10)
        send(signal.SIGINT)
        stop.on_step_end(args, state, control)
        stop.on_train_end(args, state, control)
    assert stop.stopped_at is None and not control.should_save
    assert stop.ending() == f"interrupted after training; the trained model is in {tmp_path}, not scored."


def test_a_command_that_does_not_resume_stops_without_a_checkpoint(tmp_path):
    stop = StopOnSignals(resumable=False)
    with stop.handling(), stop.deferred():
        args, state, control = training(stop, tmp_path)
        send(signal.SIGINT)
        stop.on_step_end(args, state, control)
    assert control.should_training_stop and not control.should_save
    assert stop.ending() == "stopped at step 3; this recipe does not resume: run it again to start over."
