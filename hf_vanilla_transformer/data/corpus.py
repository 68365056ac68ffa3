"""Parallel corpora as `datasets.DatasetDict`s in the transformers translation format, `{"translation": {lang: text}}`."""

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from datasets import DatasetDict, load_dataset

from ..errors import InputError


# Package data: the corpus with its README and the original notice (SOURCE_ABOUT.txt), which carry the CC BY notice.
BUNDLED_CORPUS = Path(__file__).with_name("tatoeba-de-en")
BUNDLED_NAME = "Tatoeba German-English, manythings.org selection (bundled with hf_vanilla_transformer)"
BUNDLED_ATTRIBUTION = (
    "German-English sentence pairs from the Tatoeba Project (https://tatoeba.org), (c) Tatoeba contributors, licensed "
    "under CC BY 2.0 FR (https://creativecommons.org/licenses/by/2.0/fr/); pair selection by manythings.org "
    "(https://www.manythings.org/anki/). Attribution: www.manythings.org/anki and tatoeba.org."
)
_LOADERS = {".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv"}


def load_parallel_corpus(
    source_lang: str = "de",
    target_lang: str = "en",
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
) -> DatasetDict:
    """Load a corpus with a `translation` column holding both languages.

    Sources, by precedence: a Hub dataset (`dataset_name`, e.g. "wmt14" with config "de-en"), local files (JSON Lines
    in the translation format or with one column per language; TSV/CSV with a header naming the languages), or the
    bundled Tatoeba German-English corpus. Every problem with the data (a missing file or column, an empty split, a
    row without the source or target text) raises an [`InputError`] naming the file, the line and the field.
    """
    files = {}
    if dataset_name is not None:
        corpus = load_dataset(dataset_name, dataset_config_name)
        origin = f"dataset {dataset_name!r}"
    else:
        files = {"train": train_file, "validation": validation_file, "test": test_file}
        files = {split: path for split, path in files.items() if path is not None}
        origin = ", ".join(files.values()) if files else f"the bundled corpus {BUNDLED_CORPUS}"
        if not files:
            files = {split: str(BUNDLED_CORPUS / f"{split}.jsonl") for split in ("train", "validation", "test")}
        corpus = DatasetDict({split: _load_file(path) for split, path in files.items()})
    return DatasetDict(
        {
            split: _as_translation(dataset, source_lang, target_lang, files.get(split) or f"{origin} [{split}]")
            for split, dataset in corpus.items()
        }
    )


def _load_file(path: str):
    suffix = Path(path).suffix.lower()
    if suffix not in _LOADERS:
        raise InputError(f"{path}: unsupported file type {suffix!r}; use one of {sorted(_LOADERS)}.")
    if not Path(path).is_file():
        raise InputError(f"Corpus file not found: {path}")
    header_lines = 1 if _LOADERS[suffix] == "csv" else 0
    with open(path, encoding="utf-8") as f:
        if sum(1 for _, line in zip(range(header_lines + 1), (l for l in f if l.strip()))) <= header_lines:
            raise InputError(f"{path} is empty: every split needs at least one sentence pair.")
    kwargs = {"delimiter": "\t", "quoting": 3} if suffix == ".tsv" else {}  # quoting=3: a quote is plain text in TSV
    return load_dataset(_LOADERS[suffix], data_files=path, split="train", **kwargs)


def _as_translation(dataset, source_lang: str, target_lang: str, origin: str):
    """`dataset` with one `translation` column, after checking that every row has both texts; `origin` names the file
    (rows are then reported by line number) or the split."""
    if len(dataset) == 0:
        raise InputError(f"{origin} is empty: every split needs at least one sentence pair.")
    nested = "translation" in dataset.column_names
    languages = set(dataset.features["translation"]) if nested else set(dataset.column_names)
    missing = [lang for lang in (source_lang, target_lang) if lang not in languages]
    if missing:
        where = "its `translation` entries have" if nested else "it has the columns"
        raise InputError(
            f"{origin}: language column(s) {missing} not found; {where} {sorted(languages)}. "
            "Choose --source_lang/--target_lang among them."
        )
    for lang in (source_lang, target_lang):
        texts = dataset.data.column("translation" if nested else lang)
        if nested:
            texts = pc.struct_field(texts, lang)
        texts = pc.cast(texts, pa.large_string())  # a CSV column of numbers arrives as integers
        # A missing key, a JSON null or an empty CSV cell all arrive as null; blank text is no better.
        blank = pc.or_kleene(pc.is_null(texts), pc.equal(pc.utf8_trim_whitespace(texts), ""))
        if pc.any(blank).as_py():
            row = pc.index(blank, True).as_py()
            raise InputError(f"{_row_name(origin, row)}: the {lang!r} text is missing or empty.")
    if not nested:
        dataset = dataset.map(
            lambda row: {"translation": {source_lang: row[source_lang], target_lang: row[target_lang]}},
            remove_columns=dataset.column_names,
        )
    return dataset


def _row_name(origin: str, row: int) -> str:
    """Where row `row` (0-based) of a corpus is: a line of the file for local files, else a row of the split."""
    path = Path(origin)
    if path.suffix.lower() not in _LOADERS or not path.is_file():
        return f"{origin}, row {row + 1}"
    if _LOADERS[path.suffix.lower()] == "csv":
        return f"{path}, line {row + 2}"  # after the header, one line per row (quoted line breaks aside)
    with open(path, encoding="utf-8") as f:  # JSON Lines: blank lines hold no row
        lines = (number for number, line in enumerate(f, start=1) if line.strip())
        return f"{path}, line {next(itertools.islice(lines, row, None))}"


def tokenize_corpus(
    corpus: DatasetDict,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_source_length: int = 128,
    max_target_length: int = 128,
    limits: dict[str, int | None] | None = None,
    num_proc: int | None = None,
) -> DatasetDict:
    """Token ids for every split: `input_ids`, `attention_mask`, `labels` (unpadded: the collator pads labels with
    -100) and `length` (source + target tokens, for length-grouped batching). `limits` caps the size of a split."""

    def tokenize(batch):
        sources = [pair[source_lang] for pair in batch["translation"]]
        targets = [pair[target_lang] for pair in batch["translation"]]
        encoded = tokenizer(sources, truncation=True, max_length=max_source_length)
        encoded["labels"] = tokenizer(text_target=targets, truncation=True, max_length=max_target_length)["input_ids"]
        encoded["length"] = [len(s) + len(t) for s, t in zip(encoded["input_ids"], encoded["labels"])]
        return encoded

    tokenized = {}
    for split, dataset in corpus.items():
        limit = (limits or {}).get(split)
        if limit is not None:
            dataset = dataset.select(range(min(limit, len(dataset))))
        tokenized[split] = dataset.map(
            tokenize, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc=f"tokenizing {split}"
        )
    return DatasetDict(tokenized)
