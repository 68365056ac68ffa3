"""Corpus translation on Ray Data: actors that hold the model translate shards of Parquet, JSON Lines or text files
through the engine API (`Translator.translate`), so a sentence translates here as through `translate`.

    hf-vanilla-transformer translate-corpus --model outputs/demo-de-en --input corpus/ --output_dir translated/

Resume lives in the output folder. Each input file is cut into shards of rows (text and JSON Lines by lines, Parquet
by row groups) named after the file and their row range; an actor writes a shard's output to a temporary name and
renames it when complete, and a run skips the shards whose output exists. Ray restarts a dead actor and retries its
shard (its temporary file tells the retry). So every input row is in the output exactly once, whatever was killed.

In Python, `translate_dataset(dataset, model, engine, decoding)` adds the translations to any `ray.data.Dataset`.
"""

import dataclasses
import fnmatch
import hashlib
import json
import os
import posixpath
import time
from dataclasses import dataclass

from ..cuda import cuda_environment
from ..errors import InputError, import_extra
from .options import DecodeOptions, EngineOptions
from .translator import load_translator, output_settings


FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}  # others: text
OUTPUT_FORMATS = ("parquet", "jsonl")
ADDED = ("translation", "score", "nbest")
DEFAULT_SHARD_ROWS = 10_000
MANIFEST = "_translate_corpus.json"


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
        stem = posixpath.splitext(posixpath.basename(self.path))[0]
        digest = hashlib.sha1(self.path.encode()).hexdigest()[:8]
        return f"{stem}-{digest}-{self.start:012d}-{self.stop:012d}"


def scan(path: str, column: str, shard_rows: int) -> list[Shard] | str:
    """The shards of `path`, after checking every row (the column there, UTF-8 text); or the one-line error."""
    try:
        if file_format(path) == "parquet":
            return _scan_parquet(path, column, shard_rows)
        return _scan_lines(path, column, shard_rows)
    except InputError as error:
        return str(error)
    except OSError as error:
        return f"{path}: cannot be read ({error})."


def _scan_parquet(path: str, column: str, shard_rows: int) -> list[Shard]:
    import pyarrow.parquet as pq

    filesystem_, name = filesystem(path)
    try:
        metadata = pq.ParquetFile(filesystem_.open_input_file(name)).metadata
    except Exception as error:  # pyarrow's ArrowInvalid and friends: not a Parquet file
        raise InputError(f"{path}: not a readable Parquet file ({error}).") from None
    names = metadata.schema.to_arrow_schema().names
    _check_columns(path, names, column)
    shards, start, first, rows = [], 0, 0, 0
    for group in range(metadata.num_row_groups):
        rows += metadata.row_group(group).num_rows
        if rows >= shard_rows or group == metadata.num_row_groups - 1:
            if rows:
                shards.append(Shard(path, start, start + rows, first, group + 1))
            start, first, rows = start + rows, group + 1, 0
    return shards


def _check_columns(path: str, names, column: str, row: int | None = None) -> None:
    where = f"{path}:{row}" if row is not None else path
    if column not in names:
        raise InputError(f"{where}: no column {column!r} (--column); it has {', '.join(map(repr, names))}.")
    taken = [name for name in ADDED if name in names]
    if taken:
        raise InputError(f"{where}: the column {taken[0]!r} is one the translation adds; rename it.")


def _scan_lines(path: str, column: str, shard_rows: int) -> list[Shard]:
    filesystem_, name = filesystem(path)
    jsonl = file_format(path) == "jsonl"
    shards, start, first, offset, row = [], 0, 0, 0, 0
    with filesystem_.open_input_stream(name) as stream:
        for row, raw in enumerate(_raw_lines(stream), 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"{path}:{row}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the "
                    "line); the input must be UTF-8 text."
                ) from None
            if jsonl:
                _check_record(path, row, text, column)
            offset += len(raw)
            if row - start == shard_rows:
                shards.append(Shard(path, start, row, first, offset))
                start, first = row, offset
    if row > start:
        shards.append(Shard(path, start, row, first, offset))
    return shards


def _raw_lines(stream):
    """The lines of a binary stream, each with its b"\\n" (the last one maybe without)."""
    rest = b""
    for block in iter(lambda: stream.read(1 << 20), b""):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        yield from (line + b"\n" for line in lines)
    if rest:
        yield rest


def _check_record(path: str, row: int, text: str, column: str) -> None:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{row}: not a JSON object ({error.msg}).") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}:{row}: not a JSON object.")
    _check_columns(path, list(record), column, row)
    if not isinstance(record[column], str | None):
        raise InputError(f"{path}:{row}: {column!r} is a {type(record[column]).__name__}, expected a string.")


def read_shard(shard: Shard, column: str):
    """The rows of `shard` as a pyarrow Table (text files: one column, `column`)."""
    import pyarrow as pa

    filesystem_, name = filesystem(shard.path)
    if file_format(shard.path) == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(filesystem_.open_input_file(name)).read_row_groups(range(shard.first, shard.last))
    with filesystem_.open_input_file(name) as f:
        f.seek(shard.first)
        lines = f.read(shard.last - shard.first).decode("utf-8").split("\n")
    lines = lines[: shard.stop - shard.start]
    if file_format(shard.path) == "jsonl":
        return pa.Table.from_pylist([json.loads(line) for line in lines])
    if shard.start == 0 and lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    return pa.table({column: [line.rstrip("\r") for line in lines]})


# ------------------------------------------------------------------------------------------------- translating


def translated(translator, decoding: DecodeOptions, table, column: str):
    """`table` with `translation` and `score` (and `nbest`, a list of {text, score}, when n > 1) added; and the
    sentences translated. A null text is translated as an empty one."""
    import pyarrow as pa

    texts = ["" if text is None else text for text in table.column(column).to_pylist()]
    results = translator.translate(texts, decoding)
    best = [t.hypotheses[0] if t.hypotheses else None for t in results]
    table = table.append_column("translation", pa.array([h.text if h else "" for h in best], pa.string()))
    table = table.append_column("score", pa.array([h.score if h else None for h in best], pa.float64()))
    if decoding.nbest > 1:
        nbest = [[{"text": h.text, "score": h.score} for h in t.hypotheses] for t in results]
        kind = pa.list_(pa.struct([("text", pa.string()), ("score", pa.float64())]))
        table = table.append_column("nbest", pa.array(nbest, kind))
    return table, sum(t.parts for t in results)


class Translate:
    """A Ray Data actor: loads the model once, then adds the translations of `column` to each batch it is given.
    `lines`: how many it will translate, where known (`--compile auto` compiles for enough)."""

    def __init__(self, model: str, engine: EngineOptions, decoding: DecodeOptions, column: str, lines=None):
        self.translator, self.decoding, self.column = load_translator(model, engine, lines=lines), decoding, column

    def __call__(self, batch):
        return translated(self.translator, self.decoding, batch, self.column)[0]


class TranslateShards(Translate):
    """The actor of `translate-corpus`: each shard read, translated and written whole, under a temporary name (made
    before the work starts, so that an attempt that dies leaves it) renamed when complete."""

    def __init__(self, model, engine, decoding, column: str, output_dir: str, output_format: str, lines=None):
        super().__init__(model, engine, decoding, column, lines)
        self.output_dir, self.output_format = output_dir, output_format

    def __call__(self, batch):
        import pyarrow as pa
        from pyarrow import fs as pafs

        summaries = []
        for row in batch.to_pylist():
            shard, began = Shard(**row), time.time()
            filesystem_, folder = filesystem(self.output_dir)
            temporary = f"{folder}/.{shard.name}.tmp"
            retry = filesystem_.get_file_info(temporary).type != pafs.FileType.NotFound
            filesystem_.open_output_stream(temporary).close()
            table, sentences = translated(self.translator, self.decoding, read_shard(shard, self.column), self.column)
            with filesystem_.open_output_stream(temporary) as stream:
                write_table(table, stream, self.output_format)
            filesystem_.move(temporary, f"{folder}/{shard.name}.{self.output_format}")
            summaries.append(
                dict(
                    rows=table.num_rows,
                    sentences=sentences,
                    began=began,
                    ended=time.time(),
                    retry=retry,
                    worker=os.getpid(),
                )
            )
        return pa.Table.from_pylist(summaries)


def write_table(table, stream, output_format: str) -> None:
    """`table` as Parquet, or as JSON Lines (dates and other values without a JSON form as text)."""
    if output_format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, stream)
    else:
        stream.write(
            b"".join(json.dumps(r, ensure_ascii=False, default=str).encode() + b"\n" for r in table.to_pylist())
        )


def worker_resources(options: EngineOptions, num_workers: int) -> tuple[EngineOptions, dict]:
    """The options of each worker and its Ray resources: one GPU each where the cluster has GPUs, else the CPUs
    shared among the workers, at most a node's (`--threads` each when given), torch's threads set to match. A GPU
    worker runs with this process's `CUDA_DEFAULTS`, which a cluster's nodes do not inherit from it."""
    ray = ray_module()
    cluster = ray.cluster_resources()
    if cluster.get("GPU", 0) >= 1 and options.device in (None, "cuda"):
        threads = options.threads or 1
        gpu = dict(num_gpus=1, num_cpus=threads, runtime_env={"env_vars": cuda_environment()})
        return dataclasses.replace(options, threads=threads), gpu
    # Never more than a node has: an actor that asks for more would wait forever.
    node = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]), default=1)
    threads = options.threads or max(1, min(int(node), int(cluster.get("CPU", 1)) // num_workers))
    return dataclasses.replace(options, threads=threads), dict(num_cpus=threads)


def translate_dataset(
    dataset, model: str, engine: EngineOptions | None = None, decoding: DecodeOptions | None = None, *,
    column: str = "text", num_workers: int = 1, batch_size: int = 1000,
):  # fmt: skip
    """`dataset` (a `ray.data.Dataset`) with `translation`, `score` (and `nbest` when `decoding.nbest` > 1) added to
    its rows, translated from `column` by `num_workers` actors that each hold the model. `batch_size` rows reach an
    actor at once; the engine batches them by its token budget."""
    decoding = (decoding or DecodeOptions()).check()
    if column not in dataset.schema().names:
        raise InputError(f"no column {column!r} in the dataset; it has {', '.join(dataset.schema().names)}.")
    engine, resources = worker_resources((engine or EngineOptions()).check(), num_workers)
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

    def line(self) -> str:
        return (
            f"{self.rows} rows, {self.sentences} sentences in {self.seconds:.1f} s ({self.rate:.1f} sentences/s; "
            f"before that, {self.startup_seconds:.1f} s to start Ray and the workers), {self.shards} shards written, "
            f"{self.skipped} complete before, {self.retries} retried."
        )


def plan(inputs: list[str], column: str, shard_rows: int) -> list[Shard]:
    """Every shard of the input, each file read through and checked (files in parallel threads: reading is I/O, and
    a Ray task would first import torch); the first problem, in input order, as an `InputError`."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(8, len(inputs))) as pool:
        results = list(pool.map(lambda path: scan(path, column, shard_rows), inputs))
    for result in results:
        if isinstance(result, str):
            raise InputError(result)
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
        changed = sorted(k for k in set(earlier) | set(record) if earlier.get(k) != record.get(k))
        if changed:
            raise InputError(
                f"--output_dir {output_dir} holds a run with other {', '.join(changed)} ({MANIFEST}): use another "
                "folder, or the earlier run's input and options to complete it."
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
    complete before are kept. The input is checked first; then `connect()`, when given, starts or joins Ray (else
    this process must be connected). `num_workers` defaults to one per GPU of the cluster, else one per 4 CPUs.
    `worker` is the actor class."""
    summary = CorpusSummary()
    shards = plan(inputs, column, shard_rows)
    record = dict(
        inputs=inputs, column=column, shard_rows=shard_rows, output_format=output_format,
        settings=output_settings(model, engine, decoding),
    )  # fmt: skip
    complete = check_manifest(output_dir, record)
    todo = [shard for shard in shards if shard.name not in complete]
    summary.skipped = len(shards) - len(todo)
    if not todo:
        return summary
    ray, start = ray_module(), time.time()
    if connect is not None:
        connect()
    resources = ray.cluster_resources()
    num_workers = num_workers or int(resources.get("GPU", 0)) or max(1, int(resources.get("CPU", 1)) // 4)
    engine, resources = worker_resources(engine, num_workers)
    dataset = ray.data.from_items([dataclasses.asdict(s) for s in todo], override_num_blocks=len(todo))
    num_workers = min(num_workers, len(todo))
    lines = sum(shard.stop - shard.start for shard in todo) // num_workers  # each worker's share
    results = dataset.map_batches(
        worker,
        fn_constructor_args=(model, engine, decoding, column, output_dir, output_format, lines),
        batch_format="pyarrow",
        batch_size=1,
        # A shard is seconds to minutes of work: an actor holds one in hand and one queued, not more.
        compute=ray.data.ActorPoolStrategy(size=num_workers, max_tasks_in_flight_per_actor=2),
        **resources,
    )
    shards_done = list(results.iter_rows())
    for row in shards_done:
        summary.rows += row["rows"]
        summary.sentences += row["sentences"]
        summary.retries += row["retry"]
        summary.shards += 1
    began, ended = min(row["began"] for row in shards_done), max(row["ended"] for row in shards_done)
    summary.startup_seconds, summary.seconds = began - start, ended - began
    everyone = max(
        min(row["began"] for row in shards_done if row["worker"] == w) for w in {r["worker"] for r in shards_done}
    )
    summary.steady_rows = sum(row["rows"] for row in shards_done if row["began"] >= everyone)
    summary.steady_sentences = sum(row["sentences"] for row in shards_done if row["began"] >= everyone)
    summary.steady_seconds = ended - everyone
    return summary
