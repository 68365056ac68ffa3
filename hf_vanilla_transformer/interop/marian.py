"""Exact conversions between this package's model and transformers' `MarianMTModel`.

Both are the post-norm Transformer of the paper with the same parameter names; they differ in one layout detail. Our
sinusoidal encoding interleaves sines and cosines (dimension 2i holds sin, 2i+1 cos, section 3.5 of the paper),
Marian's puts the d/2 sines first and the d/2 cosines after them, at the same frequencies. Reordering the model
dimension of every weight that reads or writes the residual stream (embedding and output-projection columns, LayerNorm
weights and biases, input columns of the query/key/value projections and of fc1, output rows and biases of out_proj and
fc2) turns one model into the other with the same function. Attention heads and feed-forward units are left as they
are.

Positions: ours count real tokens only, so a left-padded row sees the same positions as a right-padded one; Marian
counts from 0 at the first column, padding included. With right padding, which is what tokenizers produce, the two
agree; with left padding a converted model gives different results for the padded rows.
"""

from pathlib import Path

import torch
from transformers import MarianConfig, MarianMTModel
from transformers.utils import logging

from ..data.folders import check_output_dir, load_tokenizer, load_translation_model, writes_folder
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig, special_token_ids
from ..model.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerSinusoidalPositionalEncoding,
)


logger = logging.get_logger(__name__)

# The last module name of every parameter, by which axis carries the model dimension.
_READS_RESIDUAL = {"q_proj", "k_proj", "v_proj", "fc1", "embed_tokens", "shared", "lm_head"}  # weight columns
_WRITES_RESIDUAL = {"out_proj", "fc2"}  # weight rows and bias
_LAYER_NORMS = {"self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"}  # weight and bias
# Marian buffers that have no parameter on our side: checked, then dropped.
_MARIAN_ONLY = {"final_logits_bias", "model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
_MARIAN_LAYER_NORM_EPS = 1e-5  # MarianMTModel's nn.LayerNorm default; not configurable


def marian_permutation(d_model: int) -> torch.Tensor:
    """`index` such that a Marian hidden state is ours reordered, `hidden[..., index]`: our even (sine) dimensions,
    then our odd (cosine) dimensions. `index.argsort()` is the inverse."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _reorder_model_dimension(state_dict: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor with the model dimension reordered by `index`; the rest unchanged."""
    reordered = {}
    for name, tensor in state_dict.items():
        module, kind = name.rsplit(".", 1)
        leaf = module.rsplit(".", 1)[-1]
        if leaf in _READS_RESIDUAL:
            tensor = tensor[:, index] if kind == "weight" else tensor
        elif leaf in _WRITES_RESIDUAL or leaf in _LAYER_NORMS:
            tensor = tensor[index]
        else:
            raise ValueError(f"Cannot convert parameter {name!r}: its layout is unknown to this converter.")
        reordered[name] = tensor.contiguous()
    return reordered


def load_converted_weights(
    model: torch.nn.Module, state_dict: dict[str, torch.Tensor], ignored: set[str] = frozenset()
):
    """Load every parameter of `model` from `state_dict`; a missing, left over or misshapen one is an error. One
    matrix under several names (a tied embedding: Marian lists its aliases, this package's model only `shared`) is
    given under any of them, with the same values."""
    expected = set(model.state_dict()) - ignored
    state_dict = dict(state_dict)
    names = {}  # parameter -> the names `model` reaches it by
    for name in expected | set(state_dict):
        try:
            names.setdefault(id(model.get_parameter(name)), []).append(name)
        except AttributeError:
            continue
    for aliases in names.values():
        given = [name for name in aliases if name in state_dict]
        if any(not torch.equal(state_dict[given[0]], state_dict[name]) for name in given[1:]):
            raise ValueError(f"The converted weights give one matrix different values under {sorted(given)}.")
        value = state_dict[given[0]] if given else None
        for name in aliases:
            state_dict.pop(name, None)
            if name in expected and value is not None:
                state_dict[name] = value
    missing, unexpected = expected - set(state_dict), set(state_dict) - expected
    if missing or unexpected:
        raise ValueError(
            f"The converted weights do not fit {type(model).__name__}: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}."
        )
    model.load_state_dict(state_dict, strict=False)


# Configuration fields that mean the same in both models.
_SHARED_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "activation_function",
    "init_std",
    "scale_embedding",
    "use_cache",
)


def _shared_fields(config) -> dict:
    return {**{name: getattr(config, name) for name in _SHARED_FIELDS}, **special_token_ids(config)}


def to_marian(model: VanillaTransformerForConditionalGeneration) -> MarianMTModel:
    """The same function as a `MarianMTModel`: logits equal to float32 rounding, `generate()` token-identical.

    The generation config is carried over. What Marian cannot express raises a `ValueError` naming the setting:
    pre-norm (`norm_first=True`), a LayerNorm at the end of each stack (`stack_layer_norm=True`) and a LayerNorm
    epsilon other than 1e-5. `config.label_smoothing` (a training setting) has no Marian counterpart and is dropped.
    """
    config = model.config
    problems = {
        "norm_first": (
            config.norm_first,
            "MarianMTModel is post-norm only; pre-norm models have no Marian equivalent",
        ),
        "stack_layer_norm": (config.stack_layer_norm, "MarianMTModel has no LayerNorm at the end of its stacks"),
        "layer_norm_eps": (
            config.layer_norm_eps != _MARIAN_LAYER_NORM_EPS,
            f"MarianMTModel's LayerNorms always use eps={_MARIAN_LAYER_NORM_EPS}",
        ),
    }
    for name, (refused, reason) in problems.items():
        if refused:
            raise ValueError(
                f"Cannot convert to MarianMTModel: config.{name}={getattr(config, name)!r}, but {reason}."
            )

    marian_config = MarianConfig(
        **_shared_fields(config),
        decoder_vocab_size=config.vocab_size,
        share_encoder_decoder_embeddings=config.tie_word_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        forced_eos_token_id=None,
    )
    marian = MarianMTModel(marian_config).to(model.dtype)
    weights = _reorder_model_dimension(model.state_dict(), marian_permutation(config.d_model))
    load_converted_weights(marian, weights, ignored=_MARIAN_ONLY)
    marian.generation_config = model.generation_config.__class__.from_dict(model.generation_config.to_dict())
    if marian.generation_config.max_length is None and marian.generation_config.max_new_tokens is None:
        # Folders saved before their generation config carried the model's limit: without one MarianMTModel stops
        # at transformers' 20 tokens. Its model limit, as the Hub's Marian models have.
        marian.generation_config.max_length = config.max_position_embeddings
    return marian.train(model.training)


def _check_marian(marian: MarianMTModel):
    """Refuse, by name, what our architecture cannot express."""
    config = marian.config
    # Settings older Marian/BART checkpoints may carry (transformers keeps unknown config keys as attributes).
    for name, supported in {
        "normalize_before": False,
        "normalize_embedding": False,
        "layernorm_embedding": False,
        "add_final_layer_norm": False,
        "static_position_embeddings": True,
    }.items():
        value = getattr(config, name, supported)
        if value != supported:
            raise ValueError(
                f"Cannot convert this MarianMTModel: config.{name}={value!r} (only {supported} is supported)."
            )
    if config.decoder_vocab_size != config.vocab_size:
        raise ValueError(
            f"Cannot convert this MarianMTModel: its source and target vocabularies differ (config.vocab_size="
            f"{config.vocab_size}, config.decoder_vocab_size={config.decoder_vocab_size}); ours has one vocabulary."
        )
    if config.d_model % 2:
        raise ValueError(f"Cannot convert this MarianMTModel: config.d_model={config.d_model} is odd.")
    if marian.final_logits_bias.any():
        raise ValueError(
            "Cannot convert this MarianMTModel: its final_logits_bias is not zero, and our output projection has no "
            "bias."
        )
    positions = torch.arange(config.max_position_embeddings)
    expected = VanillaTransformerSinusoidalPositionalEncoding(config.d_model)(positions)[
        :, marian_permutation(config.d_model)
    ]
    for stack in ("encoder", "decoder"):
        table = getattr(marian.model, stack).embed_positions.weight.float()
        # Marian computes its table in float64, ours in float32: they differ by < 1e-4 up to position 5000.
        if table.shape != expected.shape or not torch.allclose(table, expected, atol=1e-3):
            raise ValueError(
                f"Cannot convert this MarianMTModel: model.{stack}.embed_positions is not the sinusoidal encoding "
                "(learned or modified positions)."
            )
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if getattr(config, name, 0):
            logger.warning(f"config.{name}={getattr(config, name)} (a training setting) has no counterpart: dropped.")


def from_marian(model_or_dir: MarianMTModel | str | Path) -> VanillaTransformerForConditionalGeneration:
    """A `MarianMTModel` (or a folder holding one) as our model: logits equal to float32 rounding, beams identical.

    Any activation, scaled or unscaled embeddings, shared or separate encoder/decoder embedding matrices (separate
    ones, or an output projection not tied to the embeddings, become `tie_word_embeddings=False`). Refused by name: a
    non-zero `final_logits_bias`, learned or modified position tables, separate source and target vocabularies, and the
    pre-norm / embedding-LayerNorm flags of older checkpoints. The generation config is carried over.
    """
    if isinstance(model_or_dir, (str, Path)):
        marian = MarianMTModel.from_pretrained(model_or_dir)
    elif isinstance(model_or_dir, MarianMTModel):
        marian = model_or_dir
    else:
        raise TypeError(f"`model_or_dir` must be a MarianMTModel or a folder, got {type(model_or_dir).__name__}.")
    _check_marian(marian)
    config = marian.config
    shared = config.share_encoder_decoder_embeddings and config.tie_word_embeddings
    ours = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig(
            **_shared_fields(config),
            layer_norm_eps=_MARIAN_LAYER_NORM_EPS,
            norm_first=False,
            stack_layer_norm=False,
            tie_word_embeddings=shared,
        )
    ).to(marian.dtype)
    # A Marian model with shared embeddings but an untied output projection still lists `model.shared`: ours, untied,
    # has no such matrix (the encoder and decoder copies carry it).
    weights = {name: w for name, w in marian.state_dict().items() if name not in _MARIAN_ONLY}
    if not shared:
        weights.pop("model.shared.weight", None)
    index = marian_permutation(config.d_model).argsort()
    load_converted_weights(ours, _reorder_model_dimension(weights, index))
    ours.generation_config = marian.generation_config.__class__.from_dict(marian.generation_config.to_dict())
    return ours.train(marian.training)


def export_marian(model_dir: str | Path, output_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the trained model in `model_dir` as a MarianMTModel folder that plain transformers loads without remote
    code: weights, config, generation config and the tokenizer."""
    check_output_dir(output_dir, overwrite)
    model = load_translation_model(model_dir, model_class=VanillaTransformerForConditionalGeneration)
    tokenizer = load_tokenizer(model_dir)
    marian = to_marian(model)
    with writes_folder(output_dir, overwrite) as folder:
        marian.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return Path(output_dir)


__all__ = ["export_marian", "from_marian", "marian_permutation", "to_marian"]
