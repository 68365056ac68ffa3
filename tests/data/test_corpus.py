"""Parallel corpora and the shared BPE tokenizer: files in, token ids out, every problem named."""

import pytest
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
)

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data.corpus import load_parallel_corpus, tokenize_corpus
from hf_vanilla_transformer.data.tokenizer import train_shared_bpe_tokenizer
from hf_vanilla_transformer.errors import InputError
from tests.helpers import PAIRS, ROOT, tiny_config, write_jsonl


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "pairs.jsonl", PAIRS)


@pytest.fixture(scope="module")
def tokenizer():
    corpus = load_parallel_corpus()  # the bundled Tatoeba corpus
    texts = (pair[lang] for pair in corpus["train"]["translation"][:3000] for lang in ("de", "en"))
    return train_shared_bpe_tokenizer(texts, vocab_size=500)


def test_bundled_corpus_has_three_splits_and_its_license_notice():
    corpus = load_parallel_corpus()
    assert {split: len(ds) for split, ds in corpus.items()} == {"train": 30000, "validation": 1000, "test": 1000}
    assert set(corpus["test"][0]["translation"]) == {"de", "en"}
    folder = ROOT / "hf_vanilla_transformer" / "data" / "tatoeba-de-en"
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
