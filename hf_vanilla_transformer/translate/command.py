"""`hf-vanilla-transformer translate`: the command over `translate_file`."""

import argparse
import sys

from ..errors import CommandParser, InputError, check_minimums, import_extra


GENERATION_OPTIONS = ("num_beams", "length_penalty", "early_stopping", "do_sample", "temperature", "top_k", "top_p")
DESCRIPTION = """Translate text files with any AutoModelForSeq2SeqLM folder: one output line per input line, in order,
each line split into sentences and translated sentence by sentence, in length-sorted token-budget batches, resumable
(--resume), across processes under accelerate launch."""
# Counts and sizes below these would reach the search or the batching (a division by zero, a negative dimension).
MINIMUMS = {"num_beams": 1, "nbest": 1, "top_k": 0, "max_tokens": 1, "batch_size": 1, "buffer_size": 1}


def add_engine_arguments(engine) -> None:
    """The engine options, shared with `serve`: which engine runs the model, where and in which precision."""
    engine.add_argument("--backend", default="torch", choices=("torch", "ctranslate2"))
    engine.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when there is one)")
    engine.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    engine.add_argument("--int8", action="store_true", help="dynamic int8 quantization of the linear layers (CPU)")
    engine.add_argument("--compute_type", default="default", help="CTranslate2's compute type (int8, float16, ...)")
    engine.add_argument("--trust_remote_code", action="store_true", help="run the model folder's own code")


def build_parser(prog: str) -> argparse.ArgumentParser:
    from .io import FORMATS
    from .translator import DEFAULT_BUFFER_SIZE, DEFAULT_MAX_TOKENS

    parser = CommandParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("inputs", nargs="*", metavar="FILE", help="input files, one text per line (default: stdin)")
    parser.add_argument("--model", required=True, help="model folder or Hub id (any AutoModelForSeq2SeqLM)")
    parser.add_argument("--output", help="output file (default: stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    parser.add_argument("--format", default="text", choices=FORMATS, dest="output_format")
    parser.add_argument("--nbest", type=int, default=1, help="hypotheses per line (jsonl and fairseq formats)")
    text = parser.add_argument_group("sentences")
    text.add_argument(
        "--split_sentences",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="split each line into sentences, translate them one by one and join their translations on one line "
        "(default). --no-split_sentences translates each line as one sentence, as the translation pipeline does: for "
        "input that is already one sentence per line and must stay so (a test set scored line by line against its "
        "references), or a model trained on multi-sentence segments. A sentence longer than the model was trained "
        "on is split at clause punctuation either way.",
    )
    text.add_argument(
        "--source_lang",
        help="language of the input (de, en, ...) for the sentence rules, e.g. whether '3. Oktober' is an ordinal "
        "(default: the source language the model's folder records from training, else rules common to all)",
    )
    decoding = parser.add_argument_group("decoding (default: the model's generation config)")
    decoding.add_argument("--num_beams", type=int)
    decoding.add_argument("--length_penalty", type=float)
    decoding.add_argument("--early_stopping", action=argparse.BooleanOptionalAction, default=None)
    decoding.add_argument("--do_sample", action=argparse.BooleanOptionalAction, default=None)
    decoding.add_argument("--temperature", type=float)
    decoding.add_argument("--top_k", type=int)
    decoding.add_argument("--top_p", type=float)
    decoding.add_argument("--seed", type=int, default=0, help="sampling seed (each batch is seeded from it)")
    decoding.add_argument("--max_len_a", type=float, help="new tokens <= a * source tokens + b")
    decoding.add_argument(
        "--max_len_b", type=int, help="(default: the model's own limit, else a=1, b=50 as generate())"
    )
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--max_tokens", type=int, help=f"padded source tokens per batch (default {DEFAULT_MAX_TOKENS})"
    )
    batching.add_argument("--batch_size", type=int, help="sentences per batch")
    batching.add_argument("--buffer_size", type=int, default=DEFAULT_BUFFER_SIZE, help="lines read and sorted at once")
    add_engine_arguments(parser.add_argument_group("engine"))
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run into the same --output")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    from transformers.utils import logging

    from ..data.folders import check_output_file
    from .io import check_inputs
    from .translator import load_translator, translate_file

    if args.quiet:
        logging.disable_progress_bar()
    check_minimums(MINIMUMS, args)
    check_device(args.device, args.backend)
    check_inputs(args.inputs or ["-"])
    if args.output not in (None, "-"):  # --resume continues the file it names
        check_output_file(args.output, args.overwrite or args.resume)
    translator = load_translator(
        args.model,
        backend=args.backend,
        generation={name: getattr(args, name) for name in GENERATION_OPTIONS},
        nbest=args.nbest,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        device=args.device,
        dtype=args.dtype,
        int8=args.int8,
        compute_type=args.compute_type,
        trust_remote_code=args.trust_remote_code,
        split_sentences=args.split_sentences,
        source_lang=args.source_lang,
    )
    try:
        translate_file(
            args.inputs,
            args.output,
            translator,
            output_format=args.output_format,
            resume=args.resume,
            quiet=args.quiet,
            max_tokens=args.max_tokens,
            batch_size=args.batch_size,
            buffer_size=args.buffer_size,
            seed=args.seed,
        )
    except KeyboardInterrupt:
        if args.output:
            print(f"{prog}: interrupted; add --resume to continue into {args.output}.", file=sys.stderr)
        return 130
    return 0


def check_device(device: str | None, backend: str) -> None:
    """Refuse a `--device` that this machine (or this build of torch) does not have, before the model loads."""
    import torch

    if device is None:
        return
    try:
        cuda = torch.device(device).type == "cuda"
    except RuntimeError:
        raise InputError(f"--device {device}: expected cpu, cuda or cuda:N.") from None
    if not cuda:
        return
    if backend == "ctranslate2":
        gpus = import_extra("ctranslate2", "export", "--backend ctranslate2").get_cuda_device_count()
    else:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        why = "this torch is a CPU-only build" if backend == "torch" and torch.version.cuda is None else "no GPU"
        raise InputError(f"--device {device}: {why}; translate on the CPU (--device cpu, the default without a GPU).")
    index = torch.device(device).index or 0
    if index >= gpus:
        raise InputError(f"--device {device}: this machine has {gpus} GPU(s), cuda:0 to cuda:{gpus - 1}.")
