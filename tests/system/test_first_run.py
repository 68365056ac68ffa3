"""What a new user meets on a first run: clear errors for their mistakes, no trap after a failed start, a demo that
gives the same model anywhere, and no alarming messages when nothing is wrong."""

import json
import logging
import textwrap
from types import SimpleNamespace

import pytest

from hf_vanilla_transformer.data.corpus import load_parallel_corpus
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.recipes import translation
from hf_vanilla_transformer.training.progress import TrainingProgressCallback
from hf_vanilla_transformer.training.trainer import TranslationTrainer
from tests.helpers import (
    PAIRS,
    TINY_MODEL,
    run_command,
    run_training,
    run_without_package,
    tiny_config,
    tiny_tokenizer,
    write_jsonl,
)


TINY_RUN = [*TINY_MODEL, "--per_device_train_batch_size", 4, "--logging_steps", 1]


NESTED = '{"translation": {"de": "Ja.", "en": "Yes."}}\n'


@pytest.mark.parametrize(
    "name, text, line, field",
    [
        ("nested.jsonl", NESTED + '\n{"translation": {"de": "Nein."}}\n', 3, "en"),  # blank lines hold no row
        ("null.jsonl", NESTED + '{"translation": null}\n', 2, "de"),
        ("flat.jsonl", '{"de": "Ja.", "en": "Yes."}\n{"de": "Nein.", "en": "  "}\n', 2, "en"),
        ("cells.csv", "de,en\nJa.,Yes.\nNein.,\n", 3, "en"),
        ("cells.tsv", "de\ten\nJa.\tYes.\n\tNo.\n", 3, "de"),
    ],
)
def test_a_row_without_its_source_or_target_text_is_named_by_file_line_and_field(tmp_path, name, text, line, field):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=rf"{path}, line {line}: the '{field}' text is missing or empty"):
        load_parallel_corpus("de", "en", train_file=str(path))


@pytest.mark.slow
def test_a_mistake_on_the_command_line_is_one_line_and_a_non_zero_exit(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = run_command("train", "translation", "--train_file", missing, "--output_dir", tmp_path, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"hf-vanilla-transformer train translation: error: Corpus file not found: {missing}"
    ]


def test_other_mistakes_exit_the_same_way(tmp_path):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    with pytest.raises(InputError, match=r"language column\(s\) \['fr'\] not found"):
        run_training("--train_file", pairs, "--target_lang", "fr", "--output_dir", tmp_path / "a", *TINY_RUN)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="--output_dir .* is not empty.*--overwrite.*--resume_from_checkpoint last"):
        run_training("--train_file", pairs, "--output_dir", tmp_path / "b", *TINY_RUN)
    with pytest.raises(InputError, match="--attention_heads must be a divisor of --d_model 32, got 5"):
        run_training("--train_file", pairs, "--output_dir", tmp_path / "c", *TINY_RUN, "--attention_heads", 5)


@pytest.mark.slow
def test_a_run_that_fails_before_its_first_checkpoint_can_simply_be_run_again(tmp_path, monkeypatch, capsys):
    # A training file alone (no validation split) used to fail after writing into the output folder.
    pairs = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    out = tmp_path / "run"
    command = ["--train_file", pairs, "--test_file", pairs, "--output_dir", out, *TINY_RUN, "--max_steps", 3]
    command += ["--save_steps", 2]

    def crash(*args, **kwargs):
        raise RuntimeError("killed before the first checkpoint")

    with monkeypatch.context() as patch:
        patch.setattr(TranslationTrainer, "train", crash)
        with pytest.raises(RuntimeError, match="killed"):  # a bug keeps its traceback
            run_training(*command)
    assert not out.exists() or not any(out.iterdir())
    run_training(*command)  # the same command again: not refused as "not empty"
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-2").is_dir()
    # Three steps cannot translate: the report says why rather than leaving blank translations unexplained.
    assert "undertrained model: it trained only 3 steps" in capsys.readouterr().out


@pytest.mark.slow
def test_resuming_does_not_report_the_tied_embeddings_as_missing(tmp_path):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    command = ["--train_file", pairs, "--output_dir", tmp_path / "run", *TINY_RUN, "--save_steps", 2]
    run_training(*command, "--max_steps", 2)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)  # transformers' logger does not propagate to pytest's
    try:
        run_training(*command, "--max_steps", 3, "--resume_from_checkpoint", "last")
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    messages = [record.getMessage() for record in records]
    assert not [message for message in messages if "missing keys" in message]


def test_the_demo_trains_a_fixed_number_of_steps_by_default():
    _, _, recipe_args, training_args = translation.parse_args([])
    assert training_args.max_steps == translation.DEMO_STEPS and recipe_args.max_train_minutes == 0
    assert training_args.seed == 42 and training_args.train_sampling_strategy == "group_by_length"
    assert (training_args.adam_beta1, training_args.adam_beta2, training_args.adam_epsilon) == (0.9, 0.98, 1e-9)


def test_under_a_time_budget_the_progress_bar_counts_to_the_steps_that_fit(monkeypatch):
    bar = SimpleNamespace(training_bar=SimpleNamespace(total=46900, refresh=lambda: None))
    callback = TrainingProgressCallback(max_train_minutes=10, bar=bar)
    clock = iter([0.0, 60.0, 60.0])
    monkeypatch.setattr("hf_vanilla_transformer.training.progress.time.monotonic", lambda: next(clock))
    state = SimpleNamespace(global_step=0, max_steps=46900, is_world_process_zero=True)
    args, control = SimpleNamespace(device="cpu"), SimpleNamespace(should_training_stop=False, should_save=False)
    callback.on_train_begin(args, state, control)
    state.global_step = 100  # 100 steps in the first minute: 1,000 fit in 10 minutes
    callback.on_step_end(args, state, control)
    assert bar.training_bar.total == 1000 and not control.should_training_stop
    assert TrainingProgressCallback().total_steps(state) == 46900  # no budget: the step limit


TOKENIZER_WITHOUT_THE_PACKAGE = textwrap.dedent(
    """
    from transformers import PreTrainedTokenizerFast
    tokenizer = PreTrainedTokenizerFast.from_pretrained(sys.argv[1])
    print(tokenizer("Wo ist der Bahnhof?")["input_ids"])
    print(any(name.startswith("transformers_modules") for name in sys.modules))
    """
)


@pytest.mark.slow
def test_the_saved_tokenizer_loads_without_the_package_remote_code_or_a_question(tmp_path):
    from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration

    tokenizer = tiny_tokenizer()
    VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
    result = run_without_package(TOKENIZER_WITHOUT_THE_PACKAGE, tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "custom code" not in result.stdout + result.stderr
    ids, remote_code_ran = result.stdout.strip().splitlines()[-2:]
    assert ids == str(tokenizer("Wo ist der Bahnhof?")["input_ids"]) and remote_code_ran == "False"
