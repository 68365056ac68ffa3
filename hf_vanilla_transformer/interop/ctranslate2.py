"""Export to CTranslate2 through its own model specification API (the route its documentation gives custom converters).

Why not `to_marian` and then CTranslate2's MarianMT converter: that loader assumes the OPUS-MT layout, drops the last
vocabulary row and starts the decoder from a zero embedding instead of `decoder_start_token_id`'s. Why our own position
table: CTranslate2's built-in sinusoid puts sines before cosines, uses the frequencies 10000^(-i/(d/2-1)) and starts at
position 1; the spec accepts any table, so the export writes `max_position_embeddings` rows of the model's own formula.
CTranslate2 adds row `step` of that table to the decoder input at step `step` (the start token is step 0) and rows
0..s-1 to the source, as our model does with right padding (tested).

A CTranslate2 model reads and writes token strings: pass `tokenizer.convert_ids_to_tokens(tokenizer(text).input_ids)`
(the tokenizer appends </s>) and turn a hypothesis back with `tokenizer.convert_tokens_to_ids`; the exported folder
holds the tokenizer files and the generation config for that, and `translate_options` maps the generation config to
`translate_batch` arguments, the paper's length limit included.
"""

from pathlib import Path

import torch
from ctranslate2.specs import common_spec, model_spec, transformer_spec
from transformers import GenerationConfig

from ..data.folders import check_output_dir, load_tokenizer, load_translation_model, writes_folder
from ..data.trained_on import token_ids
from ..data.vocabulary_map import VMAP_NAME
from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for
from ..model.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerSinusoidalPositionalEncoding,
)
from ..model.pipeline_translation import check_tokenizer_fits_model


# What CTranslate2's own transformers converter maps, by `config.activation_function`.
_ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    "gelu": common_spec.Activation.GELU,
    "gelu_python": common_spec.Activation.GELU,
    "gelu_new": common_spec.Activation.GELUTanh,
    "gelu_fast": common_spec.Activation.GELUTanh,
    "gelu_pytorch_tanh": common_spec.Activation.GELUTanh,
    "quick_gelu": common_spec.Activation.GELUSigmoid,
    "silu": common_spec.Activation.SWISH,
    "swish": common_spec.Activation.SWISH,
}
# generate() settings that change the output and that translate_options cannot map.
_UNMAPPED_GENERATION_SETTINGS = (
    "do_sample",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "exponential_decay_length_penalty",
    "encoder_no_repeat_ngram_size",
    "encoder_repetition_penalty",
    "num_beam_groups",
)
QUANTIZATIONS = model_spec.ACCEPTED_MODEL_TYPES  # int8, int8_float32, int16, float16, bfloat16, float32, ...


def vocabulary(tokenizer, vocab_size: int) -> list[str]:
    """Token strings by id, 1:1 with the model's embedding rows; rows the tokenizer does not use (a vocabulary padded
    for speed) get placeholder names."""
    tokens = [f"<unused_{token_id}>" for token_id in range(vocab_size)]
    for token, token_id in tokenizer.get_vocab().items():
        tokens[token_id] = token
    return tokens


def _set_linear(spec, *layers: torch.nn.Linear):
    """One CTranslate2 linear layer from one or more of ours, fused along the output dimension (e.g. q, k, v)."""
    spec.weight = torch.cat([layer.weight for layer in layers])
    spec.bias = torch.cat([layer.bias for layer in layers])


def _set_layer_norm(spec, layer_norm: torch.nn.LayerNorm):
    spec.gamma, spec.beta = layer_norm.weight, layer_norm.bias


def _set_stack(spec, stack, positions: torch.Tensor):
    """Embeddings, scale, positions and final LayerNorm of an encoder or decoder stack."""
    spec.scale_embeddings = float(stack.embed_scale)
    spec.position_encodings.encodings = positions
    (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = stack.embed_tokens.weight
    if stack.layer_norm is not None:
        _set_layer_norm(spec.layer_norm, stack.layer_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers):
        attention = layer.self_attn
        _set_linear(layer_spec.self_attention.linear[0], attention.q_proj, attention.k_proj, attention.v_proj)
        _set_linear(layer_spec.self_attention.linear[1], attention.out_proj)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        if hasattr(layer, "encoder_attn"):
            attention = layer.encoder_attn
            _set_linear(layer_spec.attention.linear[0], attention.q_proj)
            _set_linear(layer_spec.attention.linear[1], attention.k_proj, attention.v_proj)
            _set_linear(layer_spec.attention.linear[2], attention.out_proj)
            _set_layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
        _set_linear(layer_spec.ffn.linear_0, layer.fc1)
        _set_linear(layer_spec.ffn.linear_1, layer.fc2)
        _set_layer_norm(layer_spec.ffn.layer_norm, layer.final_layer_norm)


def ctranslate2_spec(
    model: VanillaTransformerForConditionalGeneration, tokens: list[str], unk_token: str
) -> transformer_spec.TransformerSpec:
    """The CTranslate2 specification of `model` with the vocabulary `tokens` (one string per id), validated."""
    config = model.config
    if config.activation_function not in _ACTIVATIONS:
        raise ValueError(
            f"Cannot export to CTranslate2: config.activation_function={config.activation_function!r}, but "
            f"CTranslate2 supports {sorted(_ACTIVATIONS)}."
        )
    if len(token_ids(config.eos_token_id)) > 1:
        raise ValueError(
            f"Cannot export to CTranslate2: config.eos_token_id={config.eos_token_id}, but a CTranslate2 model has "
            "one end token."
        )
    if len(tokens) != config.vocab_size or len(set(tokens)) != len(tokens):
        raise ValueError(f"`tokens` must be {config.vocab_size} distinct strings, one per token id.")
    if unk_token not in tokens:
        raise ValueError(f"The unknown token {unk_token!r} is not in the vocabulary: CTranslate2 needs one.")

    stacks = []
    for cls, layers, heads in (
        (transformer_spec.TransformerEncoderSpec, config.encoder_layers, config.encoder_attention_heads),
        (transformer_spec.TransformerDecoderSpec, config.decoder_layers, config.decoder_attention_heads),
    ):
        # CTranslate2 applies a stack's final `layer_norm` whenever the model has one (layers/transformer.cc), but its
        # spec constructors only declare it for pre-norm stacks: build as pre-norm, then set the real layout.
        stack = cls(
            layers,
            heads,
            pre_norm=True,
            no_final_norm=not config.stack_layer_norm,
            activation=_ACTIVATIONS[config.activation_function],
        )
        stack.pre_norm = config.norm_first
        stacks.append(stack)
    spec = transformer_spec.TransformerSpec(*stacks)

    positions = VanillaTransformerSinusoidalPositionalEncoding(config.d_model)(
        torch.arange(config.max_position_embeddings)
    )  # (max_position_embeddings, d)
    with torch.no_grad():
        _set_stack(spec.encoder, model.model.encoder, positions)
        _set_stack(spec.decoder, model.model.decoder, positions)
        spec.decoder.projection.weight = model.lm_head.weight

    eos_token_id = token_ids(config.eos_token_id)[0]
    bos_token_id = config.bos_token_id if config.bos_token_id is not None else config.decoder_start_token_id
    spec.config.bos_token = tokens[bos_token_id]
    spec.config.eos_token = tokens[eos_token_id]
    spec.config.unk_token = unk_token
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.validate()
    return spec


def export_ctranslate2(
    model_dir: str | Path, output_dir: str | Path, quantization: str | None = None, overwrite: bool = False
) -> Path:
    """Write the trained model in `model_dir` (weights and tokenizer) as a CTranslate2 model folder, with the tokenizer
    files and the generation config copied into it.

    `quantization`: the weight type, one of `QUANTIZATIONS` (e.g. "int8", "int8_float32", "int16", "float16"); None
    keeps float32. Refused by name: an activation CTranslate2 lacks, several end tokens, a tokenizer that does not fit
    the model or has no unknown token.
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise InputError(f"--quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}.")
    check_output_dir(output_dir, overwrite)
    model = load_translation_model(
        model_dir, model_class=VanillaTransformerForConditionalGeneration, dtype=torch.float32
    )
    tokenizer = load_tokenizer(model_dir)
    check_tokenizer_fits_model(tokenizer, model.config)
    tokens = vocabulary(tokenizer, model.config.vocab_size)
    spec = ctranslate2_spec(model, tokens, tokenizer.unk_token or "<unk>")
    if (Path(model_dir) / VMAP_NAME).is_file():  # the model's vocabulary map goes with it, as CTranslate2 reads it
        spec.register_vocabulary_mapping(str(Path(model_dir) / VMAP_NAME))
    spec.optimize(quantization=quantization)  # also stores tied matrices once
    with writes_folder(output_dir, overwrite) as folder:
        spec.save(str(folder))
        tokenizer.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
    return Path(output_dir)


def translate_options(
    generation_config: GenerationConfig,
    source_length: int | None = None,
    max_position_embeddings: int | None = None,
    **overrides,
) -> dict:
    """`ctranslate2.Translator.translate_batch` keyword arguments that decode as `generate()` does with this config,
    for a batch whose longest source has `source_length` tokens (end token included):

        options = translate_options(generation_config, max(map(len, sources)), config.max_position_embeddings)
        results = translator.translate_batch(sources, **options)

    The length limit is the config's own fixed `max_new_tokens` where it sets one, else the paper's rule that
    `translate` and the translation pipeline apply, source length + 50 new tokens within the model's positions and
    the config's `max_length` ([`max_new_tokens_for`]), for a batch whose longest source has `source_length` tokens.
    Without `source_length` (or a `max_decoding_length` override), the config's `max_length` - 1 (transformers counts
    the decoder start token, CTranslate2's `max_decoding_length` does not). Both engines divide a finished
    hypothesis' summed log-probability by its length (generated tokens, end token included) to the power
    `length_penalty`, and `early_stopping=True` (the paper's beam search) is CTranslate2's default (`patience=1`: stop
    once `num_beams` hypotheses have ended). Settings with no CTranslate2 equivalent raise a `ValueError`.
    """
    defaults = GenerationConfig._get_default_generation_params()  # what generate() uses for unset (None) fields

    def setting(name):
        value = getattr(generation_config, name, None)
        return defaults.get(name) if value is None else value

    unsupported = [name for name in _UNMAPPED_GENERATION_SETTINGS if setting(name) != defaults.get(name)]
    if setting("num_beams") > 1 and setting("early_stopping") is not True:
        unsupported.append("early_stopping")  # transformers' other stopping rules have no CTranslate2 counterpart
    if unsupported:
        raise ValueError(f"These generation settings have no CTranslate2 equivalent: {unsupported}.")
    positions = min((n for n in (max_position_embeddings, generation_config.max_length) if n), default=None)
    if generation_config.max_new_tokens is not None:
        max_decoding_length = generation_config.max_new_tokens
    elif "max_decoding_length" in overrides:
        max_decoding_length = overrides["max_decoding_length"]
    elif source_length is not None:
        max_decoding_length = max_new_tokens_for(source_length, positions)
    elif generation_config.max_length is not None:
        max_decoding_length = generation_config.max_length - 1
    else:
        raise ValueError(
            "The generation config sets no length limit, so the limit follows the source (source length + 50): pass "
            "`source_length`, the batch's longest source in tokens."
        )
    options = dict(
        beam_size=setting("num_beams"),
        length_penalty=setting("length_penalty"),
        max_decoding_length=max_decoding_length,
        min_decoding_length=setting("min_new_tokens") or max(setting("min_length") - 1, 0),
        num_hypotheses=setting("num_return_sequences"),
        no_repeat_ngram_size=setting("no_repeat_ngram_size"),
        repetition_penalty=setting("repetition_penalty"),
    )
    return {**options, **overrides}


__all__ = ["QUANTIZATIONS", "ctranslate2_spec", "export_ctranslate2", "translate_options", "vocabulary"]
