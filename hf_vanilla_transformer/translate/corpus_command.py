"""`hf-vanilla-transformer translate-corpus`: `corpus.translate_corpus` on a local Ray or a cluster."""

import logging
import os
import signal
import sys

from ..errors import CommandParser, InputError, check_minimums
from .options import DecodeOptions, EngineOptions, add_arguments


DESCRIPTION = """Translate a corpus (Parquet, JSON Lines or text files; local or any filesystem Ray reads, such as s3://)
on Ray Data: actors that each hold the model translate shards of rows as the translate command translates lines, and
write them to --output_dir with every input column, plus translation and score. A rerun into the same --output_dir
translates only what is not complete. Needs the `ray` extra: pip install 'hf-vanilla-transformer[ray]'. See
docs/translate.md."""
MINIMUMS = {"num_workers": 1, "shard_rows": 1}
REPORTED = 100  # problems of the input listed, at most


def build_parser(prog: str):
    from .corpus import DEFAULT_SHARD_ROWS, OUTPUT_FORMATS

    parser = CommandParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--model", required=True, help="model folder (on every node of a cluster) or Hub id")
    parser.add_argument("--input", required=True, help="a file, a folder or a glob; local or a URI (s3://...)")
    parser.add_argument("--column", default="text", help="the column to translate (text files: each line)")
    parser.add_argument("--output_dir", required=True, help="the shards of the output (local or a URI)")
    parser.add_argument("--output_format", default="parquet", choices=OUTPUT_FORMATS)
    parser.add_argument(
        "--num_workers",
        type=int,
        help="actors, each with the model (default: one per GPU, else one per 4 CPUs of the cluster)",
    )
    parser.add_argument(
        "--shard_rows", type=int, default=DEFAULT_SHARD_ROWS, help="input rows per output shard (the unit of resume)"
    )
    parser.add_argument(
        "--address", default=os.environ.get("RAY_ADDRESS"), help="a Ray cluster to join (default: $RAY_ADDRESS, "
        "else a local Ray on this machine's cores)"
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="show Ray's own log lines and its workers' output")
    add_arguments(parser)
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    from ..data.folders import check_translation_folder, resolve_model
    from .command import check_device
    from .corpus import BadRows, input_files, ray_module, translate_corpus

    check_minimums(MINIMUMS, args)
    engine, decoding = EngineOptions.of(args), DecodeOptions.of(args)
    check_device(engine.device, engine.backend)
    ray = ray_module()
    inputs = input_files(args.input)
    if "://" not in args.model:
        check_translation_folder(resolve_model(args.model), ctranslate2=engine.backend == "ctranslate2")
    started, stopped_by = False, []

    def connect():
        nonlocal started
        if not ray.is_initialized():
            start_ray(args.address, args.verbose)
            signal.signal(signal.SIGTERM, stop)  # again: Ray's core takes SIGTERM over as it starts
            started = True

    def stop(number, frame):  # SIGTERM as Ctrl-C: the shards written are whole, the run resumes
        stopped_by.append(number)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        summary = translate_corpus(
            inputs,
            args.output_dir,
            args.model,
            engine,
            decoding,
            column=args.column,
            output_format=args.output_format,
            num_workers=args.num_workers,
            shard_rows=args.shard_rows,
            connect=connect,
        )
    except BadRows as bad:
        for problem in bad.problems[:REPORTED]:
            print(f"{prog}: {problem}", file=sys.stderr)
        more = len(bad.problems) - REPORTED
        raise InputError(f"{bad} ({more:,} more not listed)" if more > 0 else bad) from None
    except KeyboardInterrupt:
        print(
            f"{prog}: interrupted; the shards written in {args.output_dir} are complete: run the same command again "
            "to translate the rest.",
            file=sys.stderr,
        )
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if started:
            ray.shutdown()
    print(f"{prog}: {summary.line()}", file=sys.stderr)
    return 0


def start_ray(address: str | None = None, verbose: bool = False, **arguments) -> None:
    """`ray.init` with [`init_arguments`] (and `arguments` over them), quiet unless `verbose`: Ray's log lines (its C++
    core's, which would say that Ray Data's actors take their arguments from the object store, its Python loggers',
    Ray Data's own) stay in the session's log files, and so does the workers' output. RAY_BACKEND_LOG_LEVEL is read as
    Ray starts, which reports it on stderr: that one line is not shown either."""
    import ray

    arguments = {**init_arguments(address), **arguments}
    if verbose:
        ray.init(**arguments)
        return
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    import ray.data  # which sets up its logger as it is imported

    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler):  # the console's; its log file keeps everything
            handler.setLevel(logging.ERROR)
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        ray.init(**arguments, log_to_driver=False, logging_level=logging.ERROR)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def init_arguments(address: str | None) -> dict:
    """`ray.init`'s arguments: a cluster's address, or a local Ray on this machine's cores with an object store of at
    most 2 GiB (a fifth of the memory on small machines): the blocks are shard descriptions and summaries."""
    if address:
        return dict(address=address)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 8 << 30
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return dict(num_cpus=cores, include_dashboard=False, object_store_memory=min(2 << 30, memory // 5))
