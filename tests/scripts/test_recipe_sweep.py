"""The developer tools of the recipe's choice: a candidate scored on the validation split with its averages, and the
cost of the moving average, at tiny sizes (no timings asserted)."""

import json

from scripts import averaging_benchmark, recipe_sweep
from tests.helpers import PAIRS, TINY_MODEL, write_jsonl


def test_a_candidate_is_scored_on_validation_with_its_averages_and_never_reads_the_test_split(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(3) for de, en in PAIRS])
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS[:4])
    recipe = ["--train_file", train, "--validation_file", evaluation, "--test_file", evaluation, *TINY_MODEL]
    recipe += ["--max_steps", 6, "--eval_steps", 3, "--save_strategy", "no", "--per_device_train_batch_size", 8]
    argv = ["--name", "tiny", "--output_root", str(tmp_path / "sweep"), "--ema", "0.5", "--lawa", "2x2", "--"]
    assert recipe_sweep.main([*argv, *map(str, recipe)]) == 0
    record = json.loads((tmp_path / "sweep" / "tiny.json").read_text())
    assert sorted(record["validation"]) == ["ema 0.5", "final", "lawa 2x2"]
    assert sorted(map(int, record["curve"])) == [3, 6] and record["validation_pairs"] == 4
    state = json.loads((tmp_path / "sweep" / "tiny" / "trainer_state.json").read_text())
    assert not any(key.startswith("test_") for entry in state["log_history"] for key in entry)
    assert "Test set" not in capsys.readouterr().out


def test_the_averaging_benchmark_reports_the_update_as_a_share_of_the_step(tmp_path, capsys):
    assert averaging_benchmark.main(["--steps", "2", "--updates", "2", "--json", str(tmp_path / "cost.json")]) == 0
    figures = json.loads((tmp_path / "cost.json").read_text())
    assert figures["parameters"] > 7_000_000 and 0 < figures["update_share_of_step"]
