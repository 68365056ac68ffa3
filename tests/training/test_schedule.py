"""The recipes' learning-rate schedule: it reaches its end at the last step, whatever ends the run (`--max_steps`,
`--num_train_epochs`, `--max_train_minutes`), and the paper's own schedule is one option away."""

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import SchedulerType, TrainerControl, TrainerState, get_scheduler

from hf_vanilla_transformer.training import progress
from hf_vanilla_transformer.training.schedule import COOLDOWN_FRACTION
from tests.helpers import PAIRS, TINY_MODEL, run_training, write_jsonl


@pytest.mark.parametrize("length", [["--max_steps", 20], ["--num_train_epochs", 4]], ids=["steps", "epochs"])
def test_the_recipe_warms_up_holds_and_cools_down_to_zero_at_the_last_step(tmp_path, length):
    train = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(5) for de, en in PAIRS])
    run_training(
        *("--output_dir", tmp_path / "run", "--train_file", train, *TINY_MODEL, *length),
        *("--per_device_train_batch_size", 8, "--logging_steps", 1, "--eval_strategy", "no", "--save_strategy", "no"),
        *("--learning_rate", 1e-3, "--warmup_steps", 4),
    )
    rates = {
        e["step"]: e["learning_rate"]
        for e in json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
        if "learning_rate" in e
    }
    steps = max(rates)
    assert steps == 20  # 40 pairs in batches of 8: 5 steps an epoch
    cooldown = round(COOLDOWN_FRACTION * steps)
    # each step's update: held at the peak after the warm-up, then 1 - sqrt of the cool-down's progress, which reaches
    # 0 after the last step
    assert rates[5] == rates[steps - cooldown + 1] == pytest.approx(1e-3)
    cooling = [rates[step] for step in range(steps - cooldown + 1, steps + 1)]
    assert all(later < earlier for earlier, later in zip(cooling, cooling[1:]))
    assert rates[steps] == pytest.approx(1e-3 * (1 - ((cooldown - 1) / cooldown) ** 0.5))
    report = json.loads((tmp_path / "run" / "metrics.json").read_text())["training"]
    assert report["lr_scheduler"] == "warmup_stable_decay"
    assert report["lr_scheduler_kwargs"] == {"decay_type": "1-sqrt", "num_decay_steps": cooldown}


def test_the_paper_preset_keeps_the_papers_schedule_and_averaging():
    from hf_vanilla_transformer.recipes.translation import parse_args

    for preset, last in (("base", 5), ("big", 20)):
        _, _, recipe, training = parse_args(["--paper_preset", preset, "--train_file", "x", "--output_dir", "y"])
        assert training.lr_scheduler_type == SchedulerType.INVERSE_SQRT
        assert (recipe.average_last, recipe.ema_decay) == (last, 0) and training.save_total_limit >= last
    _, _, recipe, training = parse_args([])  # the demo
    assert training.lr_scheduler_type == SchedulerType.WARMUP_STABLE_DECAY and recipe.ema_decay == 0


@pytest.mark.parametrize("speed_change", [0.5, 1.0, 2.0], ids=["slower", "as-planned", "faster"])
def test_under_a_time_budget_the_schedule_reaches_its_end_when_the_time_runs_out(monkeypatch, speed_change):
    """A linear schedule planned for the epochs' 1,000 steps, in a budget that holds far fewer: re-planned from the
    measured speed, it warms up as set and anneals to 0 at the step where the time runs out, whatever the speed."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=10, num_training_steps=1000)
    args = SimpleNamespace(
        lr_scheduler_type=SchedulerType.LINEAR, device=torch.device("cpu"), get_warmup_steps=lambda _: 10
    )
    state, control = TrainerState(global_step=0, max_steps=1000), TrainerControl()
    callback = progress.TrainingProgressCallback(max_train_minutes=1)  # 60 s: 200 steps at 0.3 s, before any change
    callback.on_train_begin(args, state, control, lr_scheduler=scheduler)
    rates = []
    while not control.should_training_stop:
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
        state.global_step += 1
        clock[0] += 0.3 if state.global_step <= 100 else 0.3 / speed_change  # the speed changes halfway
        callback.on_step_end(args, state, control)
    assert rates[9] == pytest.approx(1.0)  # the warm-up is the one set: 10 steps
    assert rates[-1] < 0.02 * max(rates)  # annealed by the last step
    assert all(later <= earlier + 1e-3 for earlier, later in zip(rates[10:], rates[11:]))
    assert state.global_step < 1000


def test_under_a_time_budget_the_papers_schedule_is_left_as_it_is():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler("inverse_sqrt", optimizer, num_warmup_steps=10)
    lambdas = list(scheduler.lr_lambdas)
    args = SimpleNamespace(lr_scheduler_type=SchedulerType.INVERSE_SQRT, get_warmup_steps=lambda _: 10)
    progress.TrainingProgressCallback(max_train_minutes=1).on_train_begin(
        args, TrainerState(max_steps=1000), TrainerControl(), lr_scheduler=scheduler
    )
    assert scheduler.lr_lambdas == lambdas  # it does not depend on the number of steps


@pytest.mark.parametrize("schedule", ["linear", "inverse_sqrt", "cosine"])
def test_another_schedule_takes_none_of_the_cooldowns_settings(tmp_path, schedule):
    train = write_jsonl(tmp_path / "train.jsonl", PAIRS)
    run_training(
        *("--output_dir", tmp_path / "run", "--train_file", train, *TINY_MODEL, "--max_steps", 3),
        *("--eval_strategy", "no", "--save_strategy", "no", "--lr_scheduler_type", schedule),
    )
    report = json.loads((tmp_path / "run" / "metrics.json").read_text())["training"]
    assert (report["lr_scheduler"], report["lr_scheduler_kwargs"]) == (schedule, {})
