"""Import a translation model built on `torch.nn.Transformer` (the PyTorch tutorials' way) as our model, exactly.

The tutorials ("Language translation with nn.Transformer") wrap `nn.Transformer` between token embeddings multiplied
by sqrt(d_model), a `PositionalEncoding` module and a `generator` Linear layer. `nn.Transformer` itself carries no
embeddings or positions, so what this converter cannot read off the modules the caller guarantees:

- positions: the sinusoid of the paper, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)),
  counted from 0 at the first token of the source and of the target, added after the embedding scale. That is the
  tutorial's `PositionalEncoding` (sines on even, cosines on odd dimensions, `den = exp(-2i ln(10000) / d)`), the
  same layout as ours; pass its table as `positions` to have it checked. Its dropout is ours on embeddings + positions.
- embedding scale: `scale_embedding=True` when the embeddings are multiplied by sqrt(d_model) (the tutorial's
  `TokenEmbedding`), False when they are used as they are.
- attention masks at run time: the tutorial's causal `tgt_mask` and key-padding masks are what ours builds from
  `attention_mask` / `decoder_attention_mask`; with right padding the two give the same logits at real tokens.
"""

import torch
from torch import nn
from torch.nn import functional as F

from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerSinusoidalPositionalEncoding,
)
from .marian import load_converted_weights


def _activation_name(layer: nn.Module) -> str:
    activation = layer.activation
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or isinstance(activation, nn.GELU):
        return "gelu_pytorch_tanh" if getattr(activation, "approximate", "none") == "tanh" else "gelu"
    raise ValueError(
        f"Cannot import this nn.Transformer: the activation {activation!r} of its layers is not ReLU or GELU."
    )


def _check_attention(attention: nn.MultiheadAttention, name: str):
    if not attention._qkv_same_embed_dim or attention.bias_k is not None or attention.add_zero_attn:
        raise ValueError(
            f"Cannot import this nn.Transformer: {name} uses kdim/vdim, add_bias_kv or add_zero_attn, which our "
            "attention does not have."
        )


def _one(values: set, setting: str):
    if len(values) != 1:
        raise ValueError(f"Cannot import this nn.Transformer: its layers differ in {setting} ({sorted(values)}).")
    return values.pop()


def _checked_layers(encoder: nn.TransformerEncoder, decoder: nn.TransformerDecoder) -> list[nn.Module]:
    """All layers, encoder's first, once they are known to be what our layers can express."""
    for stack, cls in ((encoder.layers, nn.TransformerEncoderLayer), (decoder.layers, nn.TransformerDecoderLayer)):
        if not all(type(layer) is cls for layer in stack):
            raise ValueError(f"Cannot import this nn.Transformer: its layers must be {cls.__name__}s.")
    layers = [*encoder.layers, *decoder.layers]
    for i, layer in enumerate(layers):
        _check_attention(layer.self_attn, f"layer {i}'s self_attn")
        if hasattr(layer, "multihead_attn"):
            _check_attention(layer.multihead_attn, f"layer {i}'s multihead_attn")
    if (encoder.norm is None) != (decoder.norm is None):
        raise ValueError("Cannot import this nn.Transformer: only one of encoder.norm and decoder.norm exists.")
    return layers


def _checked_positions(positions: torch.Tensor, d_model: int) -> int:
    """The number of positions of a table that is our formula up to float32 rounding (< 1e-3 up to 5000 positions)."""
    table = positions.detach().reshape(positions.shape[0], -1).float().cpu()
    expected = VanillaTransformerSinusoidalPositionalEncoding(d_model)(torch.arange(table.shape[0]))
    if table.shape != expected.shape or not torch.allclose(table, expected, atol=1e-3):
        raise ValueError(
            "`positions` is not the interleaved sinusoid PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
            "PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) counted from 0: this model cannot be imported exactly."
        )
    return table.shape[0]


def _linear(prefix: str, weight: torch.Tensor, bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """`bias=False` layers become zero biases: the same function."""
    return {f"{prefix}.weight": weight, f"{prefix}.bias": torch.zeros(weight.shape[0]) if bias is None else bias}


def _layer_norm(prefix: str, norm: nn.LayerNorm) -> dict[str, torch.Tensor]:
    (d,) = norm.normalized_shape
    weight = norm.weight if norm.weight is not None else torch.ones(d)
    return {f"{prefix}.weight": weight, f"{prefix}.bias": norm.bias if norm.bias is not None else torch.zeros(d)}


def _attention(prefix: str, attention: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    """`in_proj_weight` (3d, d) holds the query, key and value projections stacked in that order."""
    weights = attention.in_proj_weight.chunk(3)
    biases = attention.in_proj_bias.chunk(3) if attention.in_proj_bias is not None else (None,) * 3
    state = {}
    for name, weight, bias in zip(("q_proj", "k_proj", "v_proj"), weights, biases):
        state |= _linear(f"{prefix}.{name}", weight, bias)
    return state | _linear(f"{prefix}.out_proj", attention.out_proj.weight, attention.out_proj.bias)


def _layer(prefix: str, layer: nn.Module) -> dict[str, torch.Tensor]:
    """One encoder or decoder layer under our names (norm1/norm2/norm3 follow the sublayer order)."""
    state = _attention(f"{prefix}.self_attn", layer.self_attn) | _layer_norm(
        f"{prefix}.self_attn_layer_norm", layer.norm1
    )
    if isinstance(layer, nn.TransformerDecoderLayer):
        state |= _attention(f"{prefix}.encoder_attn", layer.multihead_attn)
        state |= _layer_norm(f"{prefix}.encoder_attn_layer_norm", layer.norm2)
    state |= _linear(f"{prefix}.fc1", layer.linear1.weight, layer.linear1.bias)
    state |= _linear(f"{prefix}.fc2", layer.linear2.weight, layer.linear2.bias)
    return state | _layer_norm(f"{prefix}.final_layer_norm", layer.norm3 if hasattr(layer, "norm3") else layer.norm2)


def from_torch_transformer(
    transformer: nn.Transformer,
    embedding: nn.Embedding,
    generator: nn.Linear | None = None,
    *,
    target_embedding: nn.Embedding | None = None,
    pad_token_id: int = 0,
    bos_token_id: int | None = 1,
    eos_token_id: int = 2,
    decoder_start_token_id: int | None = None,
    scale_embedding: bool = True,
    positions: torch.Tensor | None = None,
    max_position_embeddings: int = 1024,
) -> VanillaTransformerForConditionalGeneration:
    """Our model with the same logits as `generator(transformer(emb(src), emb(tgt), ...))`.

    Args:
        transformer: an `nn.Transformer` (batch-first or not, post- or pre-norm, `bias=False` allowed) made of
            `nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`; its `encoder.norm` and `decoder.norm` become
            `config.stack_layer_norm=True` (both or neither must exist).
        embedding: the source token embeddings, and the target ones unless `target_embedding` is given (the tutorial's
            `src_tok_emb.embedding`).
        generator: the output layer (the tutorial's `generator`); `None` means logits against the target embeddings.
            Its bias must be zero: our output projection has none.
        target_embedding: separate target embeddings (the tutorial's `tgt_tok_emb.embedding`); the model then has
            `tie_word_embeddings=False`. A source vocabulary smaller than the target one is padded with zero rows
            (ids beyond it never occur in the source); a larger one is refused.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: the special ids of your vocabulary;
            decoding starts from `decoder_start_token_id` (default: `bos_token_id`).
        scale_embedding: whether the embeddings are multiplied by sqrt(d_model) (the tutorial's `TokenEmbedding`).
        positions: your positional-encoding table, `(n, d)` or the tutorial's `(n, 1, d)` buffer, to be checked
            against the formula ours computes (up to float32 rounding); it also sets `max_position_embeddings`.
        max_position_embeddings: the longest sequence the model accepts when `positions` is not given.

    The dropout probabilities are carried over (sublayer outputs and embeddings, attention weights, after the FFN
    activation) so that fine-tuning behaves the same. Refused by name: other activations, layers that differ from each
    other, `kdim`/`vdim`/`add_bias_kv`/`add_zero_attn` attention, a non-zero generator bias, mismatched sizes.
    """
    encoder, decoder = transformer.encoder, transformer.decoder
    layers = _checked_layers(encoder, decoder)
    norms = [m for layer in layers for m in layer.modules() if isinstance(m, nn.LayerNorm)]
    norms += [norm for norm in (encoder.norm, decoder.norm) if norm is not None]

    target_embedding = target_embedding if target_embedding is not None else embedding
    output_weight = generator.weight if generator is not None else target_embedding.weight
    d_model = layers[0].linear1.in_features
    if generator is not None and generator.bias is not None and generator.bias.any():
        raise ValueError(
            "Cannot import this model: the generator's bias is not zero, and our output projection has none."
        )
    if embedding.embedding_dim != d_model or target_embedding.embedding_dim != d_model:
        raise ValueError(f"The embeddings must have embedding_dim = d_model = {d_model}.")
    vocab_size = target_embedding.num_embeddings
    if output_weight.shape != (vocab_size, d_model):
        raise ValueError(
            f"The generator must map d_model={d_model} to the {vocab_size} target tokens, "
            f"got {tuple(output_weight.shape)}."
        )
    if embedding.num_embeddings > vocab_size:
        raise ValueError(
            f"The source vocabulary ({embedding.num_embeddings}) is larger than the target vocabulary ({vocab_size}): "
            "ours has one vocabulary size, and padding the target side would change the output distribution."
        )
    if positions is not None:
        max_position_embeddings = _checked_positions(positions, d_model)

    tied = generator is None or generator.weight is target_embedding.weight
    tied = tied and target_embedding is embedding
    config = VanillaTransformerConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=len(encoder.layers),
        decoder_layers=len(decoder.layers),
        encoder_attention_heads=_one({layer.self_attn.num_heads for layer in encoder.layers}, "encoder heads"),
        decoder_attention_heads=_one({layer.self_attn.num_heads for layer in decoder.layers}, "decoder heads"),
        encoder_ffn_dim=_one({layer.linear1.out_features for layer in encoder.layers}, "encoder FFN width"),
        decoder_ffn_dim=_one({layer.linear1.out_features for layer in decoder.layers}, "decoder FFN width"),
        max_position_embeddings=max_position_embeddings,
        dropout=_one({layer.dropout1.p for layer in layers}, "dropout"),
        attention_dropout=_one({layer.self_attn.dropout for layer in layers}, "attention dropout"),
        activation_dropout=_one({layer.dropout.p for layer in layers}, "activation dropout"),
        activation_function=_one({_activation_name(layer) for layer in layers}, "activation"),
        layer_norm_eps=_one({norm.eps for norm in norms}, "LayerNorm eps"),
        scale_embedding=scale_embedding,
        norm_first=_one({layer.norm_first for layer in layers}, "norm_first"),
        stack_layer_norm=encoder.norm is not None,
        tie_word_embeddings=tied,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        decoder_start_token_id=decoder_start_token_id if decoder_start_token_id is not None else bos_token_id,
    )
    model = VanillaTransformerForConditionalGeneration(config)

    with torch.no_grad():
        source = torch.zeros(vocab_size, d_model, dtype=embedding.weight.dtype)
        source[: embedding.num_embeddings] = embedding.weight
        state = {
            "model.encoder.embed_tokens.weight": source,
            "model.decoder.embed_tokens.weight": target_embedding.weight,
            "lm_head.weight": output_weight,
        }
        if tied:
            state["model.shared.weight"] = source
        for stack_name, stack in (("encoder", encoder), ("decoder", decoder)):
            for i, layer in enumerate(stack.layers):
                state |= _layer(f"model.{stack_name}.layers.{i}", layer)
            if stack.norm is not None:
                state |= _layer_norm(f"model.{stack_name}.layer_norm", stack.norm)
        load_converted_weights(model, {name: weight.detach().cpu().float() for name, weight in state.items()})
    return model.train(transformer.training)


__all__ = ["from_torch_transformer"]
