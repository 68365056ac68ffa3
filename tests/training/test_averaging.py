"""Weight averaging while training (`WeightAveragingCallback`, `--ema_decay`): the average's arithmetic, the model that
is saved and scored, checkpoints that resume to the same average."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.training.averaging import (
    AVERAGE_FILE,
    ExponentialAverage,
    WeightAveragingCallback,
    trained_parameters,
)
from tests.helpers import PAIRS, TINY_MODEL, interrupted_at, run_training, write_jsonl


def test_the_moving_average_counts_its_first_updates_fully_then_decays_at_its_rate():
    weight = torch.zeros(3)
    average = ExponentialAverage({"w": weight}, decay=0.9)
    expected = torch.zeros(3)
    for t in range(40):
        weight += 1.0
        decay = min(0.9, (1 + t) / (10 + t))
        expected = decay * expected + (1 - decay) * weight
        average.update([weight])
    assert torch.allclose(average.weights[0], expected) and average.updates == 40


@pytest.mark.parametrize("decay", [0, 1, -0.5, 1.5])
def test_a_decay_outside_0_and_1_is_refused_naming_the_option(decay):
    with pytest.raises(InputError, match=r"--ema_decay .*between 0 and 1"):
        WeightAveragingCallback(decay)


def test_tied_weights_are_averaged_once():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    assert list(trained_parameters(model)) == ["0.weight"]


def _common(tmp_path, evaluation: str) -> list:
    train = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(6) for de, en in PAIRS])
    return [
        *("--train_file", train, "--validation_file", evaluation, *TINY_MODEL),
        *("--per_device_train_batch_size", 8, "--logging_steps", 1, "--save_steps", 4, "--eval_steps", 5),
        *("--learning_rate", 3e-3, "--warmup_steps", 3, "--ema_decay", 0.8, "--dropout", 0),
    ]


def test_the_saved_model_is_the_average_it_was_scored_as_and_a_resumed_run_ends_with_the_same_one(tmp_path):
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS)
    common = _common(tmp_path, evaluation)
    run_training("--output_dir", tmp_path / "full", *common, "--max_steps", 10)
    with interrupted_at(6):  # after checkpoint-4, stopped at step 6 with its own checkpoint
        run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 10)
    run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 10, "--resume_from_checkpoint", "last")

    full, resumed = (load_file(tmp_path / run / "model.safetensors") for run in ("full", "cut"))
    assert full.keys() == resumed.keys()
    for name in full:
        assert torch.allclose(full[name], resumed[name], atol=1e-6), name
    # the checkpoint keeps the trained weights, for the optimizer to continue, and the average beside them
    checkpoint = tmp_path / "full" / "checkpoint-10"
    trained, average = load_file(checkpoint / "model.safetensors"), load_file(checkpoint / AVERAGE_FILE)
    assert all(torch.equal(average[name], full[name]) for name in average)
    assert any(not torch.equal(trained[name], full[name]) for name in average)
    report = json.loads((tmp_path / "full" / "metrics.json").read_text())["training"]
    assert report["ema_decay"] == 0.8 and report["lr_scheduler"] == "warmup_stable_decay"

    assert_last_evaluation_scored_the_saved_model(tmp_path / "full", step=10)


def assert_last_evaluation_scored_the_saved_model(run_dir, step: int):
    """The evaluation at `step` has the loss of the saved model on the validation pairs (`PAIRS`, in one batch)."""
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    logged = next(entry["eval_loss"] for entry in history if entry.get("step") == step and "eval_loss" in entry)
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    batch = tokenizer([de for de, _ in PAIRS], text_target=[en for _, en in PAIRS], return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
    with torch.no_grad():
        assert model(**batch).loss.item() == pytest.approx(logged, rel=1e-5)


def test_an_evaluation_at_the_end_of_an_epoch_scores_the_average_too(tmp_path):
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS)
    common = _common(tmp_path, evaluation)  # 48 pairs in batches of 8: 6 steps an epoch
    run_training("--output_dir", tmp_path / "run", *common, "--num_train_epochs", 2, "--eval_strategy", "epoch")
    assert_last_evaluation_scored_the_saved_model(tmp_path / "run", step=12)


def test_resuming_from_a_checkpoint_without_its_average_is_refused_naming_the_file(tmp_path):
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS)
    common = _common(tmp_path, evaluation)
    with interrupted_at(4):
        run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 8)
    (tmp_path / "cut" / "checkpoint-4" / AVERAGE_FILE).unlink()
    with pytest.raises(InputError, match=rf"checkpoint-4/{AVERAGE_FILE} is missing"):
        run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 8, "--resume_from_checkpoint", "last")


def test_averaging_checkpoints_and_the_moving_average_are_one_choice(tmp_path):
    with pytest.raises(InputError, match="--ema_decay 0.9 and --average_last 3: choose one"):
        run_training("--output_dir", tmp_path / "run", "--ema_decay", 0.9, "--average_last", 3)
