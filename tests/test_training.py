"""Data, tokenizer and the training recipe: from corpus files to a trained, reloadable translator."""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainingArguments,
    get_inverse_sqrt_schedule,
)

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.averaging import average_checkpoints, last_checkpoints
from hf_vanilla_transformer.data import load_parallel_corpus, tokenize_corpus
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.pipeline_translation import check_tokenizer_fits_model
from hf_vanilla_transformer.tokenization import train_shared_bpe_tokenizer
from hf_vanilla_transformer.training import TranslationTrainer, corpus_scores, noam_learning_rate

from .conftest import tiny_config


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_translation.py"
PAIRS = [
    ("Guten Morgen!", "Good morning!"),
    ("Ich bin müde.", "I am tired."),
    ("Wo ist Tom?", "Where is Tom?"),
    ("Das ist gut.", "That is good."),
    ("Ich liebe dich.", "I love you."),
    ("Es regnet.", "It is raining."),
    ("Danke schön.", "Thank you."),
    ("Komm her!", "Come here!"),
]
TINY_MODEL = [
    "--d_model",
    "32",
    "--ffn_dim",
    "64",
    "--attention_heads",
    "2",
    "--encoder_layers",
    "1",
    "--decoder_layers",
    "1",
    "--vocab_size",
    "120",
    "--max_train_minutes",
    "0",
    "--bf16",
    "False",
]


def write_jsonl(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for de, en in pairs:
            f.write(json.dumps({"translation": {"de": de, "en": en}}, ensure_ascii=False) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "pairs.jsonl", PAIRS)


@pytest.fixture(scope="module")
def tokenizer():
    corpus = load_parallel_corpus()  # the bundled Tatoeba corpus
    texts = (pair[lang] for pair in corpus["train"]["translation"][:3000] for lang in ("de", "en"))
    return train_shared_bpe_tokenizer(texts, vocab_size=500)


def run_training(*args):
    """Run scripts/train_translation.py in this process, as `python scripts/train_translation.py ARGS` would."""
    argv = sys.argv
    sys.argv = [str(SCRIPT), *map(str, args)]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        sys.argv = argv


# --- data ------------------------------------------------------------------------------------------------------------


def test_bundled_corpus_has_three_splits_and_its_license_notice():
    corpus = load_parallel_corpus()
    assert {split: len(ds) for split, ds in corpus.items()} == {"train": 30000, "validation": 1000, "test": 1000}
    assert set(corpus["test"][0]["translation"]) == {"de", "en"}
    folder = ROOT / "hf_vanilla_transformer" / "corpora" / "tatoeba-de-en"
    assert "CC BY 2.0 FR" in (folder / "README.md").read_text() and (folder / "SOURCE_ABOUT.txt").is_file()


def test_local_tsv_csv_and_flat_jsonl_files_load_in_either_direction(tmp_path):
    (tmp_path / "a.tsv").write_text('en\tde\n"Hi," he said.\t"Hallo", sagte er.\nYes.\tJa.\n', encoding="utf-8")
    (tmp_path / "b.csv").write_text("de,en\nJa.,Yes.\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"de": "Nein.", "en": "No."}\n', encoding="utf-8")
    corpus = load_parallel_corpus(
        "en",
        "de",
        train_file=str(tmp_path / "a.tsv"),
        validation_file=str(tmp_path / "b.csv"),
        test_file=str(tmp_path / "c.jsonl"),
    )
    assert corpus["train"][0]["translation"] == {"en": '"Hi," he said.', "de": '"Hallo", sagte er.'}
    assert corpus["validation"][0]["translation"]["de"] == "Ja."
    assert corpus["test"][0]["translation"]["en"] == "No."


def test_missing_language_empty_split_and_bad_files_are_clear_errors(tmp_path, pairs_file):
    with pytest.raises(ValueError, match=r"language column\(s\) \['fr'\] not found.*\['de', 'en'\]"):
        load_parallel_corpus("de", "fr", train_file=pairs_file)
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "header_only.csv").write_text("de,en\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        load_parallel_corpus(train_file=str(tmp_path / "header_only.csv"))
    with pytest.raises(ValueError, match=r"unsupported file type '\.txt'"):
        load_parallel_corpus(train_file=str(tmp_path / "x.txt"))
    with pytest.raises(InputError, match="not found: .*missing.jsonl"):
        load_parallel_corpus(train_file=str(tmp_path / "missing.jsonl"))


# --- tokenizer and preprocessing ---------------------------------------------------------------------------------------


def test_shared_bpe_tokenizer_round_trips_and_reloads_without_the_package(tokenizer, tmp_path):
    assert len(tokenizer) == 500
    assert [tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id] == [
        0,
        1,
        2,
        3,
    ]
    ids = tokenizer("Wo ist der Bahnhof?")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Wo ist der Bahnhof?"
    assert (
        tokenizer.decode(tokenizer("Where is the station?")["input_ids"], skip_special_tokens=True)
        == "Where is the station?"
    )
    tokenizer.save_pretrained(tmp_path)
    assert not any(p.suffix in {".py", ".bin", ".pkl"} for p in tmp_path.iterdir())
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded("Wo ist der Bahnhof?")["input_ids"] == ids


def test_tokenizer_model_mismatch_is_detected(tokenizer):
    check_tokenizer_fits_model(tokenizer, tiny_config(vocab_size=500))
    with pytest.raises(ValueError, match="500 tokens but the model's vocabulary has 99"):
        check_tokenizer_fits_model(tokenizer, tiny_config())
    with pytest.raises(ValueError, match="eos_token_id"):
        check_tokenizer_fits_model(tokenizer, tiny_config(vocab_size=500, eos_token_id=3))
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    args = Seq2SeqTrainingArguments(output_dir="unused", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="500 tokens but the model's vocabulary has 99"):
        TranslationTrainer(model=model, args=args, processing_class=tokenizer)


def test_preprocessing_truncates_and_the_collator_pads_labels_with_minus_100(tokenizer, pairs_file):
    corpus = load_parallel_corpus(train_file=pairs_file)
    data = tokenize_corpus(
        corpus, tokenizer, "de", "en", max_source_length=4, max_target_length=5, limits={"train": 6}
    )
    train = data["train"]
    assert len(train) == 6 and set(train.column_names) == {"input_ids", "attention_mask", "labels", "length"}
    assert max(len(ids) for ids in train["input_ids"]) <= 4 and max(len(ids) for ids in train["labels"]) <= 5
    assert all(labels[-1] == tokenizer.eos_token_id or len(labels) == 5 for labels in train["labels"])

    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=500))
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    batch = collator([{k: train[i][k] for k in ("input_ids", "attention_mask", "labels")} for i in range(6)])
    lengths = [len(labels) for labels in train["labels"]]
    for row, n in enumerate(lengths):
        assert (batch["labels"][row, n:] == -100).all() and (batch["labels"][row, :n] >= 0).all()
    assert torch.equal(batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(batch["labels"]))
    assert (batch["decoder_input_ids"][:, 0] == model.config.decoder_start_token_id).all()


# --- recipe pieces -----------------------------------------------------------------------------------------------------


def test_inverse_sqrt_schedule_with_the_noam_peak_is_the_papers_formula():
    d_model, warmup = 512, 4000
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=noam_learning_rate(d_model, warmup))
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup)
    for step in [1, 100, 3999, 4000, 4001, 20000, 100000]:
        while schedule.last_epoch < step:
            schedule.step()
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert schedule.get_last_lr()[0] == pytest.approx(paper, rel=1e-9), step


def test_corpus_scores_are_sacrebleus_bleu_and_chrf():
    import sacrebleu

    hyps, refs = ["The cat sat on the mat.", "Hello there"], ["The cat sat on a mat.", "Hello there!"]
    scores = corpus_scores(hyps, refs)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert corpus_scores(refs, refs)["bleu"] == pytest.approx(100.0)


# --- end to end ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_training_overfits_a_few_pairs_and_the_folder_is_ready_to_share(pairs_file, tmp_path):
    out = tmp_path / "run"
    run_training(
        "--output_dir",
        out,
        "--train_file",
        pairs_file,
        "--validation_file",
        pairs_file,
        "--test_file",
        pairs_file,
        *TINY_MODEL,
        "--d_model",
        64,
        "--ffn_dim",
        128,
        "--max_steps",
        300,
        "--per_device_train_batch_size",
        8,
        "--dropout",
        0,
        "--warmup_steps",
        20,
        "--learning_rate",
        3e-3,
        "--eval_steps",
        150,
        "--save_steps",
        150,
        "--logging_steps",
        10,
        "--translate",
        "Wo ist Tom?",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["bleu"] == pytest.approx(100.0) and metrics["test"]["num_samples"] == len(PAIRS)
    assert metrics["training"]["steps"] == 300 and metrics["training"]["label_smoothing"] == 0.1
    files = {p.name for p in out.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "training_curves.png",
        "modeling_vanilla_transformer.py",
        "configuration_vanilla_transformer.py",
    } <= files
    generation_config = json.loads((out / "generation_config.json").read_text())
    assert (generation_config["num_beams"], generation_config["length_penalty"]) == (4, 0.6)
    # No fixed length (evaluation must not leave transformers' max_length=20 there): limits follow the source.
    assert "max_length" not in generation_config and "max_new_tokens" not in generation_config

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    batch = tokenizer([de for de, _ in PAIRS], return_tensors="pt", padding=True)
    greedy = model.generate(**batch, num_beams=1, max_new_tokens=20)
    assert tokenizer.batch_decode(greedy, skip_special_tokens=True) == [en for _, en in PAIRS]


def logged_losses(run_dir):
    history = json.loads((Path(run_dir) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


@pytest.mark.slow
def test_interrupted_and_resumed_training_reproduces_the_uninterrupted_losses(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(6) for de, en in PAIRS])
    common = [
        "--train_file",
        data,
        *TINY_MODEL,
        "--per_device_train_batch_size",
        8,
        "--logging_steps",
        1,
        "--eval_strategy",
        "no",
        "--save_steps",
        4,
        "--learning_rate",
        3e-3,
        "--warmup_steps",
        3,
    ]
    run_training("--output_dir", tmp_path / "full", *common, "--max_steps", 10)
    run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 4)  # "interrupted" after checkpoint-4
    run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 10, "--resume_from_checkpoint", "last")
    full, resumed = logged_losses(tmp_path / "full"), logged_losses(tmp_path / "cut")
    assert sorted(full) == sorted(resumed) == list(range(1, 11))
    for step in range(5, 11):
        assert resumed[step] == pytest.approx(full[step], rel=1e-6), step


def test_training_refuses_to_overwrite_a_previous_run(tmp_path, pairs_file):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.safetensors").write_bytes(b"precious")
    with pytest.raises(SystemExit, match="not empty.*--overwrite_output_dir"):
        run_training("--output_dir", tmp_path / "old", "--train_file", pairs_file, *TINY_MODEL)
    with pytest.raises(SystemExit, match="No complete checkpoint"):
        run_training("--output_dir", tmp_path / "old", "--train_file", pairs_file, "--resume_from_checkpoint", "last")
    assert (tmp_path / "old" / "model.safetensors").read_bytes() == b"precious"


@pytest.mark.slow
def test_checkpoint_averaging_writes_a_loadable_model_with_the_mean_weights(tmp_path, pairs_file):
    run_training(
        "--output_dir",
        tmp_path / "run",
        "--train_file",
        pairs_file,
        *TINY_MODEL,
        "--max_steps",
        6,
        "--save_steps",
        2,
        "--eval_strategy",
        "no",
        "--per_device_train_batch_size",
        4,
    )
    checkpoints = last_checkpoints(tmp_path / "run", 3)
    assert [c.name for c in checkpoints] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    average_checkpoints(checkpoints, tmp_path / "avg")
    averaged = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    models = [AutoModelForSeq2SeqLM.from_pretrained(c) for c in checkpoints]
    for name, param in averaged.named_parameters():
        expected = sum(dict(m.named_parameters())[name] for m in models) / 3
        torch.testing.assert_close(param, expected, atol=1e-6, rtol=1e-6)
    assert AutoTokenizer.from_pretrained(tmp_path / "avg")("Ja.")["input_ids"]
    with pytest.raises(InputError, match="last 5 checkpoints but .* has 3"):
        last_checkpoints(tmp_path / "run", 5)


@pytest.mark.slow
def test_two_processes_train_and_evaluate_like_one_with_the_same_global_batch(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(4) for de, en in PAIRS])
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS[:7])  # 7 pairs: not divisible by 2 processes x batch 2
    common = [
        "--train_file",
        train,
        "--validation_file",
        evaluation,
        "--test_file",
        evaluation,
        *TINY_MODEL,
        "--dropout",
        0,
        "--max_steps",
        6,
        "--logging_steps",
        1,
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--per_device_eval_batch_size",
        2,
        "--train_sampling_strategy",
        "sequential",
        "--use_cpu",
        "--learning_rate",
        3e-3,
        "--warmup_steps",
        2,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    single = subprocess.run(
        list(
            map(
                str,
                [
                    sys.executable,
                    SCRIPT,
                    "--output_dir",
                    tmp_path / "one",
                    *common,
                    "--per_device_train_batch_size",
                    8,
                ],
            )
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    double = subprocess.run(
        list(
            map(
                str,
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node",
                    "2",
                    "--master_port",
                    "29533",
                    SCRIPT,
                    "--output_dir",
                    tmp_path / "two",
                    *common,
                    "--per_device_train_batch_size",
                    4,
                ],
            )
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    assert two["training"]["world_size"] == 2
    losses_one, losses_two = logged_losses(tmp_path / "one"), logged_losses(tmp_path / "two")
    assert sorted(losses_one) == sorted(losses_two) == list(range(1, 7))
    for step in losses_one:
        assert losses_two[step] == pytest.approx(losses_one[step], rel=1e-4), step
    assert one["test"]["num_samples"] == two["test"]["num_samples"] == 7  # every pair scored once
    assert two["test"]["bleu"] == pytest.approx(one["test"]["bleu"], abs=1e-6)


def test_collator_marks_target_padding_in_the_decoder_attention_mask(tokenizer):
    from hf_vanilla_transformer.training import TranslationDataCollator

    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=500))
    features = [{"input_ids": [5, 6, 2], "labels": [7, -100, 8, 2]}, {"input_ids": [9, 2], "labels": [10, 2]}]
    batch = TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100)(features)
    # an ignored label inside a target (-100 at position 1) stays a real decoder position; only added padding is 0
    assert batch["decoder_attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"][1].tolist() == [10, 2, -100, -100]
