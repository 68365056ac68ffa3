"""`hf-vanilla-transformer export {ctranslate2,marian,onnx}` and `hf-vanilla-transformer verify-export`."""

import sys

from ..errors import CommandParser, InputError, check_minimums, import_extra


# The packages of the `export` extra each format needs.
EXTRA_MODULES = {"ctranslate2": ["ctranslate2"], "marian": [], "onnx": ["onnx", "onnxscript", "onnxruntime"]}


def export(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Export a trained model folder to another engine's format, losing nothing: a setting the format "
        "cannot represent is refused by name.",
    )
    formats = parser.add_subparsers(dest="format", required=True, metavar="FORMAT", parser_class=CommandParser)
    ctranslate2 = formats.add_parser("ctranslate2", help="a CTranslate2 model folder (weights, vocabulary, tokenizer)")
    ctranslate2.add_argument(
        "--quantization", help="weight type: int8, int8_float32, int16, float16, bfloat16, ... (default: float32)"
    )
    formats.add_parser("marian", help="a transformers MarianMTModel folder that loads without remote code")
    onnx = formats.add_parser("onnx", help="ONNX graphs in the optimum / transformers.js layout")
    onnx.add_argument("--quantize", action="store_true", help="also write dynamic int8 graphs (onnx/*_quantized.onnx)")
    onnx.add_argument(
        "--model_type",
        default="marian",
        choices=("marian", "vanilla_transformer"),
        help="config.json beside the graphs: MarianMT's (transformers.js; post-norm models only) or this package's "
        "(any model, for ONNX Runtime)",
    )
    for subparser in formats.choices.values():
        subparser.add_argument("--model", required=True, help="a trained model folder (model and tokenizer)")
        subparser.add_argument("--output_dir", required=True, help="a new (or empty) folder to write")
        subparser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    args = parser.parse_args(argv)
    try:
        folder = _export(args)
    except ValueError as error:  # a setting the format cannot represent, named by the exporter
        raise InputError(str(error)) from None
    print(f"Wrote {folder}")
    return 0


def _export(args):
    for module in EXTRA_MODULES[args.format]:
        import_extra(module, "export", f"export {args.format}")
    if args.format == "ctranslate2":
        from .ctranslate2 import export_ctranslate2

        return export_ctranslate2(args.model, args.output_dir, args.quantization, overwrite=args.overwrite)
    elif args.format == "marian":
        from .marian import export_marian

        return export_marian(args.model, args.output_dir, overwrite=args.overwrite)
    else:
        from .onnx import export_onnx

    return export_onnx(args.model, args.output_dir, args.quantize, args.model_type, overwrite=args.overwrite)


def verify(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Translate a test set with a trained model and with each of its exports (MarianMTModel, "
        "CTranslate2 float32 and int8, ONNX Runtime, transformers.js) and print, per engine and decoding, the share "
        "of outputs token-identical to the model's and the BLEU, with the bar each export must meet (float32: nearly "
        "every output identical; int8: BLEU barely lower). Exit status 1 when an export misses its bar.",
    )
    parser.add_argument("--model", required=True, help="a trained model folder (model and tokenizer)")
    parser.add_argument("--test_file", help="JSON Lines / TSV / CSV pairs (default: the bundled test split)")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--limit", type=int, help="only the first LIMIT pairs")
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=("marian", "ctranslate2", "onnx", "transformers.js"),
        default=["marian", "ctranslate2", "onnx", "transformers.js"],
        help="the exports to check (default: all; those whose package is missing are reported so)",
    )
    parser.add_argument("--js_sentences", type=int, default=50, help="pairs translated by transformers.js")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="threads of each engine (they share the process)")
    args = parser.parse_args(argv)
    check_minimums({"limit": 1, "js_sentences": 0, "batch_size": 1, "threads": 1}, args)
    from .parity import format_table, misses, parity_table

    rows = parity_table(
        args.model,
        args.test_file,
        args.source_lang,
        args.target_lang,
        limit=args.limit,
        engines=args.engines,
        js_sentences=args.js_sentences,
        batch_size=args.batch_size,
        threads=args.threads,
    )
    print(format_table(rows))
    missed = misses(rows)
    if missed:  # the verification failed: not a mistake in the options, so not exit status 2
        print(f"{prog}: {len(missed)} export(s) miss their bar: {'; '.join(missed)}.", file=sys.stderr)
        return 1
    return 0
