#!/usr/bin/env python
"""Export a trained model folder to another inference engine's format, losing nothing.

    python scripts/export.py ctranslate2 --model_dir outputs/demo-de-en --output_dir outputs/demo-ct2 [--quantization int8]
    python scripts/export.py marian --model_dir outputs/demo-de-en --output_dir outputs/demo-marian
    python scripts/export.py onnx --model_dir outputs/demo-de-en --output_dir outputs/demo-onnx [--quantize]

Each sub-command is one library function; a setting the target format cannot represent is an error naming it.
"""

import argparse
from pathlib import Path


def ctranslate2(args: argparse.Namespace) -> Path:
    """A CTranslate2 model folder (weights, vocabulary, tokenizer, generation config)."""
    from hf_vanilla_transformer.export_ctranslate2 import export_ctranslate2

    return export_ctranslate2(args.model_dir, args.output_dir, args.quantization)


def marian(args: argparse.Namespace) -> Path:
    """A transformers MarianMTModel folder that loads without remote code."""
    from hf_vanilla_transformer.convert_marian import export_marian

    return export_marian(args.model_dir, args.output_dir)


def onnx(args: argparse.Namespace) -> Path:
    """An ONNX folder in the optimum / transformers.js layout (encoder, merged decoder with key/value cache)."""
    from hf_vanilla_transformer.export_onnx import export_onnx

    return export_onnx(args.model_dir, args.output_dir, args.quantize, args.model_type)


# sub-command -> (function, its own options)
COMMANDS = {
    "ctranslate2": (
        ctranslate2,
        {
            "--quantization": dict(
                help="weight type: int8, int8_float32, int16, float16, bfloat16, ... (default: float32)"
            )
        },
    ),
    "marian": (marian, {}),
    "onnx": (
        onnx,
        {
            "--quantize": dict(action="store_true", help="also write dynamic int8 graphs (onnx/*_quantized.onnx)"),
            "--model_type": dict(
                default="marian",
                help="config.json beside the graphs: 'marian' (MarianMT's: transformers.js, post-norm models only; the "
                "default) or 'vanilla_transformer' (this package's: any model, for ONNX Runtime)",
            ),
        },
    ),
}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="format", required=True)
    for name, (command, options) in COMMANDS.items():
        subparser = subparsers.add_parser(name, help=command.__doc__, description=command.__doc__)
        subparser.add_argument("--model_dir", required=True, help="a trained folder (model and tokenizer)")
        subparser.add_argument("--output_dir", required=True)
        for option, settings in options.items():
            subparser.add_argument(option, **settings)
    args = parser.parse_args(argv)
    try:
        output_dir = COMMANDS[args.format][0](args)
    except (ValueError, FileExistsError) as error:
        parser.error(str(error))
    print(f"Wrote {output_dir}")
    return output_dir


if __name__ == "__main__":
    main()
