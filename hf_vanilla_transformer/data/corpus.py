"""Parallel corpora as `datasets.DatasetDict`s in the transformers translation format, `{"translation": {lang: text}}`,
memory-mapped from Arrow files, and their token ids.

Every step is cached by `datasets` or beside its cache (the files read, the token ids, the length limits applied), so
a second run with the same corpus and settings starts without reading or tokenizing the text again, and nothing
proportional to the corpus is held in Python objects: texts and ids stay in Arrow, lengths are numpy arrays.
"""

import functools
import logging as std_logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, load_dataset
from datasets.exceptions import DatasetGenerationError, DatasetNotFoundError
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging

from ..errors import InputError, one_line
from .folders import HUB_LOOKUP_SECONDS, connection_error
from .formats import blank_mask, json_problem, read_files, resolve_files, row_location, text_lines


logger = logging.get_logger(__name__)

# Package data: the corpus with its README and the original notice (SOURCE_ABOUT.txt), which carry the CC BY notice.
BUNDLED_CORPUS = Path(__file__).with_name("tatoeba-de-en")
BUNDLED_NAME = "Tatoeba German-English, manythings.org selection (bundled with hf_vanilla_transformer)"
BUNDLED_ATTRIBUTION = (
    "German-English sentence pairs from the Tatoeba Project (https://tatoeba.org), (c) Tatoeba contributors, licensed "
    "under CC BY 2.0 FR (https://creativecommons.org/licenses/by/2.0/fr/); pair selection by manythings.org "
    "(https://www.manythings.org/anki/). Attribution: www.manythings.org/anki and tatoeba.org."
)
SPLITS = ("train", "validation", "test")
LONG_PAIRS = ("skip", "truncate", "error")
# Rows per batch of the cached maps, read and written: with datasets' 1,000-row record batches, opening a
# 4.5-million-pair file of token ids mapped 40% of its pages into the process (the kernel maps pages around each
# batch's header).
BATCH = 10_000


def load_parallel_corpus(
    source_lang: str = "de",
    target_lang: str = "en",
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    train_file: str | list[str] | None = None,
    validation_file: str | list[str] | None = None,
    test_file: str | list[str] | None = None,
    columns: list[str] | None = None,
    keep_empty_train_pairs: bool = False,
) -> DatasetDict:
    """Load a corpus with a `translation` column holding both languages.

    Sources, by precedence: a Hub dataset (`dataset_name`, e.g. "wmt14" with config "de-en"), local files, or the
    bundled Tatoeba German-English corpus. A local split is one file (JSON Lines in the translation format or with one
    key per language; TSV/CSV with a first line naming the languages, or `columns` naming them in order), two aligned
    plain-text files named by their prefix (`data/train` reads `data/train.de` and `data/train.en`, gzipped or not),
    or those two files. Every problem with the data (a missing file or column, files of different lengths, a line that
    is not UTF-8, an empty split, a pair without its source or target text) raises an [`InputError`] naming the file,
    the line and what was expected. With `keep_empty_train_pairs`, training pairs with an empty side are kept for
    [`clean_pairs`] to drop and count.
    """
    languages = (source_lang, target_lang)
    if dataset_name is not None:
        hub = _load_hub_dataset(dataset_name, dataset_config_name)
        corpus = {split: (data, f"dataset {dataset_name!r} [{split}]", None, None) for split, data in hub.items()}
    else:
        files = {"train": train_file, "validation": validation_file, "test": test_file}
        files = {split: spec for split, spec in files.items() if spec}
        if not files:
            files = {split: str(BUNDLED_CORPUS / f"{split}.jsonl") for split in SPLITS}
        corpus = {split: _load_local(spec, languages, columns, f"--{split}_file") for split, spec in files.items()}
    return DatasetDict(
        {
            split: as_translation(
                data, source_lang, target_lang, origin, locate, split != "train" or not keep_empty_train_pairs, blank
            )
            for split, (data, origin, locate, blank) in corpus.items()
        }
    )


def _load_hub_dataset(name: str, config: str | None) -> DatasetDict:
    """`load_dataset(name, config)`, the Hub looked up once first: datasets retries an unreachable Hub for half a
    minute, then raises a traceback. Failures to find or reach the dataset are one line naming the option."""
    from huggingface_hub import HfApi, is_offline_mode
    from huggingface_hub.errors import RepositoryNotFoundError

    if not (Path(name).exists() or is_offline_mode()):  # offline, datasets reads its cache
        try:
            HfApi().dataset_info(name, timeout=HUB_LOOKUP_SECONDS)
        except Exception as error:
            if isinstance(error, RepositoryNotFoundError):
                raise InputError(
                    f"--dataset_name {name}: no such dataset on the Hub (or one your login can read)."
                ) from None
            if not connection_error(error):
                raise
            raise InputError(
                f"--dataset_name {name}: the Hub cannot be reached ({type(error).__name__}: {one_line(error)}): give "
                "local files (--train_file, --validation_file, --test_file), or set HF_HUB_OFFLINE=1 to read the "
                "dataset from the datasets cache."
            ) from None
    try:
        return load_dataset(name, config)
    except ConnectionError as error:  # offline, and not in the datasets cache
        raise InputError(f"--dataset_name {name}: {error}; offline, only the datasets cache is read.") from None
    except (DatasetNotFoundError, FileNotFoundError) as error:
        raise InputError(f"--dataset_name {name}: {one_line(error)}") from None
    except ValueError as error:  # e.g. a config name the dataset lacks, listed by datasets
        raise InputError(f"--dataset_name {name} --dataset_config_name {config}: {one_line(error)}") from None


def _load_local(spec, languages, columns, option):
    """(dataset, origin, locate(row, lang), first blank row by language or None when unknown) of a local split."""
    kind, paths = resolve_files(spec, languages, option)
    origin = " and ".join(map(str, paths))

    def locate(row: int, lang: str) -> str:
        return row_location(kind, paths, row, lang, languages, columns)

    if kind != "json":
        dataset, first_blank = read_files(kind, paths, languages, columns)
        return dataset, origin, locate, first_blank
    path = paths[0]
    if not any(line.strip() for _, line in text_lines(path)):
        raise InputError(f"{path} is empty: every split needs at least one sentence pair.")
    reader_log = std_logging.getLogger("datasets.packaged_modules.json.json")
    level = reader_log.level
    reader_log.setLevel(std_logging.CRITICAL)  # it logs a failure before raising: the error below says it in one line
    try:
        data = load_dataset("json", data_files=str(path), split="train")
    except (ValueError, pa.ArrowException, DatasetGenerationError) as error:  # they name neither the file nor the line
        cause = error
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        raise InputError(json_problem(path) or f"{path}: {cause}") from None
    finally:
        reader_log.setLevel(level)
    return data, origin, locate, None


def as_translation(
    dataset: Dataset,
    source_lang: str,
    target_lang: str,
    origin: str,
    locate: Callable[[int, str], str] | None = None,
    check_empty: bool = True,
    first_blank: dict[str, int | None] | None = None,
) -> Dataset:
    """`dataset` with one `translation` column, after checking that every row has both texts. `origin` names the
    files or the split, `locate(row, lang)` the file and line of a row (else rows are counted in the split);
    `first_blank` (the first empty row by language, as found while reading) spares reading every text again."""
    if len(dataset) == 0:
        raise InputError(f"{origin} is empty: every split needs at least one sentence pair.")
    nested = "translation" in dataset.column_names
    languages = set(dataset.features["translation"]) if nested else set(dataset.column_names)
    missing = [lang for lang in (source_lang, target_lang) if lang not in languages]
    if missing:
        where = "its `translation` entries have" if nested else "it has the columns"
        raise InputError(
            f"{origin}: language column(s) {missing} not found; {where} "
            f"{sorted(languages)}. Choose --source_lang/--target_lang among them."
        )
    if not nested:
        dataset = dataset.with_format("arrow").map(
            _translation_column,
            batched=True,
            batch_size=BATCH,
            writer_batch_size=BATCH,
            fn_kwargs={"languages": (source_lang, target_lang)},
            remove_columns=dataset.column_names,
            desc="pairing the language columns",
        )
        dataset = dataset.with_format(None)
    if check_empty:
        for lang in (source_lang, target_lang):
            if first_blank is not None:
                row = first_blank[lang]
            else:
                blank = blank_texts(dataset, lang)
                row = int(blank.argmax()) if blank.any() else None
            if row is not None:
                where = locate(row, lang) if locate else f"{origin}, row {row + 1:,}"
                raise InputError(f"{where}: the {lang!r} text is missing or empty.")
    return dataset


def _translation_column(batch: pa.Table, languages) -> pa.Table:
    texts = [pc.cast(batch.column(lang), pa.string()) for lang in languages]  # a number in JSON arrives as a number
    return pa.table({"translation": pc.make_struct(*texts, field_names=list(languages))})


def blank_texts(dataset: Dataset, lang: str) -> np.ndarray:
    """Whether each row's `lang` text is missing, empty or only white space, as one boolean array."""
    found = [
        blank_mask(pc.struct_field(batch.column("translation"), lang))
        for batch in dataset.with_format("arrow").iter(batch_size=1_000_000)
    ]
    return np.concatenate(found) if found else np.zeros(0, dtype=bool)


def tokenize_corpus(
    corpus: DatasetDict,
    tokenizer,
    source_lang: str,
    target_lang: str,
    limits: dict[str, int | None] | None = None,
    num_proc: int | None = None,
) -> DatasetDict:
    """Token ids for every split: `input_ids` and `labels` (whole: [`limit_lengths`] applies the length limits; the
    collator pads labels with -100) and `length` (source + target tokens), as int32.
    `limits` caps the size of a split; `num_proc` processes tokenize at once. The result is cached by `datasets`."""
    if type(tokenizer) is PreTrainedTokenizerFast:  # this package's BPE (or any plain tokenizer.json): encoded in
        backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())  # Rust, without transformers' per-call work
        backend.no_truncation()
        backend.no_padding()
        encoder = {"tokenizer_json": backend.to_str(), "tokenizer": None}
    else:  # any other tokenizer (a fine-tuned model's) through its own call, with its target-side settings
        encoder = {"tokenizer_json": None, "tokenizer": tokenizer}
    if num_proc and num_proc > 1:  # each process tokenizes on one thread (and tokenizers says nothing about forks)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenized = {}
    for split, dataset in corpus.items():
        limit = (limits or {}).get(split)
        if limit is not None and limit < len(dataset):
            dataset = dataset.select(range(limit))
        tokenized[split] = dataset.with_format("arrow").map(
            _encode_pairs,
            batched=True,
            batch_size=BATCH,
            writer_batch_size=BATCH,
            fn_kwargs={**encoder, "languages": (source_lang, target_lang)},
            remove_columns=dataset.column_names,
            num_proc=num_proc if num_proc and len(dataset) > num_proc * BATCH else None,
            desc=f"tokenizing {split}",
        )
        tokenized[split] = tokenized[split].with_format(None)
    return DatasetDict(tokenized)


@functools.lru_cache(maxsize=2)
def _backend(tokenizer_json: str) -> Tokenizer:
    return Tokenizer.from_str(tokenizer_json)


def _encode_pairs(batch: pa.Table, tokenizer_json, tokenizer, languages) -> pa.Table:
    pairs = batch.column("translation")
    ids = []
    for lang, target in zip(languages, (False, True)):
        texts = pc.struct_field(pairs, lang).to_pylist()
        if tokenizer_json is not None:
            encoded = [encoding.ids for encoding in _backend(tokenizer_json).encode_batch_fast(texts)]
        else:
            encoded = tokenizer(text_target=texts) if target else tokenizer(texts)
            encoded = encoded["input_ids"]
        ids.append(pa.array(encoded, pa.list_(pa.int32())))
    length = pc.add(pc.list_value_length(ids[0]), pc.list_value_length(ids[1]))
    return pa.table({"input_ids": ids[0], "labels": ids[1], "length": pc.cast(length, pa.int32())})


def pair_lengths(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The source and target token counts of every pair of a tokenized split, as two int32 arrays, read from the
    Arrow offsets (no row is decoded)."""
    found = ([], [])
    for batch in dataset.with_format("arrow").iter(batch_size=1_000_000):
        for lengths, column in zip(found, ("input_ids", "labels")):
            lengths.append(pc.list_value_length(batch.column(column)).to_numpy().astype(np.int32))
    return tuple(np.concatenate(lengths) if lengths else np.zeros(0, np.int32) for lengths in found)


def limit_lengths(
    dataset: Dataset,
    tokenizer,
    max_source_length: int,
    max_target_length: int,
    long_pairs: str = "skip",
    split: str = "train",
) -> tuple[Dataset, dict]:
    """Apply the length limits to a tokenized split: pairs with more source or target tokens are skipped, truncated
    (their last tokens, such as `</s>`, kept) or refused, as `long_pairs` says. Returns the split and the counts:
    `{"source_too_long", "target_too_long", "skipped" | "truncated"}`."""
    if long_pairs not in LONG_PAIRS:
        raise InputError(f"--long_pairs must be one of {LONG_PAIRS}, got {long_pairs!r}.")
    source, target = pair_lengths(dataset)
    over = (source > max_source_length, target > max_target_length)
    counts = {"source_too_long": int(over[0].sum()), "target_too_long": int(over[1].sum())}
    long = over[0] | over[1]
    if not long.any():
        return dataset, {**counts, "skipped" if long_pairs == "skip" else "truncated": 0}
    if long_pairs == "error":
        row = int(long.argmax())
        source_text = dataset[row]["input_ids"]  # the ids, decoded: the pair as the tokenizer sees it
        raise InputError(
            f"{split} pair {row + 1:,} ({tokenizer.decode(source_text, skip_special_tokens=True)[:60]!r}...) has "
            f"{source[row]} source and {target[row]} target tokens, more than --max_source_length {max_source_length} "
            f"or --max_target_length {max_target_length}; {int(long.sum()):,} pairs do. Pass --long_pairs skip to "
            "leave them out, or --long_pairs truncate to cut them."
        )
    limited = dataset.with_format("arrow").map(
        _limit_batch,
        batched=True,
        batch_size=BATCH,
        writer_batch_size=BATCH,
        fn_kwargs={
            "limits": (max_source_length, max_target_length),
            "long_pairs": long_pairs,
            "tail": _special_tail(tokenizer),
        },
        desc=f"{'skipping' if long_pairs == 'skip' else 'truncating'} long {split} pairs",
    )
    key = "skipped" if long_pairs == "skip" else "truncated"
    logger.warning(
        f"{split}: {int(long.sum()):,} of {len(dataset):,} pairs {key} ({counts['source_too_long']:,} with more than "
        f"{max_source_length} source tokens, {counts['target_too_long']:,} with more than {max_target_length} target "
        "tokens)."
    )
    return limited.with_format(None), {**counts, key: int(long.sum())}


def _special_tail(tokenizer) -> int:
    """How many special tokens the tokenizer appends after a text (1 for `</s>`): truncation keeps them."""
    plain = tokenizer("a b c", add_special_tokens=False)["input_ids"]
    full = tokenizer("a b c")["input_ids"]
    starts = [i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain]
    return len(full) - starts[0] - len(plain) if starts else 0


def _limit_batch(batch: pa.Table, limits, long_pairs, tail) -> pa.Table:
    lengths = [pc.list_value_length(batch.column(column)).to_numpy() for column in ("input_ids", "labels")]
    if long_pairs == "skip":
        return batch.filter(pa.array((lengths[0] <= limits[0]) & (lengths[1] <= limits[1])))
    ids = [
        _truncate(batch.column(column).combine_chunks(), limit, tail)
        for column, limit in zip(("input_ids", "labels"), limits)
    ]
    length = pc.cast(pc.add(pc.list_value_length(ids[0]), pc.list_value_length(ids[1])), pa.int32())
    return pa.table({"input_ids": ids[0], "labels": ids[1], "length": length})


def _truncate(lists: pa.ListArray, limit: int, tail: int) -> pa.ListArray:
    """Each list cut to `limit` items: its first `limit - tail` and its last `tail`."""
    lengths = pc.list_value_length(lists).to_numpy().astype(np.int64)
    if (lengths <= limit).all():
        return lists
    starts = lists.offsets.to_numpy()[:-1].astype(np.int64)
    kept = np.minimum(lengths, limit)
    row = np.repeat(np.arange(len(kept)), kept)
    position = np.arange(kept.sum()) - np.repeat(np.cumsum(kept) - kept, kept)  # 0.. within each kept list
    from_end = position >= kept[row] - tail  # the last `tail` kept positions take the list's last items
    position = np.where(from_end, lengths[row] - (kept[row] - position), position)
    values = lists.values.to_numpy()[starts[row] + position]
    offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, lists.type.value_type))


def default_num_proc(num_rows: int) -> int | None:
    """Processes for tokenizing `num_rows` pairs: one per CPU from 100,000 pairs on, else one (no start-up cost)."""
    return os.cpu_count() if num_rows >= 100_000 and (os.cpu_count() or 1) > 1 else None


__all__ = [
    "BUNDLED_ATTRIBUTION",
    "BUNDLED_CORPUS",
    "BUNDLED_NAME",
    "LONG_PAIRS",
    "as_translation",
    "blank_texts",
    "default_num_proc",
    "limit_lengths",
    "load_parallel_corpus",
    "pair_lengths",
    "tokenize_corpus",
]
