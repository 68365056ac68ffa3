"""`hf-vanilla-transformer translate-corpus`: `corpus.translate_corpus` on a local Ray or a cluster."""

import dataclasses
import os
import sys

from ..errors import CommandParser, InputError, check_minimums
from .options import DEFAULT_SHARD_ROWS, DecodeOptions, EngineOptions, add_arguments


DESCRIPTION = """Translate a corpus (Parquet, JSON Lines or text files; local or any filesystem Ray reads, such as s3://)
on Ray Data: actors that each hold the model translate shards of rows as the translate command translates lines, and
write them to --output_dir with every input column, plus translation and score. A rerun into the same --output_dir
translates only what is not complete. Needs the `ray` extra: pip install 'hf-vanilla-transformer[ray]'. See
docs/translate.md."""
MINIMUMS = {"num_workers": 1, "shard_rows": 1}
REPORTED = 100  # problems of the input listed, at most


def build_parser(prog: str):
    from .corpus import OUTPUT_FORMATS

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
    from ..data.folders import check_output_dir, check_translation_folder, resolve_model
    from .backends import check_before_loading
    from .corpus import BadRows, input_files, ray_module, translate_corpus
    from .ray_session import RaySession

    check_minimums(MINIMUMS, args)
    engine, decoding = EngineOptions.of(args).prepared(processes=None), DecodeOptions.of(args)
    # The glossary's terms travel to the workers, which may not see this machine's files.
    decoding = dataclasses.replace(decoding, glossary=decoding.loaded_glossary())
    ray_module()  # the extra installed, before anything is read
    inputs = input_files(args.input)
    if "://" not in args.model:
        check_translation_folder(resolve_model(args.model), ctranslate2=engine.backend == "ctranslate2")
        check_before_loading(args.model, engine, decoding)  # here, not in every worker
    if "://" not in args.output_dir:  # a folder that a rerun completes: not empty is fine, a file is not
        check_output_dir(args.output_dir, overwrite=True)
    session = RaySession(args.address, args.verbose)
    try:
        with session:
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
                connect=session.connect,
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
        return 128 + session.stopped_by
    print(f"{prog}: {summary.line()}", file=sys.stderr)
    return 0
