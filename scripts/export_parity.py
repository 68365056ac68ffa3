#!/usr/bin/env python
"""How exactly each export reproduces a trained model: token-identical outputs and BLEU on a test split.

    python scripts/export_parity.py --model_dir outputs/demo-de-en            # the bundled test split, 1,000 pairs
    python scripts/export_parity.py --model_dir DIR --test_file test.jsonl --source_lang de --target_lang en

Prints a Markdown table: greedy and the model's own beam search (its generation config), for the model itself, the
MarianMTModel from `export_marian`, and CTranslate2 float32 / int8 exports.
"""

import argparse

from hf_vanilla_transformer.export_parity import format_table, parity_table


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="a trained folder (model and tokenizer)")
    parser.add_argument("--test_file", help="JSON Lines / TSV / CSV pairs (default: the bundled test split)")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--limit", type=int, help="only the first LIMIT pairs")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="threads of each engine (they share the process)")
    args = parser.parse_args(argv)
    rows = parity_table(
        args.model_dir, args.test_file, args.source_lang, args.target_lang, args.limit, args.batch_size, args.threads
    )
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
