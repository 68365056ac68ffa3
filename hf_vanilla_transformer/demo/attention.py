"""What the attention heads look at when the model translates a sentence: the weights, and heatmaps of them.

`attention_maps` translates a text with `generate()` and then runs one forward pass over the generated translation with
eager attention, the only implementation that returns weights. `plot_attention` and `plot_attention_grid` draw them
with the tokens on the axes. The Gradio demo and `hf-vanilla-transformer plot attention` use these functions.

Shapes: L layers, h heads, s source tokens, t target tokens.
"""

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.folders import check_output_dir, load_tokenizer, load_translation_model, writes_folder
from ..data.trained_on import token_ids
from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from ..model.pipeline_translation import max_source_length


# kind -> (attribute, title, query tokens, key tokens, axis labels (queries, keys))
ATTENTION_KINDS = {
    "encoder": (
        "encoder_attentions",
        "encoder self-attention",
        "source_tokens",
        "source_tokens",
        ("source token", "attends to source token"),
    ),
    "decoder": (
        "decoder_attentions",
        "decoder self-attention",
        "target_tokens",
        "decoder_input_tokens",
        ("while producing", "attends to decoder input"),
    ),
    "cross": (
        "cross_attentions",
        "cross-attention",
        "target_tokens",
        "source_tokens",
        ("while producing", "attends to source token"),
    ),
}


@dataclass
class AttentionMaps:
    """Attention weights of one translation; every row is a probability distribution over the keys.

    Row i of the decoder and cross-attention maps is the step that produced `target_tokens[i]`: its query is the
    decoder input `decoder_input_tokens[i]` (the decoder start token, then the translation shifted right).
    """

    source_tokens: list[str]  # s, ending with the end-of-sequence token
    target_tokens: list[str]  # t, the generated tokens (ending with the end-of-sequence token unless cut short)
    decoder_input_tokens: list[str]  # t
    translation: str  # the best hypothesis, the one the maps belong to
    n_best: list[str]  # every returned hypothesis, best first for beam search
    encoder_attentions: torch.Tensor  # (L, h, s, s)
    decoder_attentions: torch.Tensor  # (L, h, t, t)
    cross_attentions: torch.Tensor  # (L, h, t, s)

    def select(self, kind: str, layer: int | None = None, head: int | None = None):
        """One map as (weights (queries, keys), query tokens, key tokens); `None` averages over layers or heads.

        Layers and heads count from 0.
        """
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"`kind` must be one of {sorted(ATTENTION_KINDS)}, got {kind!r}.")
        attribute, _, queries, keys, _ = ATTENTION_KINDS[kind]
        weights = getattr(self, attribute)
        for name, index, size in (("layer", layer, weights.shape[0]), ("head", head, weights.shape[1])):
            if index is not None and not 0 <= index < size:
                raise ValueError(f"`{name}` must be in [0, {size}) or None (the average), got {index}.")
        weights = weights.mean(0) if layer is None else weights[layer]
        weights = weights.mean(0) if head is None else weights[head]
        return weights, getattr(self, queries), getattr(self, keys)


@contextlib.contextmanager
def eager_attention(model):
    """Run `model` with eager attention inside the block and restore its implementation afterwards.

    It switches the model in place: do not use the same model from another thread meanwhile.
    """
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)


@torch.no_grad()
def attention_maps(model, tokenizer, text: str, **generate_kwargs) -> AttentionMaps:
    """Translate `text` and return the attention weights of every layer and head for the best translation.

    `generate_kwargs` go to `model.generate` (`num_beams`, `num_return_sequences`, `max_new_tokens`, ...). The model
    runs in eval mode with eager attention for the weights; its mode and attention implementation are restored.
    """
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise ValueError("`text` is empty: give a sentence to translate.")
    inputs = tokenizer(text, return_tensors="pt", return_token_type_ids=False).to(model.device)
    length, limit = inputs["input_ids"].shape[1], max_source_length(tokenizer, model.config)
    if limit is not None and length > limit:
        raise ValueError(f"`text` has {length} tokens but the model accepts at most {limit}: shorten it.")
    if not {"max_length", "max_new_tokens"} & {*model.generation_config.to_diff_dict(), *generate_kwargs}:
        # Neither the call nor the model sets a length: the paper's source length + 50 (transformers' default of 20
        # tokens would cut longer translations of models other than ours short).
        generate_kwargs["max_new_tokens"] = max_new_tokens_for(length, model.config.max_position_embeddings)

    was_training = model.training
    model.eval()
    try:
        sequences = model.generate(**inputs, **generate_kwargs)  # (n, 1 + generated), decoder start token first
        best = _trim(sequences[0], model.generation_config)
        with eager_attention(model):
            outputs = model(**inputs, decoder_input_ids=best[None, :-1], output_attentions=True)
    finally:
        model.train(was_training)

    def stack(maps):  # L x (1, h, q, k) -> (L, h, q, k)
        return torch.cat(maps).float().cpu()

    return AttentionMaps(
        source_tokens=tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist()),
        target_tokens=tokenizer.convert_ids_to_tokens(best[1:].tolist()),
        decoder_input_tokens=tokenizer.convert_ids_to_tokens(best[:-1].tolist()),
        translation=tokenizer.decode(best, skip_special_tokens=True),
        n_best=tokenizer.batch_decode(sequences, skip_special_tokens=True),
        encoder_attentions=stack(outputs.encoder_attentions),
        decoder_attentions=stack(outputs.decoder_attentions),
        cross_attentions=stack(outputs.cross_attentions),
    )


def _trim(sequence: torch.Tensor, generation_config) -> torch.Tensor:
    """A generated sequence up to and including its first end-of-sequence token, without the padding after it."""
    eos = generation_config.eos_token_id
    eos = token_ids(eos)
    ends = torch.isin(sequence[1:], torch.tensor(eos, device=sequence.device)).nonzero()
    if len(ends):
        return sequence[: int(ends[0]) + 2]
    pad = generation_config.pad_token_id
    if pad is not None:
        while len(sequence) > 2 and sequence[-1] == pad:
            sequence = sequence[:-1]
    return sequence


def _draw(ax, weights: torch.Tensor, queries: list[str], keys: list[str], title: str, labels: bool = True):
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(keys)))
    ax.set_yticks(range(len(queries)))
    ax.set_xticklabels(keys if labels else [], rotation=90, fontsize=8)
    ax.set_yticklabels(queries if labels else [], fontsize=8)
    ax.tick_params(length=0)
    return image


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files and images only, no display needed
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, target, dpi: int = 90):
    """Write a figure as PNG to a path or a binary file object, and free it."""
    fig.savefig(target, format="png", dpi=dpi)
    _pyplot().close(fig)


def plot_attention(maps: AttentionMaps, kind: str = "cross", layer: int | None = None, head: int | None = None):
    """One heatmap (a matplotlib `Figure`): queries down, keys across, tokens on the axes.

    `kind` is "encoder", "decoder" or "cross"; `layer`/`head` count from 0, `None` averages.
    """
    weights, queries, keys = maps.select(kind, layer, head)
    plt = _pyplot()
    size = (max(4.0, 1.4 + 0.32 * len(keys)), max(3.0, 1.2 + 0.3 * len(queries)))
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    chosen = [f"{name} {index + 1}" for name, index in (("layer", layer), ("head", head)) if index is not None]
    averaged = [f"{name}s" for name, index in (("layer", layer), ("head", head)) if index is None]
    where = ", ".join(chosen + ([f"averaged over {' and '.join(averaged)}"] if averaged else []))
    image = _draw(ax, weights, queries, keys, f"{ATTENTION_KINDS[kind][1]}\n{where}")
    ax.set_ylabel(ATTENTION_KINDS[kind][4][0], fontsize=8)
    ax.set_xlabel(ATTENTION_KINDS[kind][4][1], fontsize=8)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_attention_grid(maps: AttentionMaps, kind: str = "cross"):
    """Every layer (rows) and head (columns) of one kind of attention in one `Figure`."""
    weights = getattr(maps, ATTENTION_KINDS[kind][0])
    num_layers, num_heads = weights.shape[:2]
    _, queries, keys = maps.select(kind, 0, 0)
    plt = _pyplot()
    cell = (max(2.2, 0.7 + 0.22 * len(keys)), max(1.8, 0.6 + 0.2 * len(queries)))
    fig, axes = plt.subplots(
        num_layers,
        num_heads,
        figsize=(cell[0] * num_heads, cell[1] * num_layers),
        squeeze=False,
        layout="constrained",
    )
    for layer in range(num_layers):
        for head in range(num_heads):
            title = f"layer {layer + 1}, head {head + 1}"
            # Token labels on the left column and the bottom row only, as in the usual attention-grid pictures.
            ax = axes[layer, head]
            _draw(ax, maps.select(kind, layer, head)[0], queries, keys, title)
            if head > 0:
                ax.set_yticklabels([])
            if layer < num_layers - 1:
                ax.set_xticklabels([])
    fig.suptitle(f"{ATTENTION_KINDS[kind][1]}: every layer and head", fontsize=11)
    return fig


def write_attention_pictures(
    model_dir: str, text: str, output_dir, num_beams: int | None = None, dpi: int = 90, overwrite: bool = False
) -> tuple[str, list[Path]]:
    """Translate `text` with the model in `model_dir` and write, for each kind of attention, every layer and head
    (`<kind>_attention.png`) and their average (`<kind>_attention_average.png`) into `output_dir`.

    Returns the translation and the files written.
    """
    check_output_dir(output_dir, overwrite)
    model = load_translation_model(model_dir)
    tokenizer = load_tokenizer(model_dir)
    try:
        maps = attention_maps(model, tokenizer, text, **({} if num_beams is None else {"num_beams": num_beams}))
    except (TypeError, ValueError) as error:
        raise InputError(f"--text: {error}") from None
    pictures = [
        (f"{kind}_attention{end}.png", kind, draw)
        for kind in ATTENTION_KINDS
        for end, draw in (("", plot_attention_grid), ("_average", plot_attention))
    ]
    with writes_folder(output_dir, overwrite) as folder:
        for name, kind, draw in pictures:
            save_figure(draw(maps, kind), folder / name, dpi=dpi)
    return maps.translation, [Path(output_dir) / name for name, _, _ in pictures]


__all__ = [
    "ATTENTION_KINDS",
    "AttentionMaps",
    "attention_maps",
    "eager_attention",
    "plot_attention",
    "plot_attention_grid",
    "save_figure",
    "write_attention_pictures",
]
