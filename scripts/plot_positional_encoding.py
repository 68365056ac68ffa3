#!/usr/bin/env python
"""Draw the sinusoidal positional encoding (section 3.5) that the model adds to its embeddings, as a PNG:

    python scripts/plot_positional_encoding.py --output docs/images/positional_encoding.png [--d_model 256]

Left: the classic position x dimension picture. Right: a few dimensions as curves over the positions, fast sines in the
first dimensions, slow ones in the last. The values come from the model's own encoding module.
"""

import argparse
from pathlib import Path

import torch

from hf_vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerSinusoidalPositionalEncoding


def plot_positional_encoding(d_model: int, positions: int, dimensions: list[int]):
    for dimension in dimensions:
        if not 0 <= dimension < d_model:
            raise ValueError(f"--dimensions: {dimension} is outside [0, {d_model}) for --d_model {d_model}.")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encoding = VanillaTransformerSinusoidalPositionalEncoding(d_model)(torch.arange(positions)[None])[0]  # (p, d)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained", width_ratios=(1.1, 1))
    image = left.imshow(encoding.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    left.set_xlabel("dimension i (sin on even, cos on odd)")
    left.set_ylabel("position")
    left.set_title(f"PE(position, i), d_model = {d_model}")
    fig.colorbar(image, ax=left, shrink=0.85)
    for dimension in dimensions:
        right.plot(encoding[:, dimension].numpy(), label=f"dimension {dimension}", linewidth=1.2)
    right.set_xlabel("position")
    right.set_title("a few dimensions over the positions")
    right.set_ylim(-1.15, 1.15)
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(dimensions), frameon=False)
    right.grid(alpha=0.3)
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, help="PNG file to write.")
    parser.add_argument("--d_model", type=int, default=256, help="Model width (the demo model's by default).")
    parser.add_argument("--positions", type=int, default=100, help="Number of positions to draw.")
    parser.add_argument(
        "--dimensions",
        type=int,
        nargs="+",
        help="Dimensions to draw as curves (default: d/16, d/16+1 (a sin/cos pair), d/8, d/4, d/2).",
    )
    args = parser.parse_args(argv)
    if args.d_model < 2 or args.d_model % 2:
        parser.error(f"--d_model must be an even number >= 2, got {args.d_model}.")
    if args.positions < 1:
        parser.error(f"--positions must be at least 1, got {args.positions}.")
    defaults = (args.d_model // 16, args.d_model // 16 + 1, args.d_model // 8, args.d_model // 4, args.d_model // 2)
    dimensions = args.dimensions or sorted({d for d in defaults if d < args.d_model})
    try:
        fig = plot_positional_encoding(args.d_model, args.positions, dimensions)
    except ValueError as error:
        parser.error(str(error))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=80)
    print(f"Wrote {output}")


if __name__ == "__main__":
    main()
