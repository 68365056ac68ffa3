"""Model sizes, and the one place that turns them into a configuration: of this package's model, or of transformers'
`MarianMTModel` with the same architecture (the reference of the benchmarks and of `--architecture marian`)."""

from transformers import MarianConfig, PreTrainedConfig

from .configuration_vanilla_transformer import VanillaTransformerConfig


# The bundled demo's model: 7.6M parameters with its shared vocabulary of 8,000.
DEMO_SIZES = dict(d_model=256, layers=3, heads=4, ffn_dim=1024)
ARCHITECTURES = ("vanilla", "marian")


def expand_sizes(d_model: int, layers: int | tuple[int, int], heads: int, ffn_dim: int) -> dict:
    """The configuration fields of a model `d_model` wide with `layers` per stack (or `(encoder, decoder)` layers),
    `heads` attention heads and feed-forward width `ffn_dim` in every layer."""
    encoder_layers, decoder_layers = layers if isinstance(layers, tuple) else (layers, layers)
    return dict(
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
    )


def model_config_for(architecture: str = "vanilla", **fields) -> PreTrainedConfig:
    """A `VanillaTransformerConfig` (`"vanilla"`) or a `MarianConfig` (`"marian"`) with `fields` (sizes from
    [`expand_sizes`], vocabulary, special tokens, dropout...).

    MarianMTModel then has this package's architecture: sinusoidal positions, post-norm, ReLU, one embedding matrix
    scaled by sqrt(d_model) and shared by source, target and output, no dropout on attention or activations, and no
    forced end-of-sequence token (our models end sentences themselves).
    """
    if architecture == "vanilla":
        return VanillaTransformerConfig(**fields)
    if architecture == "marian":
        same_architecture = dict(
            activation_function="relu",
            scale_embedding=True,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            attention_dropout=0.0,
            activation_dropout=0.0,
            forced_eos_token_id=None,
        )
        return MarianConfig(**{**same_architecture, **fields})
    raise ValueError(f"`architecture` must be one of {ARCHITECTURES}, got {architecture!r}.")


__all__ = ["ARCHITECTURES", "DEMO_SIZES", "expand_sizes", "model_config_for"]
