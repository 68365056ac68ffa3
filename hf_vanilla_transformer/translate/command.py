"""`hf-vanilla-transformer translate`: the command over `translate_file`."""

import argparse
import os
import sys

from ..errors import CommandParser, check_minimums
from .options import DecodeOptions, EngineOptions, add_arguments


DESCRIPTION = """Translate text files with any AutoModelForSeq2SeqLM folder: one output line per input line, in order,
each line split into sentences and translated sentence by sentence, in length-sorted token-budget batches, resumable
(--resume), across processes under accelerate launch."""
# Counts and sizes below these would reach the search or the batching (the translation options check their own).
MINIMUMS = {"buffer_size": 1}


def build_parser(prog: str) -> argparse.ArgumentParser:
    from .io import FORMATS
    from .translator import DEFAULT_BUFFER_SIZE

    parser = CommandParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("inputs", nargs="*", metavar="FILE", help="input files, one text per line (default: stdin)")
    parser.add_argument("--model", required=True, help="model folder or Hub id (any AutoModelForSeq2SeqLM)")
    parser.add_argument("--output", help="output file (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--format", default="text", choices=FORMATS, dest="output_format")
    add_arguments(parser)
    parser.add_argument("--buffer_size", type=int, default=DEFAULT_BUFFER_SIZE, help="lines read and sorted at once")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run into the same --output")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    from transformers.utils import logging

    from ..data.folders import check_output_file
    from .io import check_inputs, count_lines
    from .translator import load_translator, translate_file

    if args.quiet:
        logging.disable_progress_bar()
    check_minimums(MINIMUMS, args)
    # the threads: the cores shared among this machine's processes (accelerate launch: several)
    engine = EngineOptions.of(args).prepared(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    decoding = DecodeOptions.of(args)
    check_inputs(args.inputs or ["-"])
    if args.output not in (None, "-"):  # --resume continues the file it names
        check_output_file(args.output, args.overwrite or args.resume)
    # --compile auto weighs the input's length; standard input's is not known beforehand, and counts as short.
    translator = load_translator(args.model, engine, lines=count_lines(args.inputs or ["-"]) or 0)
    try:
        translate_file(
            args.inputs,
            args.output,
            translator,
            decoding,
            output_format=args.output_format,
            resume=args.resume,
            quiet=args.quiet,
            buffer_size=args.buffer_size,
        )
    except KeyboardInterrupt:
        if args.output:
            print(f"{prog}: interrupted; add --resume to continue into {args.output}.", file=sys.stderr)
        return 130
    return 0
