"""A picture of the sinusoidal positional encoding (section 3.5) that the model adds to its embeddings.

Left: the classic position x dimension picture. Right: a few dimensions as curves over the positions, fast sines in the
first dimensions, slow ones in the last. The values come from the model's own encoding module.
"""

import torch

from ..errors import InputError
from ..model.modeling_vanilla_transformer import VanillaTransformerSinusoidalPositionalEncoding


def default_dimensions(d_model: int) -> list[int]:
    """d/16, d/16+1 (a sin/cos pair), d/8, d/4, d/2: fast, then ever slower sines."""
    return sorted(
        {d for d in (d_model // 16, d_model // 16 + 1, d_model // 8, d_model // 4, d_model // 2) if d < d_model}
    )


def plot_positional_encoding(d_model: int, positions: int = 100, dimensions: list[int] | None = None):
    """A matplotlib `Figure`: the position x dimension picture, and `dimensions` as curves over the positions."""
    if d_model < 2 or d_model % 2:
        raise InputError(f"--d_model must be an even number >= 2, got {d_model}.")
    if positions < 1:
        raise InputError(f"--positions must be at least 1, got {positions}.")
    dimensions = dimensions or default_dimensions(d_model)
    for dimension in dimensions:
        if not 0 <= dimension < d_model:
            raise InputError(f"--dimensions: {dimension} is outside [0, {d_model}) for --d_model {d_model}.")
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
