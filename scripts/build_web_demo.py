#!/usr/bin/env python
"""Build the page that translates in the browser with no server (transformers.js on the ONNX export):

    python scripts/build_web_demo.py --model_dir outputs/demo-de-en --output_dir site/
    python -m http.server -d site/ 8000        # any static file server; open http://127.0.0.1:8000

Needs the `export` extra (ONNX) and npm, which installs the pinned transformers.js once into a cache folder
(~/.cache/hf_vanilla_transformer).
"""

import argparse

from hf_vanilla_transformer.web_demo import build_web_demo


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="A trained model folder with its tokenizer.")
    parser.add_argument("--output_dir", required=True, help="A new (or empty) folder for the page.")
    parser.add_argument("--max_new_tokens", type=int, help="Generation length (default: the model's, else 128).")
    parser.add_argument("--title", default="German to English, in your browser")
    args = parser.parse_args(argv)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        parser.error(f"--max_new_tokens must be at least 1, got {args.max_new_tokens}.")
    try:
        folder = build_web_demo(args.model_dir, args.output_dir, title=args.title, max_new_tokens=args.max_new_tokens)
    except (FileExistsError, FileNotFoundError) as error:
        parser.error(str(error))
    print(f"Wrote the page to {folder}: serve it, e.g. `python -m http.server -d {folder} 8000`.")


if __name__ == "__main__":
    main()
