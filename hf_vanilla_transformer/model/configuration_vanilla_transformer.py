# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

import copy
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import GenerationConfig, PreTrainedConfig
from transformers.activations import ACT2FN


# Table 3 of the paper: N = 6 layers per stack, and per size d_model, d_ff, h, P_drop. "base" is the config's default.
PAPER_PRESETS = {
    size: dict(d_model=d_model, dropout=p_drop, encoder_layers=6, decoder_layers=6)
    | dict(encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff, encoder_attention_heads=h, decoder_attention_heads=h)
    for size, (d_model, d_ff, h, p_drop) in {"base": (512, 2048, 8, 0.1), "big": (1024, 4096, 16, 0.3)}.items()
}


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    The Transformer of "Attention Is All You Need"; the defaults are the paper's base model, and
    `VanillaTransformerConfig.from_paper("big", vocab_size=...)` gives the big one. Fields are named as in BART and
    Marian; one vocabulary serves source and target (the paper's shared BPE). What theirs do not say:

    - `max_position_embeddings`: a limit, not a table size (positions come from the sinusoid formula).
    - `dropout`: the paper's P_drop, on each sublayer output before the residual add and on the sum of embeddings and
      positional encodings. `attention_dropout` and `activation_dropout` (0.0) are not in the paper.
    - `scale_embedding`, `tie_word_embeddings`: section 3.4, embeddings times sqrt(d_model) and one matrix for both
      embeddings and the output projection (`False`: three).
    - `norm_first`: `False` is the paper's post-norm (section 5.4), `True` the pre-norm.
    - `stack_layer_norm`: a LayerNorm ending each stack; defaults to `norm_first` (pre-norm stacks need it).
    - `init_std`: normal init of every linear and embedding weight, as in BART (the paper names none).
    - `label_smoothing`: of the loss computed from `labels` (section 5.4 uses 0.1), so that every trainer gets it.
    - `is_encoder_decoder=False`: the decoder stack alone, without cross-attention, for
      [`VanillaTransformerForCausalLM`] (which also takes the encoder-decoder config).
    - `classifier_pooling`: what the classifier reads, the mean of the real tokens' final states or the first one's.
    """

    model_type = "vanilla_transformer"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    max_position_embeddings: int = 1024
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True
    norm_first: bool = False
    stack_layer_norm: bool | None = None
    init_std: float = 0.02
    label_smoothing: float | int = 0.0
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    use_cache: bool = True
    is_encoder_decoder: bool = True
    classifier_pooling: Literal["mean", "first"] = "mean"

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        # Saved folders name their pipeline in `custom_pipelines`, which processes without this package load as remote
        # code. transformers reads it before its pipeline registry, so the entries the registry already serves with
        # the class of that name are dropped: local code wins, as for the model classes, and needs no trust.
        from transformers.pipelines import PIPELINE_REGISTRY

        class_name = lambda impl: getattr(impl, "__name__", str(impl)).rsplit(".", 1)[-1]  # noqa: E731 (class or path)
        custom = config_dict.get("custom_pipelines") or {}
        served = {task: class_name(entry.get("impl")) for task, entry in PIPELINE_REGISTRY.supported_tasks.items()}
        remote = {task: entry for task, entry in custom.items() if served.get(task) != class_name(entry.get("impl"))}
        if remote != custom:
            config_dict = {key: value for key, value in config_dict.items() if key != "custom_pipelines"}
            config_dict.update({"custom_pipelines": remote} if remote else {})
        return super().from_dict(config_dict, **kwargs)

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.stack_layer_norm is None:
            self.stack_layer_norm = self.norm_first

    def validate_architecture(self):
        """Part of `@strict`-powered validation (the field types are checked on assignment): the values that fit."""
        heads = ("encoder_attention_heads", "decoder_attention_heads")
        sizes = ("vocab_size", "d_model", "max_position_embeddings", *heads)
        sizes += tuple(f"{stack}_{size}" for stack in ("encoder", "decoder") for size in ("layers", "ffn_dim"))
        probabilities = ("dropout", "attention_dropout", "activation_dropout", "label_smoothing")
        token_id = f"None or a token id in [0, vocab_size={self.vocab_size})"
        rules = [(name, lambda v: v > 0, "a positive integer") for name in sizes]
        rules += [("d_model", lambda v: v % 2 == 0, "even (the sinusoidal encoding pairs sin and cos dimensions)")]
        rules += [(name, lambda v: self.d_model % v == 0, f"a divisor of d_model={self.d_model}") for name in heads]
        rules += [(name, lambda v: 0 <= v < 1, "a probability in [0, 1)") for name in probabilities]
        rules += [(name, lambda v: v > 0, "a positive number") for name in ("layer_norm_eps", "init_std")]
        rules += [("activation_function", lambda v: v in ACT2FN, f"one of {sorted(ACT2FN)}")]
        in_vocabulary = lambda ids: all(i is None or 0 <= i < self.vocab_size for i in ids)  # noqa: E731
        rules += [(name, in_vocabulary, token_id) for name in SPECIAL_TOKEN_IDS]
        for name, fits, expected in rules:
            value = getattr(self, name)
            if not fits(value if name not in SPECIAL_TOKEN_IDS or isinstance(value, list) else [value]):
                raise ValueError(f"VanillaTransformerConfig: `{name}` must be {expected}, got {value!r}.")

    def get_text_config(self, decoder=None, encoder=None) -> "VanillaTransformerConfig":
        """Caches read the generic sizes (`num_hidden_layers`, ...) from `decoder=True`, and they name the encoder's: a
        decoder-only config answers with a copy holding its decoder's; otherwise the config itself."""
        if self.is_encoder_decoder or not decoder:
            return super().get_text_config(decoder=decoder, encoder=encoder)
        decoder_sizes = copy.deepcopy(self)
        for size in ("layers", "attention_heads", "ffn_dim"):
            setattr(decoder_sizes, f"encoder_{size}", getattr(self, f"decoder_{size}"))
        return decoder_sizes

    @classmethod
    def from_paper(cls, size: str = "base", **kwargs) -> "VanillaTransformerConfig":
        """The paper's `"base"` or `"big"` model (Table 3); keyword arguments override any field, e.g. `vocab_size`."""
        if size not in PAPER_PRESETS:
            raise ValueError(f"`size` must be one of {sorted(PAPER_PRESETS)}, got {size!r}.")
        return cls(**{**PAPER_PRESETS[size], **kwargs})

    def paper_generation_config(self, **kwargs) -> GenerationConfig:
        """[`paper_generation_config`] for this config."""
        return paper_generation_config(self, **kwargs)


# The paper's length limit (section 6.1): "maximum output length [to] input length + 50". As fairseq's
# --max-len-a/--max-len-b: a x source tokens + b.
MAX_LEN_A, MAX_LEN_B = 1, 50


def max_new_tokens_for(source_length: int, max_position_embeddings=None, max_len_a=MAX_LEN_A, max_len_b=MAX_LEN_B):
    """The most tokens to generate for a source of `source_length` tokens (EOS included; for a batch, its padded
    length): `max_len_a` x `source_length` + `max_len_b`, within the target positions of a model with
    `max_position_embeddings` (the decoder start token takes one). The one owner of the paper's length rule."""
    limit = int(max_len_a * source_length + max_len_b)
    return limit if max_position_embeddings is None else min(limit, max_position_embeddings - 1)


def target_positions(config: PreTrainedConfig | None, generation_config: GenerationConfig | None = None) -> int | None:
    """The most target positions a model generates, the decoder start token included: its `max_position_embeddings`
    and its generation config's `max_length`, where set (None: no limit known)."""
    limits = (getattr(config, "max_position_embeddings", None), getattr(generation_config, "max_length", None))
    return min((n for n in limits if n), default=None)


SPECIAL_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


def special_token_ids(config: PreTrainedConfig) -> dict:
    """The special token ids of a configuration, to carry into another configuration or a generation config."""
    return {name: getattr(config, name, None) for name in SPECIAL_TOKEN_IDS}


def paper_generation_config(config: PreTrainedConfig, **kwargs) -> GenerationConfig:
    """The paper's decoding (section 6.1) for any seq2seq `config`'s special tokens: beam size 4, length penalty 0.6,
    stop when all beams have ended; keyword arguments override any setting. The paper's source length + 50
    ([`max_new_tokens_for`]) depends on each source: the translation pipeline and `translate` apply it."""
    settings = dict(num_beams=4, length_penalty=0.6, early_stopping=True)
    if getattr(config, "max_position_embeddings", None):  # at most the model's positions
        settings["max_length"] = config.max_position_embeddings
    return GenerationConfig(**special_token_ids(config), **{**settings, **kwargs})


__all__ = ["MAX_LEN_A", "MAX_LEN_B", "VanillaTransformerConfig", "max_new_tokens_for"]
__all__ += ["paper_generation_config", "special_token_ids", "target_positions"]
