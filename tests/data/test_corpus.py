"""Parallel corpora and the shared BPE tokenizer: the formats MT corpora come in, every problem named by file and line,
token ids and length limits counted, cleaning counted, and each step cached for the next run."""

import gzip

import datasets
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForSeq2Seq

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data import formats
from hf_vanilla_transformer.data import tokenizer as tokenizer_module
from hf_vanilla_transformer.data.cleaning import CleaningRules, clean_pairs
from hf_vanilla_transformer.data.corpus import limit_lengths, load_parallel_corpus, pair_lengths, tokenize_corpus
from hf_vanilla_transformer.data.tokenizer import corpus_tokenizer, train_shared_bpe_tokenizer
from hf_vanilla_transformer.errors import InputError
from tests.helpers import PAIRS, ROOT, tiny_config, write_jsonl


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A `datasets` cache of each test's own: what one test read is not another's cache hit."""
    folder = tmp_path / "hf_datasets_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", folder)
    return folder


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "pairs.jsonl", PAIRS)


@pytest.fixture(scope="module")
def tokenizer():
    corpus = load_parallel_corpus()  # the bundled Tatoeba corpus
    texts = (pair[lang] for pair in corpus["train"]["translation"][:3000] for lang in ("de", "en"))
    return train_shared_bpe_tokenizer(texts, vocab_size=500)


def write_aligned(folder, name, pairs, gzipped=False):
    for lang, side in (("de", 0), ("en", 1)):
        text = "".join(pair[side] + "\n" for pair in pairs).encode("utf-8")
        path = folder / f"{name}.{lang}{'.gz' if gzipped else ''}"
        path.write_bytes(gzip.compress(text) if gzipped else text)
    return str(folder / name)


def test_bundled_corpus_has_three_splits_and_its_license_notice():
    corpus = load_parallel_corpus()
    assert {split: len(ds) for split, ds in corpus.items()} == {"train": 30000, "validation": 1000, "test": 1000}
    assert set(corpus["test"][0]["translation"]) == {"de", "en"}
    folder = ROOT / "hf_vanilla_transformer" / "data" / "tatoeba-de-en"
    assert "CC BY 2.0 FR" in (folder / "README.md").read_text() and (folder / "SOURCE_ABOUT.txt").is_file()


def test_local_tsv_csv_and_flat_jsonl_files_load_in_either_direction(tmp_path):
    (tmp_path / "a.tsv").write_text('en\tde\n"Hi," he said.\t"Hallo", sagte er.\nYes.\tJa.\n', encoding="utf-8")
    (tmp_path / "b.csv").write_text('de,en\nJa.,Yes.\n"Eins, zwei.","One,\ntwo."\n', encoding="utf-8-sig")  # BOM
    (tmp_path / "c.jsonl").write_text('{"de": "Nein.", "en": "No."}\n', encoding="utf-8")
    corpus = load_parallel_corpus(
        "en",
        "de",
        train_file=str(tmp_path / "a.tsv"),
        validation_file=str(tmp_path / "b.csv"),
        test_file=str(tmp_path / "c.jsonl"),
    )
    assert corpus["train"][0]["translation"] == {"en": '"Hi," he said.', "de": '"Hallo", sagte er.'}
    assert corpus["validation"]["translation"] == [
        {"en": "Yes.", "de": "Ja."},
        {"en": "One,\ntwo.", "de": "Eins, zwei."},
    ]
    assert corpus["test"][0]["translation"]["en"] == "No."


def test_aligned_plain_text_files_by_prefix_by_one_side_or_both_gzipped_or_not(tmp_path):
    # A stray \r and a Unicode line separator stay inside their sentence: only \n ends a line.
    pairs = [("Ja\r.", "Yes."), ("Guten\u2028Morgen!", "Good morning!"), ("Nein.", "No.")]
    prefix = write_aligned(tmp_path, "train", pairs)
    zipped = write_aligned(tmp_path, "valid", pairs[:2], gzipped=True)
    (tmp_path / "crlf.de").write_bytes("\ufeffJa.\r\nNein.".encode())  # Windows: a BOM, \r\n, no final line end
    (tmp_path / "crlf.en").write_bytes(b"Yes.\r\nNo.\r\n")
    expected = [{"de": "Ja.", "en": "Yes."}, {"de": "Guten\u2028Morgen!", "en": "Good morning!"}]
    for train in (prefix, f"{prefix}.en", [f"{prefix}.en", f"{prefix}.de"]):
        corpus = load_parallel_corpus(train_file=train, validation_file=zipped, test_file=str(tmp_path / "crlf"))
        assert corpus["train"]["translation"][1:] == [*expected[1:], {"de": "Nein.", "en": "No."}]
        assert corpus["train"][0]["translation"]["de"] == "Ja\r."
        assert corpus["validation"]["translation"][1] == expected[1]
        assert corpus["test"]["translation"] == [expected[0], {"de": "Nein.", "en": "No."}]
    assert load_parallel_corpus("en", "de", train_file=prefix)["train"][2]["translation"] == {
        "en": "No.",
        "de": "Nein.",
    }


def test_a_headerless_tsv_is_read_with_columns_its_later_columns_ignored(tmp_path):
    deu = tmp_path / "deu.txt"  # manythings' format: English, German, attribution
    deu.write_text("Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\nHi.\tHallo!\tCC-BY\n")
    corpus = load_parallel_corpus("de", "en", train_file=str(deu), columns=["en", "de"])
    assert corpus["train"]["translation"] == [{"de": "Geh.", "en": "Go."}, {"de": "Hallo!", "en": "Hi."}]
    with pytest.raises(InputError, match=r"deu.txt has no header naming the languages: its first line is 'Go.\\tGeh."):
        load_parallel_corpus("de", "en", train_file=str(deu))


def test_a_second_load_maps_the_arrow_file_read_the_first_time(tmp_path, monkeypatch):
    prefix = write_aligned(tmp_path, "train", PAIRS)
    first = load_parallel_corpus(train_file=prefix)["train"]
    monkeypatch.setattr(formats, "_aligned_batches", None)  # reading the text again would fail
    second = load_parallel_corpus(train_file=prefix)["train"]
    assert second["translation"] == first["translation"] and second.cache_files == first.cache_files
    write_aligned(tmp_path, "train", PAIRS[:3])  # the files changed: read again
    with pytest.raises(TypeError):
        load_parallel_corpus(train_file=prefix)


def bad_files(folder):
    """(file(s) given, expected one-line error) for each problem a user's corpus can have."""
    (folder / "short.de").write_text("Ja.\nNein.\nVielleicht.\n")
    (folder / "short.en").write_text("Yes.\nNo.\n")
    (folder / "blank.de").write_text("Ja.\n\nNein.\n")
    (folder / "blank.en").write_text("Yes.\nMaybe.\nNo.\n")
    (folder / "latin1.de").write_bytes("Ja.\nGrüß Gott.\n".encode("latin-1"))
    (folder / "latin1.en").write_text("Yes.\nHello.\n")
    (folder / "broken.jsonl").write_text('{"de": "Ja.", "en": "Yes."}\n{"de": "Nein.", "en": \n')
    (folder / "list.jsonl").write_text('{"de": "Ja.", "en": "Yes."}\n["Nein.", "No."]\n')
    (folder / "latin1.tsv").write_bytes("de\ten\nJa.\tYes.\nGrüß.\tHi.\n".encode("latin-1"))
    (folder / "extra.tsv").write_text("de\ten\nJa.\tYes.\nNein.\tNo.\tCC-BY\n")
    (folder / "missing.tsv").write_text("de\ten\nJa.\tYes.\nNein.\n")
    (folder / "other.tsv").write_text("de\tfr\nJa.\tOui.\n")
    (folder / "quote.csv").write_text('de,en\n"Ja.,Yes.\n')
    (folder / "notes.xyz").write_text("de\ten\n")
    return [
        ("short", r"short.de has 3 lines but .*short.en has 2: aligned files hold one sentence pair per line number"),
        ("blank", r"blank.de, line 2: the 'de' text is missing or empty"),
        ("latin1", r"latin1.de, line 2: not UTF-8 text \(invalid .*\); convert the file to UTF-8"),
        ("broken.jsonl", r"broken.jsonl, line 2: not valid JSON \(Expecting value at character 23\)"),
        ("list.jsonl", r"list.jsonl, line 2: a JSON list, expected an object of texts by language"),
        ("latin1.tsv", r"latin1.tsv, line 3: not UTF-8 text"),
        ("extra.tsv", r"extra.tsv, line 3: 3 tab-separated field\(s\), but the header names 2 \(de, en\)"),
        ("missing.tsv", r"missing.tsv, line 3: 1 tab-separated field\(s\), but the header names 2"),
        ("other.tsv", r"other.tsv: language column\(s\) \['en'\] not found; it has the columns \['de', 'fr'\]"),
        ("quote.csv", r"quote.csv, line 2: unexpected end of data \(in CSV, a field holding"),
        ("notes.xyz", r"notes.xyz: unsupported file type '.xyz'. --train_file reads JSON Lines .* data/train.de and"),
        ("nowhere", r"Corpus file not found: .*nowhere.de \(nor .*nowhere.de.gz\). --train_file .*nowhere reads the"),
    ]


def test_every_problem_in_a_corpus_file_is_one_error_naming_the_file_and_line(tmp_path):
    for name, message in bad_files(tmp_path):
        with pytest.raises(InputError, match=message):
            load_parallel_corpus(train_file=str(tmp_path / name))


def test_missing_language_and_empty_splits_are_clear_errors(tmp_path, pairs_file):
    with pytest.raises(ValueError, match=r"language column\(s\) \['fr'\] not found.*\['de', 'en'\]"):
        load_parallel_corpus("de", "fr", train_file=pairs_file)
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    (tmp_path / "header_only.csv").write_text("de,en\n", encoding="utf-8")
    for name in ("empty.jsonl", "header_only.csv"):
        with pytest.raises(InputError, match=f"{name} is empty: every split needs at least one sentence pair"):
            load_parallel_corpus(train_file=str(tmp_path / name))
    with pytest.raises(InputError, match="not found: .*missing.jsonl"):
        load_parallel_corpus(train_file=str(tmp_path / "missing.jsonl"))


def test_cleaning_drops_pairs_by_rule_and_counts_each(tmp_path):
    pairs = [
        ("Ja.", "Yes."),
        ("  ", "Nothing."),  # empty source
        (" ".join(["Wort"] * 12), " ".join(["word"] * 12)),  # 12 words
        ("Ein Wort.", " ".join(["word"] * 10)),  # 2 against 10 words
        ("Ja.", "Yes."),  # a duplicate
        ("Ja.", "Yes!"),
    ]
    prefix = write_aligned(tmp_path, "train", pairs)
    with pytest.raises(InputError, match=r"train.de, line 2: the 'de' text is missing or empty"):
        load_parallel_corpus(train_file=prefix)
    train = load_parallel_corpus(train_file=prefix, keep_empty_train_pairs=True)["train"]
    rules = CleaningRules(empty=True, max_words=10, length_ratio=3, duplicates=True)
    cleaned, counts = clean_pairs(train, "de", "en", rules)
    assert counts == {"empty": 1, "max_words": 1, "length_ratio": 1, "duplicates": 1}
    assert cleaned["translation"] == [{"de": "Ja.", "en": "Yes."}, {"de": "Ja.", "en": "Yes!"}]
    assert clean_pairs(train, "de", "en", CleaningRules(max_words=11))[1] == {"max_words": 1}


def test_corpus_tokenizer_is_trained_once_per_corpus_and_settings(tmp_path, monkeypatch):
    train = load_parallel_corpus(train_file=write_aligned(tmp_path, "train", PAIRS * 3))["train"]
    first = corpus_tokenizer(train, ("de", "en"), vocab_size=120, model_max_length=64, min_frequency=1)
    texts = [pair[lang] for pair in train["translation"] for lang in ("de", "en")]
    assert first.get_vocab() == train_shared_bpe_tokenizer(texts, 120, 64, min_frequency=1).get_vocab()

    def trained_again(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(tokenizer_module, "train_shared_bpe_tokenizer", trained_again)
    again = corpus_tokenizer(train, ("de", "en"), vocab_size=120, model_max_length=64, min_frequency=1)
    assert again.get_vocab() == first.get_vocab() and again.model_max_length == 64
    with pytest.raises(AssertionError, match="trained again"):  # other settings: another tokenizer
        corpus_tokenizer(train, ("de", "en"), vocab_size=110, model_max_length=64, min_frequency=1)


def test_shared_bpe_tokenizer_round_trips_and_reloads_without_the_package(tokenizer, tmp_path):
    assert len(tokenizer) == 500
    special = [tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id]
    assert special == [0, 1, 2, 3]
    ids = tokenizer("Wo ist der Bahnhof?")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Wo ist der Bahnhof?"
    where = tokenizer("Where is the station?")["input_ids"]
    assert tokenizer.decode(where, skip_special_tokens=True) == "Where is the station?"
    tokenizer.save_pretrained(tmp_path)
    assert not any(p.suffix in {".py", ".bin", ".pkl"} for p in tmp_path.iterdir())
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded("Wo ist der Bahnhof?")["input_ids"] == ids


def test_token_ids_are_the_tokenizers_whole_and_cached(tokenizer, pairs_file):
    corpus = load_parallel_corpus(train_file=pairs_file)
    data = tokenize_corpus(corpus, tokenizer, "de", "en", limits={"train": 6})
    train = data["train"]
    assert len(train) == 6 and set(train.column_names) == {"input_ids", "labels", "length"}
    assert str(train.features["input_ids"].feature) == "Value('int32')"
    for row, (de, en) in zip(train, PAIRS):
        assert row["input_ids"] == tokenizer(de)["input_ids"] and row["labels"] == tokenizer(en)["input_ids"]
        assert row["length"] == len(row["input_ids"]) + len(row["labels"])
    source, target = pair_lengths(train)
    assert source.tolist() == [len(ids) for ids in train["input_ids"]] and target.dtype.name == "int32"
    again = tokenize_corpus(corpus, tokenizer, "de", "en", limits={"train": 6})["train"]
    assert again.cache_files == train.cache_files  # the second run maps the first run's ids


def test_long_pairs_are_skipped_truncated_or_refused_and_counted(tokenizer, pairs_file):
    train = tokenize_corpus(load_parallel_corpus(train_file=pairs_file), tokenizer, "de", "en")["train"]
    source, target = pair_lengths(train)
    limit = int(sorted(source)[4])  # some sources are longer
    over = int((source > limit).sum())
    skipped, counts = limit_lengths(train, tokenizer, limit, 64, "skip")
    assert counts == {"source_too_long": over, "target_too_long": 0, "skipped": over} and 0 < over < len(train)
    assert len(skipped) == len(train) - over and max(pair_lengths(skipped)[0]) <= limit
    truncated, counts = limit_lengths(train, tokenizer, limit, 64, "truncate")
    assert counts["truncated"] == over and len(truncated) == len(train)
    for whole, cut in zip(train["input_ids"], truncated["input_ids"]):  # as the tokenizer truncates: </s> kept
        assert cut == (whole if len(whole) <= limit else whole[: limit - 1] + [tokenizer.eos_token_id])
    assert truncated["labels"] == train["labels"]
    row = int((source > limit).argmax())
    with pytest.raises(InputError, match=rf"train pair {row + 1} \(.*\) has {source[row]} source and .* tokens, more"):
        limit_lengths(train, tokenizer, limit, 64, "error")
    assert limit_lengths(train, tokenizer, 64, 64, "error")[1] == {
        "source_too_long": 0,
        "target_too_long": 0,
        "truncated": 0,
    }


def test_the_collator_pads_labels_with_minus_100_and_makes_the_attention_mask(tokenizer, pairs_file):
    train = tokenize_corpus(load_parallel_corpus(train_file=pairs_file), tokenizer, "de", "en")["train"]
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=500))
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    batch = collator([{k: train[i][k] for k in ("input_ids", "labels")} for i in range(6)])
    lengths = [len(labels) for labels in train["labels"][:6]]
    for row, n in enumerate(lengths):
        assert (batch["labels"][row, n:] == -100).all() and (batch["labels"][row, :n] >= 0).all()
    assert torch.equal(batch["attention_mask"].bool(), batch["input_ids"] != tokenizer.pad_token_id)
    assert torch.equal(batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(batch["labels"]))
    assert (batch["decoder_input_ids"][:, 0] == model.config.decoder_start_token_id).all()


def test_a_large_corpus_trains_the_bpe_on_random_blocks_of_max_pairs(monkeypatch):
    train = load_parallel_corpus()["train"]  # 30,000 pairs: three blocks of 10,000
    seen = []

    def record(texts, *args, **kwargs):
        seen.append([text for batch in texts for text in batch])
        return train_shared_bpe_tokenizer(seen[-1][:200], 120, min_frequency=1)

    monkeypatch.setattr(tokenizer_module, "train_shared_bpe_tokenizer", record)
    corpus_tokenizer(train, ("de", "en"), vocab_size=120, max_pairs=10_000)
    corpus_tokenizer(train, ("de", "en"), vocab_size=120, max_pairs=10_000)  # cached
    (texts,) = seen
    pairs = train["translation"]
    block = next(start for start in (0, 10_000, 20_000) if pairs[start]["de"] in texts)
    assert sorted(texts) == sorted(p[lang] for p in pairs[block : block + 10_000] for lang in ("de", "en"))
    corpus_tokenizer(train, ("de", "en"), vocab_size=120)  # all pairs: another tokenizer
    assert len(seen) == 2 and len(seen[1]) == 60_000
