"""The corpus files MT practitioners have, read into memory-mapped Arrow files with one `translation` column.

- Aligned plain text (Moses, OPUS, WMT): `PREFIX.SRC` and `PREFIX.TGT`, one sentence per line, gzipped or not. Lines
  end at "\\n" only, so a stray "\\r" or Unicode line separator inside a sentence cannot shift one side against the
  other.
- TSV and CSV: a first line naming the languages, or `columns` naming the columns in order for a file without one
  (manythings' `deu.txt`: `columns=["en", "de"]`; columns after the named ones, such as its attribution, are ignored).
- JSON Lines, read by `datasets`; a line it cannot read is found by reading the file again.

What is read is written once into the `datasets` cache, keyed by the files' paths, sizes and modification times, so a
second run maps the Arrow file instead of reading the text again. Every problem raises an [`InputError`] naming the
file, the line and what was expected.
"""

import csv
import gzip
import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset

from ..errors import InputError


TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".tsv": "tsv", ".csv": "csv", ".txt": "tsv"}
BATCH_LINES = 100_000
_VERSION = "2"  # part of every cache key: a change of how files are read invalidates what was read before


def corpus_cache(*parts: str) -> Path:
    """A folder of this package's inside the `datasets` cache (`HF_DATASETS_CACHE`)."""
    folder = Path(datasets.config.HF_DATASETS_CACHE, "hf_vanilla_transformer", *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _suffixes(path: Path) -> tuple[str, bool]:
    """The suffix that names the format or language of `path`, and whether it is gzipped."""
    gzipped = path.suffix.lower() == ".gz"
    return (path.with_suffix("").suffix if gzipped else path.suffix).lower(), gzipped


def resolve_files(spec: str | list[str], languages: tuple[str, str], option: str) -> tuple[str, list[Path]]:
    """(format, paths) of what `option` names: one table file, a prefix of two aligned files (`data/train` for
    `data/train.de` and `data/train.en`, or either of them), or the two aligned files themselves."""
    specs = [spec] if isinstance(spec, str | os.PathLike) else list(spec)
    if len(specs) == 2:
        paths = [Path(path) for path in specs]
        for path in paths:
            if not path.is_file():
                raise InputError(f"Corpus file not found: {path}")
        by_language = {_suffixes(path)[0]: path for path in paths}
        if set(by_language) == {f".{lang}" for lang in languages}:  # in either order
            paths = [by_language[f".{lang}"] for lang in languages]
        return "aligned", paths
    if len(specs) != 1:
        raise InputError(
            f"{option} takes one corpus file, a prefix of two aligned files, or the two files; got {specs}."
        )
    path = Path(specs[0])
    suffix, _ = _suffixes(path)
    if suffix in (f".{lang}" for lang in languages):  # one side named: read both
        prefix = path.with_suffix("") if path.suffix.lower() != ".gz" else path.with_suffix("").with_suffix("")
        return "aligned", _aligned_pair(prefix, languages, option)
    if path.is_file():
        if suffix not in TABLE_FORMATS:
            raise InputError(
                f"{path}: unsupported file type {suffix!r}. {option} reads JSON Lines (.jsonl), TSV (.tsv, or .txt "
                f"with tabs) and CSV (.csv) files, gzipped or not, or aligned plain-text files named by their prefix: "
                f"{option} data/train reads data/train.{languages[0]} and data/train.{languages[1]}."
            )
        return TABLE_FORMATS[suffix], [path]
    if suffix in TABLE_FORMATS:
        raise InputError(f"Corpus file not found: {path}")
    return "aligned", _aligned_pair(path, languages, option)


def _aligned_pair(prefix: Path, languages: tuple[str, str], option: str) -> list[Path]:
    paths = []
    for lang in languages:
        found = [Path(f"{prefix}.{lang}{gz}") for gz in ("", ".gz") if Path(f"{prefix}.{lang}{gz}").is_file()]
        if not found:
            raise InputError(
                f"Corpus file not found: {prefix}.{lang} (nor {prefix}.{lang}.gz). {option} {prefix} reads the "
                f"aligned files {prefix}.{languages[0]} and {prefix}.{languages[1]}; or name one JSON Lines, TSV or "
                "CSV file."
            )
        paths.append(found[0])
    return paths


def read_files(
    kind: str, paths: list[Path], languages: tuple[str, str], columns: list[str] | None
) -> tuple[Dataset, dict[str, int | None]]:
    """The pairs of aligned, TSV or CSV files as a memory-mapped `Dataset` with a `translation` column, read once and
    then taken from the cache, and the first row of each language whose text is empty (None: there is none), found
    while reading, so that later runs need not read every text to know."""
    stats = [(str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in paths]
    key = hashlib.sha256(repr((_VERSION, kind, stats, languages, columns)).encode()).hexdigest()[:20]
    target = corpus_cache("corpora") / f"{key}.arrow"
    found = target.with_suffix(".json")
    if not (target.is_file() and found.is_file()):
        batches = (
            _aligned_batches(paths, languages)
            if kind == "aligned"
            else _table_batches(kind, paths[0], languages, columns)
        )
        schema = pa.schema([("translation", pa.struct([(lang, pa.string()) for lang in languages]))])
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        first_blank, rows = dict.fromkeys(languages), 0
        try:
            with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
                for batch in batches:
                    for lang in (lang for lang in languages if first_blank[lang] is None):
                        blank = blank_mask(batch.column(0).field(lang))
                        first_blank[lang] = rows + int(blank.argmax()) if blank.any() else None
                    rows += batch.num_rows
                    writer.write_batch(batch)
            found.with_name(partial.name + ".json").write_text(json.dumps(first_blank))
            os.replace(found.with_name(partial.name + ".json"), found)
            os.replace(partial, target)  # whole or absent, also when several processes read at once
        finally:
            partial.unlink(missing_ok=True)
            found.with_name(partial.name + ".json").unlink(missing_ok=True)
    return Dataset.from_file(str(target)), json.loads(found.read_text())


def blank_mask(texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether each text is missing, empty or only white space, as a boolean array."""
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        texts = pc.cast(texts, pa.string())  # a number in JSON arrives as a number
    blank = pc.or_kleene(pc.or_kleene(pc.is_null(texts), pc.equal(texts, "")), pc.utf8_is_space(texts))
    return pc.fill_null(blank, True).to_numpy(zero_copy_only=False)


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")


def _batch(columns: dict[str, list[str]]) -> pa.RecordBatch:
    pairs = pa.StructArray.from_arrays([pa.array(texts, pa.string()) for texts in columns.values()], list(columns))
    return pa.RecordBatch.from_arrays([pairs], ["translation"])


def _aligned_batches(paths: list[Path], languages: tuple[str, str]) -> Iterator[pa.RecordBatch]:
    with _open(paths[0]) as source, _open(paths[1]) as target:
        done = 0
        while True:
            sides = [list(itertools.islice(file, BATCH_LINES)) for file in (source, target)]
            if len(sides[0]) != len(sides[1]):
                counts = [done + len(lines) + sum(1 for _ in file) for lines, file in zip(sides, (source, target))]
                raise InputError(
                    f"{paths[0]} has {counts[0]:,} lines but {paths[1]} has {counts[1]:,}: aligned files hold one "
                    "sentence pair per line number."
                )
            if not sides[0]:
                return
            yield _batch(
                {lang: _decode_lines(lines, path, done) for lang, lines, path in zip(languages, sides, paths)}
            )
            done += len(sides[0])


def _decode_lines(lines: list[bytes], path: Path, done: int) -> list[str]:
    """`lines` (lines `done + 1`... of `path`, with their "\\n") as text without line ends."""
    data = b"".join(lines)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = done + data.count(b"\n", 0, error.start) + 1
        raise InputError(
            f"{path}, line {line:,}: not UTF-8 text ({error.reason}); convert the file to UTF-8."
        ) from None
    texts = text.split("\n")
    if lines[-1].endswith(b"\n"):
        texts.pop()
    if done == 0 and texts[0].startswith("\ufeff"):  # a byte order mark (Windows editors write one)
        texts[0] = texts[0][1:]
    return [t[:-1] if t.endswith("\r") else t for t in texts] if "\r" in text else texts


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without its line end) of every line of `path`, a UTF-8 file, gzipped or not."""
    with _open(path) as file:
        for number, raw in enumerate(file, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"{path}, line {number:,}: not UTF-8 text ({error.reason}); convert the file to UTF-8."
                ) from None


def table_rows(kind: str, path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank row of a TSV (no quoting: a quote is text) or CSV file."""
    if kind == "tsv":
        for number, line in text_lines(path):
            if line.strip():
                yield number, line.split("\t")
        return
    lines = ((line + "\n") for _, line in text_lines(path))
    reader = csv.reader(lines, strict=True)
    try:
        for fields in reader:
            if any(field.strip() for field in fields):
                yield reader.line_num, fields
    except csv.Error as error:
        raise InputError(
            f"{path}, line {reader.line_num:,}: {error} (in CSV, a field holding commas, quotes or line breaks is "
            'quoted, and a quote inside it doubled: "say ""hi""").'
        ) from None


def _table_batches(kind: str, path: Path, languages: tuple[str, str], columns: list[str] | None):
    rows = table_rows(kind, path)
    first = next(rows, None)
    if first is None:
        raise InputError(f"{path} is empty: every split needs at least one sentence pair.")
    names, header = column_names(kind, path, first[1], languages, columns)
    missing = [lang for lang in languages if lang not in names]
    if missing:
        raise InputError(
            f"{path}: language column(s) {missing} not found; it has the columns {names}. Choose "
            "--source_lang/--target_lang among them."
        )
    positions = [names.index(lang) for lang in languages]
    separator = "tab-separated" if kind == "tsv" else "comma-separated"
    found = {lang: [] for lang in languages}
    for number, fields in itertools.chain([] if header else [first], rows):
        if len(fields) < len(names) or (columns is None and len(fields) > len(names)):
            raise InputError(
                f"{path}, line {number:,}: {len(fields)} {separator} field(s), but the "
                f"{'--columns option' if columns else 'header'} names {len(names)} ({', '.join(names)})."
                + ("" if columns else " With --columns naming the first columns, later ones are ignored.")
            )
        for lang, position in zip(languages, positions):
            found[lang].append(fields[position])
        if len(found[languages[0]]) == BATCH_LINES:
            yield _batch(found)
            found = {lang: [] for lang in languages}
    if found[languages[0]]:
        yield _batch(found)


def column_names(kind, path, first: list[str], languages, columns) -> tuple[list[str], bool]:
    """The names of a table's columns, and whether its first row is a header that names them."""
    if columns:
        return list(columns), first[: len(columns)] == list(columns)
    if any(lang in first for lang in languages):
        return first, True
    separator = "\t" if kind == "tsv" else ","
    example = "<TAB>".join(languages) if kind == "tsv" else ",".join(languages)
    raise InputError(
        f"{path} has no header naming the languages: its first line is {separator.join(first)!r}. "
        f"Add a first line naming the columns ({example!r}), or pass --columns naming them in order (manythings' "
        "deu.txt: --columns en de; later columns are ignored)."
    )


def row_location(kind: str, paths: list[Path], row: int, lang: str, languages, columns) -> str:
    """Where row `row` (0-based) of what `read_files` or `datasets` read from `paths` is, for `lang`'s text."""
    if kind == "aligned":
        return f"{paths[languages.index(lang)]}, line {row + 1:,}"
    path = paths[0]
    if kind == "json":  # blank lines hold no row
        lines = (number for number, line in text_lines(path) if line.strip())
        return f"{path}, line {next(itertools.islice(lines, row, None)):,}"
    rows = table_rows(kind, path)
    first = next(rows)
    data_rows = rows if column_names(kind, path, first[1], languages, columns)[1] else itertools.chain([first], rows)
    return f"{path}, line {next(itertools.islice(data_rows, row, None))[0]:,}"


def json_problem(path: Path) -> str | None:
    """The first line of a JSON Lines file that is not a JSON object, named with what is wrong, or None."""
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            return f"{path}, line {number:,}: not valid JSON ({error.msg} at character {error.pos + 1})."
        if not isinstance(row, dict):
            return f"{path}, line {number:,}: a JSON {type(row).__name__}, expected an object of texts by language."
    return None


__all__ = [
    "TABLE_FORMATS",
    "blank_mask",
    "corpus_cache",
    "json_problem",
    "read_files",
    "resolve_files",
    "row_location",
    "table_rows",
    "text_lines",
]
