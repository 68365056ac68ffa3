"""VanillaTransformerConfig: the paper's defaults, presets, validation and serialisation."""

import ast
import dataclasses
import inspect

import pytest
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import AutoConfig, MarianConfig

from hf_vanilla_transformer import VanillaTransformerConfig, paper_generation_config
from hf_vanilla_transformer.model import input_checks, modeling_vanilla_transformer


def test_defaults_are_the_papers_base_model():
    config = VanillaTransformerConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (8, 8)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim) == (2048, 2048)
    assert config.dropout == 0.1 and config.attention_dropout == 0.0 and config.activation_dropout == 0.0
    assert config.activation_function == "relu"
    assert config.norm_first is False and config.scale_embedding is True and config.tie_word_embeddings is True
    assert config.is_encoder_decoder and config.use_cache
    assert config.stack_layer_norm is False and config.label_smoothing == 0.0


def test_stack_layer_norm_follows_norm_first_unless_set():
    assert VanillaTransformerConfig(norm_first=True).stack_layer_norm is True
    assert VanillaTransformerConfig(norm_first=False, stack_layer_norm=True).stack_layer_norm is True  # nn.Transformer


def test_big_model_is_one_call_away():
    config = VanillaTransformerConfig.from_paper("big", vocab_size=32000)
    assert (config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads, config.dropout) == (
        1024,
        4096,
        16,
        0.3,
    )
    assert config.vocab_size == 32000
    with pytest.raises(ValueError, match="size"):
        VanillaTransformerConfig.from_paper("huge")


def test_generic_attribute_names_map_to_the_seq2seq_names():
    config = VanillaTransformerConfig(d_model=64, encoder_attention_heads=4, encoder_layers=3)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 4, 3)


def test_auto_config_builds_it_by_model_type():
    config = AutoConfig.for_model("vanilla_transformer", vocab_size=8000)
    assert isinstance(config, VanillaTransformerConfig) and config.vocab_size == 8000 and config.d_model == 512


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(d_model=510), "encoder_attention_heads"),
        (dict(d_model=512, decoder_attention_heads=7), "decoder_attention_heads"),
        (dict(d_model=15, encoder_attention_heads=1, decoder_attention_heads=1), "d_model"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(encoder_layers=-1), "encoder_layers"),
        (dict(decoder_ffn_dim=0), "decoder_ffn_dim"),
        (dict(max_position_embeddings=0), "max_position_embeddings"),
        (dict(dropout=1.0), "dropout"),
        (dict(label_smoothing=1.0), "label_smoothing"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(activation_function="swishy"), "activation_function"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps"),
        (dict(init_std=-1.0), "init_std"),
        (dict(vocab_size=100, pad_token_id=100), "pad_token_id"),
        (dict(vocab_size=100, eos_token_id=[2, 150]), "eos_token_id"),
        (dict(bos_token_id=-1), "bos_token_id"),
        (dict(vocab_size=100, decoder_start_token_id=1000), "decoder_start_token_id"),
    ],
)
def test_inconsistent_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(StrictDataclassClassValidationError, match=f"VanillaTransformerConfig: `{field}` must be"):
        VanillaTransformerConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(d_model=512.0), "d_model"),
        (dict(stack_layer_norm="yes"), "stack_layer_norm"),
        (dict(layer_norm_eps=0), "layer_norm_eps"),
        (dict(init_std=None), "init_std"),
        (dict(dropout=True), "dropout"),
        (dict(classifier_pooling="max"), "classifier_pooling"),
    ],
)
def test_values_of_the_wrong_type_raise_naming_the_field(kwargs, field):
    with pytest.raises(StrictDataclassFieldValidationError, match=f"field '{field}'"):
        VanillaTransformerConfig(**kwargs)
    config = VanillaTransformerConfig()
    with pytest.raises(StrictDataclassFieldValidationError, match=f"field '{field}'"):  # on assignment too
        setattr(config, field, kwargs[field])


def test_round_trip_through_dict_and_folder(tmp_path):
    config = VanillaTransformerConfig(
        vocab_size=1234,
        d_model=64,
        encoder_attention_heads=4,
        decoder_attention_heads=2,
        norm_first=True,
        init_std=0.05,
        eos_token_id=3,
    )
    assert VanillaTransformerConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    config.save_pretrained(tmp_path)
    assert VanillaTransformerConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()


def test_generation_settings_live_in_the_generation_config():
    generation_config = paper_generation_config(VanillaTransformerConfig(vocab_size=100), num_beams=5)
    assert generation_config.num_beams == 5 and generation_config.length_penalty == 0.6
    assert generation_config.decoder_start_token_id == 1 and generation_config.pad_token_id == 0
    # At most the model's positions: generate(max_new_tokens=...) and generate(max_length=...) apply as given.
    assert generation_config.max_length == 1024 and generation_config.max_new_tokens is None


def test_the_papers_decoding_applies_to_any_seq2seq_config():
    marian = MarianConfig(vocab_size=100, pad_token_id=5, eos_token_id=6, decoder_start_token_id=5)
    generation_config = paper_generation_config(marian)
    assert (generation_config.num_beams, generation_config.length_penalty) == (4, 0.6)
    assert (generation_config.pad_token_id, generation_config.decoder_start_token_id) == (5, 5)


def test_every_config_field_is_used():
    """No dead options: each field of the config is read by the modeling code or by transformers itself."""
    read_by_transformers = {
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "use_cache",
        "is_encoder_decoder",
        "tie_word_embeddings",
        "decoder_start_token_id",
        "init_std",  # PreTrainedModel._init_weights: normal(0, init_std) linear and embedding weights
    }
    source = inspect.getsource(modeling_vanilla_transformer) + inspect.getsource(input_checks)
    attributes = {node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)}
    own_fields = set(VanillaTransformerConfig.__annotations__) & {
        f.name for f in dataclasses.fields(VanillaTransformerConfig)
    }
    unused = own_fields - attributes - read_by_transformers
    assert unused == set()
