#!/usr/bin/env python
"""Draw what the attention heads of a trained model look at when it translates a sentence, as PNG files:

    python scripts/plot_attention.py --model_dir outputs/demo-de-en --text "Wo ist der Bahnhof?" --output_dir attention

For each of encoder self-attention, decoder self-attention and cross-attention it writes `<kind>_attention.png` (every
layer and head) and `<kind>_attention_average.png` (averaged over layers and heads), tokens on the axes.
"""

import argparse
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_vanilla_transformer  # noqa: F401  (registers the model with the Auto classes)
from hf_vanilla_transformer.attention_maps import (
    ATTENTION_KINDS,
    attention_maps,
    plot_attention,
    plot_attention_grid,
    save_figure,
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="A trained model folder (or Hub id) with its tokenizer.")
    parser.add_argument("--text", required=True, help="The sentence to translate.")
    parser.add_argument("--output_dir", required=True, help="Folder for the PNG files.")
    parser.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the model's own setting).")
    parser.add_argument("--dpi", type=int, default=90)
    args = parser.parse_args(argv)

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir)
    generate_kwargs = {} if args.num_beams is None else {"num_beams": args.num_beams}
    try:
        maps = attention_maps(model, tokenizer, args.text, **generate_kwargs)
    except (TypeError, ValueError) as error:
        parser.error(f"--text: {error}")

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    print(f"{args.text}\n  -> {maps.translation}")
    for kind in ATTENTION_KINDS:
        for name, draw in (
            (f"{kind}_attention.png", plot_attention_grid),
            (f"{kind}_attention_average.png", plot_attention),
        ):
            save_figure(draw(maps, kind), output_dir / name, dpi=args.dpi)
            print(f"Wrote {output_dir / name}")


if __name__ == "__main__":
    main()
