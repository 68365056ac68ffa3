#!/usr/bin/env python
"""How exactly the ONNX export reproduces a trained model: token-identical greedy outputs and BLEU on a test split.

    python scripts/onnx_parity.py --model_dir outputs/demo-de-en      # the bundled test split, 1,000 pairs
    python scripts/onnx_parity.py --model_dir DIR --onnx_dir ONNX --js_sentences 50 --test_file test.jsonl

Prints two Markdown tables: the whole split on ONNX Runtime (float32 and int8 graphs), and its first `--js_sentences`
pairs in transformers.js under Node (when Node.js is installed). Without `--onnx_dir` the model is exported first.
"""

import argparse

from hf_vanilla_transformer.export_parity import format_table
from hf_vanilla_transformer.onnx_parity import onnx_parity_tables


def main(argv=None) -> list[list[dict]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="a trained folder (model and tokenizer)")
    parser.add_argument("--onnx_dir", help="its export_onnx(..., quantize=True) folder (default: exported here)")
    parser.add_argument("--test_file", help="JSON Lines / TSV / CSV pairs (default: the bundled test split)")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--limit", type=int, help="only the first LIMIT pairs")
    parser.add_argument("--js_sentences", type=int, default=50, help="pairs translated by transformers.js (0: none)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="threads of each engine")
    args = parser.parse_args(argv)
    tables = onnx_parity_tables(
        args.model_dir,
        args.onnx_dir,
        args.test_file,
        args.source_lang,
        args.target_lang,
        args.limit,
        args.js_sentences,
        args.batch_size,
        args.threads,
    )
    print("\n\n".join(format_table(rows) for rows in tables))
    return tables


if __name__ == "__main__":
    main()
