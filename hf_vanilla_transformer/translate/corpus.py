"""Corpus translation on Ray Data: actors that hold the model translate shards of Parquet, JSON Lines or text files
through the engine API (`Translator.translate`), so a sentence translates here as through `translate`.

    hf-vanilla-transformer translate-corpus --model outputs/demo-de-en --input corpus/ --output_dir translated/

Resume lives in the output folder. Each input file is cut into shards of rows (text and JSON Lines by lines, Parquet
by row groups) named after the file and their row range; an actor writes a shard's output to a temporary name and
renames it when complete, and a run skips the shards whose output exists. Ray restarts a dead actor and retries its
shard (its temporary file tells the retry). So every input row is in the output exactly once, whatever was killed.

Nothing reads a large input through before the translation: a task per file finds its shards as it reads (counting
lines) and hands each on at once, and the actors check the rows they read; a shard with bad rows is not written, and
its rows are reported. A small input (`CHECKED_UP_FRONT`) is read through and checked first, so that its mistakes end
the run before Ray starts.

In Python, `translate_dataset(dataset, model, engine, decoding)` adds the translations to any `ray.data.Dataset`.
"""

import dataclasses
import fnmatch
import functools
import hashlib
import json
import os
import posixpath
import time
from dataclasses import dataclass

import pyarrow as pa
from transformers.utils import logging

from ..cuda import cuda_environment
from ..errors import InputError, import_extra, one_line
from .io import differences
from .options import DEFAULT_SHARD_ROWS, DecodeOptions, EngineOptions
from .translator import load_translator, output_settings


logger = logging.get_logger(__name__)


FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}  # others: text
OUTPUT_FORMATS = ("parquet", "jsonl")
ADDED = ("translation", "score", "translation_length", "nbest", "missing_terms")
MANIFEST = "_translate_corpus.json"
# Inputs of at most this many bytes are read through and checked before anything is written (and Ray started); larger
# ones are checked where their rows are read, shard by shard.
CHECKED_UP_FRONT = 64 << 20
REPORTED_ROWS = 100  # bad rows of a shard reported, at most
# What a worker is handed (a shard, with its file's problem where it has one) and what it returns.
DESCRIPTOR = pa.schema(
    [
        ("path", pa.string()),
        *((name, pa.int64()) for name in ("start", "stop", "first", "last")),
        ("problem", pa.string()),
    ]
)
SUMMARY = pa.schema(
    [
        ("written", pa.bool_()), ("rows", pa.int64()), ("sentences", pa.int64()), ("began", pa.float64()),
        ("ended", pa.float64()), ("retry", pa.bool_()), ("worker", pa.int64()), ("error", pa.string()),
        ("problems", pa.list_(pa.string())),
    ]
)  # fmt: skip


def ray_module():
    return import_extra("ray", "ray", "translate-corpus")


# ------------------------------------------------------------------------------------------------------ inputs


def filesystem(path: str):
    """(pyarrow filesystem, path in it) of a local path or a URI (s3://, gs://, hdfs://, file://)."""
    from pyarrow import fs

    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def input_files(pattern: str) -> list[str]:
    """The files of `--input`: a file, a folder (its files, recursively, hidden ones left out) or a glob."""
    from pyarrow import fs as pafs

    filesystem_, path = filesystem(pattern)
    prefix = pattern[: len(pattern) - len(path)] if "://" in pattern and pattern.endswith(path) else ""
    if any(c in path for c in "*?["):
        base = path[: min(path.find(c) for c in "*?[" if c in path)].rpartition("/")[0] or "/"
        selector, match = pafs.FileSelector(base, recursive=True, allow_not_found=True), path
    else:
        info = filesystem_.get_file_info(path)
        if info.type == pafs.FileType.File:
            return [prefix + path]
        if info.type != pafs.FileType.Directory:
            raise InputError(f"--input {pattern}: no such file or folder.")
        selector, match = pafs.FileSelector(path, recursive=True), None
    files = sorted(
        info.path
        for info in filesystem_.get_file_info(selector)
        if info.type == pafs.FileType.File
        and not any(part.startswith((".", "_")) for part in info.path[len(selector.base_dir) :].split("/"))
        and (match is None or fnmatch.fnmatchcase(info.path, match))
    )
    if not files:
        raise InputError(f"--input {pattern}: no input files there.")
    return [prefix + f for f in files]


def file_format(path: str) -> str:
    return FORMATS.get(posixpath.splitext(path)[1].lower(), "text")


@dataclass(frozen=True)
class Shard:
    """Rows [start, stop) of one input file; `first` and `last` locate them: bytes (text, JSON Lines) or row groups
    [first, last) (Parquet)."""

    path: str
    start: int
    stop: int
    first: int
    last: int

    @property
    def name(self) -> str:
        return f"{self.file_name}-{self.start:012d}-{self.stop:012d}"

    @property
    def file_name(self) -> str:
        """What the names of its file's shards begin with."""
        stem = posixpath.splitext(posixpath.basename(self.path))[0]
        return f"{stem}-{hashlib.sha1(self.path.encode()).hexdigest()[:8]}"


def file_shards(path: str, column: str, shard_rows: int, check: bool = False):
    """The shards of `path` as reading it through finds them (Parquet: its footer's row groups; text and JSON Lines:
    their lines, counted), or the one-line problem of the file (unreadable, no such column) in their place. With
    `check`, the rows are checked too, and the first bad one is the problem: the up-front check of small inputs."""
    try:
        if file_format(path) == "parquet":
            yield from _parquet_shards(path, column, shard_rows)
        else:
            yield from _line_shards(path, column, shard_rows, check)
    except InputError as error:
        yield str(error)
    except OSError as error:
        yield f"{path}: cannot be read ({error})."


def _parquet_shards(path: str, column: str, shard_rows: int):
    import pyarrow.parquet as pq

    filesystem_, name = filesystem(path)
    try:
        metadata = pq.ParquetFile(filesystem_.open_input_file(name)).metadata
    except Exception as error:  # pyarrow's ArrowInvalid and friends: not a Parquet file
        raise InputError(f"{path}: not a readable Parquet file ({error}).") from None
    schema = metadata.schema.to_arrow_schema()
    _check_columns(path, schema.names, column)
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        raise InputError(f"{path}: the column {column!r} holds {kind}, expected strings.")
    start, first, rows = 0, 0, 0
    for group in range(metadata.num_row_groups):
        rows += metadata.row_group(group).num_rows
        if rows >= shard_rows or group == metadata.num_row_groups - 1:
            if rows:
                yield Shard(path, start, start + rows, first, group + 1)
            start, first, rows = start + rows, group + 1, 0


def _check_columns(path: str, names, column: str, row: int | None = None) -> None:
    where = f"{path}:{row}" if row is not None else path
    if column not in names:
        raise InputError(f"{where}: no column {column!r} (--column); it has {', '.join(map(repr, names))}.")
    taken = [name for name in ADDED if name in names]
    if taken:
        raise InputError(f"{where}: the column {taken[0]!r} is one the translation adds; rename it.")


def _line_shards(path: str, column: str, shard_rows: int, check: bool):
    filesystem_, name = filesystem(path)
    jsonl = file_format(path) == "jsonl"
    start, first, offset, row = 0, 0, 0, 0
    with filesystem_.open_input_stream(name) as stream:
        for row, raw in enumerate(_raw_lines(stream), 1):
            if check:
                parse_row(path, row, raw, column, jsonl)
            offset += len(raw)
            if row - start == shard_rows:
                yield Shard(path, start, row, first, offset)
                start, first = row, offset
    if row > start:
        yield Shard(path, start, row, first, offset)


def _raw_lines(stream):
    """The lines of a binary stream, each with its b"\\n" (the last one maybe without)."""
    rest = b""
    for block in iter(lambda: stream.read(1 << 20), b""):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        yield from (line + b"\n" for line in lines)
    if rest:
        yield rest


def parse_row(path: str, row: int, raw: bytes, column: str, jsonl: bool):
    """Line `row` of a text file as its text, or of a JSON Lines file as its record; an `InputError` naming the file
    and the row where it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{path}:{row}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line); the "
            "input must be UTF-8 text."
        ) from None
    if not jsonl:
        return (text[1:] if row == 1 and text.startswith("\ufeff") else text).rstrip("\r\n")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{row}: not a JSON object ({error.msg}).") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}:{row}: not a JSON object.")
    _check_columns(path, list(record), column, row)
    if not isinstance(record[column], str | None):
        raise InputError(f"{path}:{row}: {column!r} is of type {type(record[column]).__name__}, expected a string.")
    return record


def read_shard(shard: Shard, column: str):
    """The rows of `shard` as a pyarrow Table (text files: one column, `column`) and the problems of its bad rows,
    one line each (at most `REPORTED_ROWS`); no table where there is one."""
    filesystem_, name = filesystem(shard.path)
    if file_format(shard.path) == "parquet":
        import pyarrow.parquet as pq

        groups = range(shard.first, shard.last)
        return pq.ParquetFile(filesystem_.open_input_file(name)).read_row_groups(groups), []
    with filesystem_.open_input_file(name) as f:
        f.seek(shard.first)
        lines = f.read(shard.last - shard.first).split(b"\n")[: shard.stop - shard.start]
    jsonl, rows, problems = file_format(shard.path) == "jsonl", [], []
    for row, raw in enumerate(lines, shard.start + 1):
        try:
            rows.append(parse_row(shard.path, row, raw, column, jsonl))
        except InputError as problem:
            problems.append(str(problem))
            if len(problems) == REPORTED_ROWS:
                break
    if problems:
        return None, problems
    return (pa.Table.from_pylist(rows) if jsonl else pa.table({column: rows})), []


def sampled_rows(inputs: list[str], sizes: list[int]) -> int:
    """About how many rows `inputs` hold (of `sizes` bytes): the bytes per row of the first file's first MiB (Parquet:
    its footer) over all of them; 0 where that file cannot be read (its worker says why)."""
    import pyarrow.parquet as pq

    filesystem_, name = filesystem(inputs[0])
    try:
        if file_format(inputs[0]) == "parquet":
            rows = pq.ParquetFile(filesystem_.open_input_file(name)).metadata.num_rows
            return rows * sum(sizes) // max(sizes[0], 1)
        with filesystem_.open_input_stream(name) as stream:
            sample = stream.read(1 << 20)
    except (OSError, pa.ArrowException):
        return 0
    return max(1, sample.count(b"\n")) * sum(sizes) // max(len(sample), 1)


def shard_datasource(inputs: list[str], column: str, shard_rows: int, complete: set[str]):
    """The shards of `inputs` as a Ray Data source (`read_datasource`): a read task per file finds its shards as it
    reads the file through and hands each on at once ([`shard_blocks`]), so that no pass over the whole input comes
    before the translation."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class Shards(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            metadata = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            return [
                ReadTask(functools.partial(shard_blocks, path, column, shard_rows, of_file(complete, path)), metadata)
                for path in inputs
            ]

    return Shards()


def shard_blocks(path: str, column: str, shard_rows: int, complete: set[str]):
    """The shards of `path` but the `complete` ones (by name), each a one-row block; the file's problem as a shard
    that holds it."""
    for shard in file_shards(path, column, shard_rows):
        if isinstance(shard, str):
            yield pa.Table.from_pylist([descriptor(Shard(path, 0, 0, 0, 0), shard)], DESCRIPTOR)
        elif shard.name not in complete:
            yield pa.Table.from_pylist([descriptor(shard)], DESCRIPTOR)


def of_file(names: set[str], path: str) -> set[str]:
    """The shard names among `names` that belong to `path`."""
    prefix = f"{Shard(path, 0, 0, 0, 0).file_name}-"
    return {name for name in names if name.startswith(prefix)}


def descriptor(shard: Shard, problem: str | None = None) -> dict:
    """A shard as the row that hands it to a worker, with its file's problem where it has one."""
    return dict(dataclasses.asdict(shard), problem=problem)


# ------------------------------------------------------------------------------------------------- translating


def translated(translator, decoding: DecodeOptions, table, column: str):
    """`table` with `translation`, `score` and `translation_length` (its tokens, the end token included; and `nbest`,
    a list of {text, score, length}, when n > 1; `missing_terms` with a glossary) added; and the sentences
    translated. A null text is translated as an empty one."""
    texts = ["" if text is None else text for text in table.column(column).to_pylist()]
    results = translator.translate(texts, decoding)
    best = [t.hypotheses[0] if t.hypotheses else None for t in results]
    table = table.append_column("translation", pa.array([h.text if h else "" for h in best], pa.string()))
    table = table.append_column("score", pa.array([h.score if h else None for h in best], pa.float64()))
    lengths = [len(h.tokens) if h else None for h in best]  # the end token included, as the score counts it
    table = table.append_column("translation_length", pa.array(lengths, pa.int32()))
    if decoding.nbest > 1:
        nbest = [[{"text": h.text, "score": h.score, "length": len(h.tokens)} for h in t.hypotheses] for t in results]
        kind = pa.list_(pa.struct([("text", pa.string()), ("score", pa.float64()), ("length", pa.int32())]))
        table = table.append_column("nbest", pa.array(nbest, kind))
    if decoding.glossary is not None:  # the glossary's target terms that did not fit (the best translation's)
        missing = [h.missing_terms if h else [] for h in best]
        table = table.append_column("missing_terms", pa.array(missing, pa.list_(pa.string())))
    return table, sum(t.parts for t in results)


class Translate:
    """A Ray Data actor: loads the model once, then adds the translations of `column` to each batch it is given.
    `lines`: how many it will translate, where known (`--compile auto` compiles for enough). A model that does not
    load is `problem`, one line naming the worker's error, rather than a dead actor that Ray restarts."""

    def __init__(self, model: str, engine: EngineOptions, decoding: DecodeOptions, column: str, lines=None):
        self.translator, self.decoding, self.column, self.problem = None, decoding, column, None
        try:
            self.translator = load_translator(model, engine, lines=lines)
        except InputError as error:
            self.problem = str(error)
        except Exception as error:  # a folder that this node lacks or cannot read, weights cut short, ...
            self.problem = f"a worker could not load the model {model}: {type(error).__name__}: {one_line(error)}"

    def __call__(self, batch):
        if self.problem:
            raise InputError(self.problem)
        return translated(self.translator, self.decoding, batch, self.column)[0]


class TranslateShards(Translate):
    """The actor of `translate-corpus`: each shard read and checked, and translated and written whole, under a
    temporary name (made before the work starts, so that an attempt that dies leaves it) renamed when complete; a
    shard with bad rows is not written. Each returns its summary ([`SUMMARY`]): the problems instead of the work
    where the model did not load (`error`), or the file or rows are bad (`problems`)."""

    def __init__(self, model, engine, decoding, column: str, output_dir: str, output_format: str, lines=None):
        super().__init__(model, engine, decoding, column, lines)
        self.output_dir, self.output_format = output_dir, output_format

    def __call__(self, batch):
        return pa.Table.from_pylist([self.shard(**row) for row in batch.to_pylist()], SUMMARY)

    def shard(self, problem: str | None = None, **shard) -> dict:
        from pyarrow import fs as pafs

        shard, began = Shard(**shard), time.time()
        summary = dict(written=False, rows=0, sentences=0, began=began, ended=began, retry=False, worker=os.getpid())
        if self.problem or problem:
            return dict(summary, error=self.problem, problems=[problem] if problem else None)
        filesystem_, folder = filesystem(self.output_dir)
        temporary, complete = f"{folder}/.{shard.name}.tmp", f"{folder}/{shard.name}.{self.output_format}"
        if filesystem_.get_file_info(complete).type != pafs.FileType.NotFound:  # handed on twice: a read retried
            return summary
        retry = filesystem_.get_file_info(temporary).type != pafs.FileType.NotFound
        filesystem_.open_output_stream(temporary).close()
        table, problems = read_shard(shard, self.column)
        if problems:
            filesystem_.delete_file(temporary)
            return dict(summary, problems=problems, retry=retry)
        table, sentences = translated(self.translator, self.decoding, table, self.column)
        with filesystem_.open_output_stream(temporary) as stream:
            write_table(table, stream, self.output_format)
        filesystem_.move(temporary, complete)
        return dict(summary, written=True, rows=table.num_rows, sentences=sentences, ended=time.time(), retry=retry)


def write_table(table, stream, output_format: str) -> None:
    """`table` as Parquet, or as JSON Lines (dates and other values without a JSON form as text)."""
    if output_format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, stream)
    else:
        stream.write(
            b"".join(json.dumps(r, ensure_ascii=False, default=str).encode() + b"\n" for r in table.to_pylist())
        )


def worker_resources(engine: EngineOptions, num_workers: int | None) -> tuple[EngineOptions, int, dict]:
    """Each worker's engine options, the number of workers and each one's Ray resources: one GPU each where the
    cluster has GPUs, else CPUs (`--threads` each when given, else the cluster's shared among the workers), torch's
    threads set to match. `num_workers` (None: one per GPU, else one per 4 CPUs) and `--threads` are capped at what the
    cluster holds, with a warning saying so: a worker that asks for more than a node has waits forever, and those
    beyond the cluster's room wait for a free one, each having loaded the model. A GPU worker runs with this process's
    `CUDA_DEFAULTS`, which a cluster's nodes do not inherit from it."""
    ray = ray_module()
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    cpus = [int(node.get("CPU", 0)) for node in nodes]
    largest = max(cpus, default=1)
    threads = engine.threads
    if threads and threads > largest:
        logger.warning(f"--threads {threads}: a node of this Ray has at most {largest} CPUs; workers run {largest}.")
        threads = largest
    gpus = sum(int(node.get("GPU", 0)) for node in nodes)
    if gpus and engine.device in (None, "cuda"):
        threads = threads or 1
        room = sum(min(int(node.get("GPU", 0)), int(node.get("CPU", 0)) // threads) for node in nodes)
        resources = dict(num_gpus=1, num_cpus=threads, runtime_env={"env_vars": cuda_environment()})
        what = f"{gpus} GPU(s)"
    else:
        room = sum(n // (threads or 1) for n in cpus)
        resources, what = {}, f"{sum(cpus)} CPU(s)"
    room = max(room, 1)
    wanted = min(room, gpus if "num_gpus" in resources else max(1, sum(cpus) // 4))
    if num_workers and num_workers > room:
        logger.warning(
            f"--num_workers {num_workers}: this Ray's {what} hold {room} worker(s)"
            + (f" of {threads} thread(s)" if threads else "")
            + f"; {room} run, each with its own copy of the model."
        )
    wanted = min(num_workers, room) if num_workers else wanted
    threads = threads or max(1, min(largest, sum(cpus) // wanted))
    return dataclasses.replace(engine, threads=threads), wanted, {**resources, "num_cpus": threads}


def translate_dataset(
    dataset, model: str, engine: EngineOptions | None = None, decoding: DecodeOptions | None = None, *,
    column: str = "text", num_workers: int = 1, batch_size: int = 1000,
):  # fmt: skip
    """`dataset` (a `ray.data.Dataset`) with `translated`'s columns added to its rows, translated from `column` by
    `num_workers` actors that each hold the model. `batch_size` rows reach an actor at once; the engine batches them
    by its token budget."""
    decoding = (decoding or DecodeOptions()).check()
    if column not in dataset.schema().names:
        raise InputError(f"no column {column!r} in the dataset; it has {', '.join(dataset.schema().names)}.")
    engine, num_workers, resources = worker_resources((engine or EngineOptions()).check(), num_workers)
    return dataset.map_batches(
        Translate,
        fn_constructor_args=(model, engine, decoding, column),
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ray_module().data.ActorPoolStrategy(size=num_workers),
        **resources,
    )


# ------------------------------------------------------------------------------------------------------ the run


@dataclass
class CorpusSummary:
    rows: int = 0  # translated in this run
    sentences: int = 0
    shards: int = 0  # written in this run
    skipped: int = 0  # complete before this run
    retries: int = 0  # shards whose earlier attempt died (in this run, or an interrupted one)
    seconds: float = 0.0  # translating: from the start of the first shard to the end of the last
    startup_seconds: float = 0.0  # before: Ray's start, the actors' start and model loading
    # Once every worker runs (its first shard started): the rows and sentences of the shards started since, and the
    # seconds to the end.
    steady_rows: int = 0
    steady_sentences: int = 0
    steady_seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Sentences/s with every worker running (all of the run's when it was too short to tell)."""
        if self.steady_seconds > 0 and self.steady_sentences:
            return self.steady_sentences / self.steady_seconds
        return self.sentences / self.seconds if self.seconds else 0.0

    def add(self, start: float, shards: list[dict]) -> None:
        """The summaries of the `shards` written by a run that began at `start` (`time.time()`)."""
        if not shards:
            return
        for row in shards:
            self.rows += row["rows"]
            self.sentences += row["sentences"]
            self.retries += row["retry"]
            self.shards += 1
        began, ended = min(row["began"] for row in shards), max(row["ended"] for row in shards)
        self.startup_seconds, self.seconds = began - start, ended - began
        everyone = max(
            min(row["began"] for row in shards if row["worker"] == w) for w in {r["worker"] for r in shards}
        )
        self.steady_rows = sum(row["rows"] for row in shards if row["began"] >= everyone)
        self.steady_sentences = sum(row["sentences"] for row in shards if row["began"] >= everyone)
        self.steady_seconds = ended - everyone

    def line(self) -> str:
        return (
            f"{self.rows} rows, {self.sentences} sentences in {self.seconds:.1f} s ({self.rate:.1f} sentences/s; "
            f"before that, {self.startup_seconds:.1f} s to start Ray and the workers), {self.shards} shards written, "
            f"{self.skipped} complete before, {self.retries} retried."
        )


class BadRows(InputError):
    """The input's problems that the workers found (one line each, `problems`: a bad row, a file that cannot be read);
    the shards that hold them are not written, the others are (`summary`)."""

    def __init__(self, problems: list[str], shards: int, summary: CorpusSummary, output_dir: str):
        self.problems, self.shards, self.summary = problems, shards, summary
        super().__init__(
            f"{len(problems)} problem(s) in the input, in {shards} shard(s), which are not written ({summary.shards} "
            f"others are): fix the input and run the same command again to complete {output_dir}."
        )


def input_sizes(inputs: list[str]) -> list[int]:
    """The sizes of the input files in bytes (their metadata, in parallel threads)."""
    from concurrent.futures import ThreadPoolExecutor

    def size(path: str) -> int:
        filesystem_, name = filesystem(path)
        return filesystem_.get_file_info(name).size or 0

    with ThreadPoolExecutor(min(16, len(inputs))) as pool:
        return list(pool.map(size, inputs))


def plan(inputs: list[str], column: str, shard_rows: int) -> list[Shard]:
    """Every shard of a small input, each file read through and checked (files in parallel threads: reading is I/O,
    and a Ray task would first import torch); the first problem, in input order, as an `InputError`."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(8, len(inputs))) as pool:
        results = list(pool.map(lambda path: list(file_shards(path, column, shard_rows, check=True)), inputs))
    problem = next((item for result in results for item in result if isinstance(item, str)), None)
    if problem:
        raise InputError(problem)
    shards = [shard for result in results for shard in result]
    if not shards:
        raise InputError(f"--input {', '.join(inputs)}: no rows to translate (the input is empty).")
    return shards


def check_manifest(output_dir: str, record: dict) -> set[str]:
    """The names of the complete shards in `output_dir`, after checking that they come from the same input and
    options (else a rerun would mix outputs); writes the record for the next run."""
    from pyarrow import fs as pafs

    filesystem_, folder = filesystem(output_dir)
    filesystem_.create_dir(folder, recursive=True)
    manifest = f"{folder}/{MANIFEST}"
    if filesystem_.get_file_info(manifest).type == pafs.FileType.File:
        with filesystem_.open_input_stream(manifest) as stream:
            earlier = json.loads(stream.read())
        changed = differences(earlier, record)
        if changed:
            options, had, has = changed
            raise InputError(
                f"--output_dir {output_dir} holds a run whose {options} ({MANIFEST}): it had {had}, this run {has}; "
                "use another folder, or the earlier run's input and options to complete it."
            )
    else:
        taken = [i for i in filesystem_.get_file_info(pafs.FileSelector(folder)) if not i.base_name.startswith(".")]
        if taken:
            raise InputError(f"--output_dir {output_dir} is not empty and holds no earlier run ({MANIFEST}).")
        with filesystem_.open_output_stream(manifest) as stream:
            stream.write(json.dumps(record, indent=1).encode())
    suffix = f".{record['output_format']}"
    return {
        info.base_name[: -len(suffix)]
        for info in filesystem_.get_file_info(pafs.FileSelector(folder))
        if info.base_name.endswith(suffix)
    }


def translate_corpus(
    inputs: list[str],
    output_dir: str,
    model: str,
    engine: EngineOptions,
    decoding: DecodeOptions,
    *,
    column: str = "text",
    output_format: str = "parquet",
    num_workers: int | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    connect=None,
    worker=TranslateShards,
) -> CorpusSummary:
    """Translate the rows of `inputs` (files, from `input_files`) into shards in `output_dir` on Ray; the shards
    complete before are kept. An input of at most `CHECKED_UP_FRONT` bytes is read through and checked first (its
    first problem an `InputError`, before anything is written); a larger one is checked where its rows are read, in
    the workers, and its problems end the run as `BadRows` once the other shards are written. `connect()`, when given,
    starts or joins Ray (else this process must be connected). `num_workers` defaults to one per GPU of the cluster,
    else one per 4 CPUs. `worker` is the actor class."""
    summary, sizes = CorpusSummary(), input_sizes(inputs)
    shards = plan(inputs, column, shard_rows) if sum(sizes) <= CHECKED_UP_FRONT else None
    record = dict(
        inputs=inputs, column=column, shard_rows=shard_rows, output_format=output_format,
        settings=output_settings(model, engine, decoding),
    )  # fmt: skip
    complete = check_manifest(output_dir, record)
    summary.skipped = len(complete)
    if shards is not None:
        todo = [shard for shard in shards if shard.name not in complete]
        if not todo:
            return summary
        rows = sum(shard.stop - shard.start for shard in todo)
    else:
        done = sum(int(stop) - int(start) for _, start, stop in (name.rsplit("-", 2) for name in complete))
        rows = max(0, sampled_rows(inputs, sizes) - done)
    ray, start = ray_module(), time.time()
    if connect is not None:
        connect()
    engine, num_workers, resources = worker_resources(engine, num_workers)
    num_workers = min(num_workers, len(todo)) if shards is not None else num_workers
    context = ray.data.DataContext.get_current()
    target_block_size = context.target_max_block_size
    context.target_max_block_size = 1  # shards and summaries are one-row blocks: each handed on as soon as it is made
    try:
        if shards is not None:
            dataset = ray.data.from_items([descriptor(shard) for shard in todo], override_num_blocks=len(todo))
        else:  # the workers' share of CPUs holds the actors; the reading tasks only count lines
            datasource = shard_datasource(inputs, column, shard_rows, complete)
            dataset = ray.data.read_datasource(datasource, num_cpus=0, concurrency=num_workers)
        results = dataset.map_batches(
            worker,
            fn_constructor_args=(model, engine, decoding, column, output_dir, output_format, rows // num_workers),
            batch_format="pyarrow",
            batch_size=1,
            # A shard is seconds to minutes of work: an actor holds one in hand and one queued, not more.
            compute=ray.data.ActorPoolStrategy(size=num_workers, max_tasks_in_flight_per_actor=2),
            **resources,
        )
    finally:
        context.target_max_block_size = target_block_size
    shards_done = list(results.iter_rows())
    error = next((row["error"] for row in shards_done if row["error"]), None)
    if error:  # the model did not load: the same in every worker
        raise InputError(error)
    summary.add(start, [row for row in shards_done if row["written"]])
    bad = [row["problems"] for row in shards_done if row["problems"]]
    if bad:
        raise BadRows([problem for problems in bad for problem in problems], len(bad), summary, output_dir)
    return summary
