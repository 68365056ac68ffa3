# Copyright 2026 The hf_vanilla_transformer authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

import copy

from transformers import GenerationConfig, PreTrainedConfig
from transformers.activations import ACT2FN

from .saved_folder import SavedFolderConfigMixin


# Table 3 of the paper. "base" is also the config's default.
PAPER_PRESETS = {
    "base": dict(
        d_model=512,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_layers=6,
        decoder_layers=6,
        dropout=0.1,
    ),
    "big": dict(
        d_model=1024,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_layers=6,
        decoder_layers=6,
        dropout=0.3,
    ),
}


class VanillaTransformerConfig(SavedFolderConfigMixin, PreTrainedConfig):
    r"""
    Configuration of [`VanillaTransformerModel`] and [`VanillaTransformerForConditionalGeneration`]. The defaults are the
    paper's base model; `VanillaTransformerConfig.from_paper("big", vocab_size=...)` gives the big one.

    Args:
        vocab_size (`int`, defaults to 37000):
            Size of the vocabulary shared by source and target (the paper's 37k shared BPE for English-German).
        d_model (`int`, defaults to 512):
            Width of the embeddings and of every sublayer output.
        encoder_layers / decoder_layers (`int`, defaults to 6):
            Number of layers in each stack.
        encoder_attention_heads / decoder_attention_heads (`int`, defaults to 8):
            Attention heads per layer; `d_model` must be divisible by them.
        encoder_ffn_dim / decoder_ffn_dim (`int`, defaults to 2048):
            Inner width of the position-wise feed-forward networks.
        max_position_embeddings (`int`, defaults to 1024):
            Longest source or target sequence the model accepts. Positions are computed by the sinusoid formula, so this
            is a limit, not a table size: longer inputs raise a `ValueError` instead of an index error.
        dropout (`float`, defaults to 0.1):
            The paper's P_drop: applied to each sublayer output before the residual add, and to the sum of embeddings
            and positional encodings.
        attention_dropout (`float`, defaults to 0.0):
            Dropout on attention probabilities (not in the paper).
        activation_dropout (`float`, defaults to 0.0):
            Dropout after the feed-forward activation (not in the paper).
        activation_function (`str`, defaults to `"relu"`):
            Feed-forward activation, any key of `transformers.activations.ACT2FN`.
        layer_norm_eps (`float`, defaults to 1e-5):
            Epsilon of every LayerNorm.
        scale_embedding (`bool`, defaults to `True`):
            Multiply token embeddings by sqrt(d_model) before adding positional encodings (section 3.4).
        norm_first (`bool`, defaults to `False`):
            `False` is the paper's post-norm `LayerNorm(x + Dropout(Sublayer(x)))`; `True` is pre-norm
            `x + Dropout(Sublayer(LayerNorm(x)))`.
        stack_layer_norm (`bool`, *optional*):
            Whether each stack (encoder, decoder) ends with a LayerNorm on its output. Defaults to `norm_first`: pre-norm
            stacks need it and the paper's post-norm has none. `torch.nn.Transformer` has it in both modes.
        init_std (`float`, defaults to 0.02):
            Standard deviation of the normal init of every linear and embedding weight (biases start at 0, LayerNorms
            at identity), as in BART and Marian. The paper does not specify an init; on the bundled demo this trains
            faster than tensor2tensor's Xavier-uniform layers with d_model**-0.5 embeddings.
        label_smoothing (`float`, defaults to 0.0):
            Label smoothing of the loss the model computes when given `labels` (section 5.4 of the paper uses 0.1). A
            training setting like `dropout`, kept in the config so that every trainer (`Seq2SeqTrainer`, transformers'
            `run_translation.py`, a custom loop) gets the same loss.
        tie_word_embeddings (`bool`, defaults to `True`):
            Share one matrix between source embeddings, target embeddings and the output projection (section 3.4).
            `False` gives three independent matrices.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id (`int`):
            Special token ids; they must lie inside the vocabulary. Decoding starts from `decoder_start_token_id`.
        use_cache (`bool`, defaults to `True`):
            Whether the decoder returns a key/value cache for fast generation.
        is_encoder_decoder (`bool`, defaults to `True`):
            The paper's encoder-decoder. `False` is the decoder stack alone, without cross-attention, for
            [`VanillaTransformerForCausalLM`] (GPT-style language modelling); it is sized by the `decoder_*` fields.
            [`VanillaTransformerForSequenceClassification`] uses the encoder stack (`encoder_*` fields) either way.
        classifier_pooling (`str`, defaults to `"mean"`):
            How [`VanillaTransformerForSequenceClassification`] summarises a sequence for its classifier: `"mean"` of
            the real tokens' final states, or the `"first"` real token's (a BERT-style `[CLS]` position).
    """

    model_type = "vanilla_transformer"
    keys_to_ignore_at_inference = ["past_key_values"]
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
    classifier_pooling: str = "mean"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.stack_layer_norm is None:
            self.stack_layer_norm = self.norm_first
        self._check_values()

    def _check_values(self):
        def fail(name, expected):
            raise ValueError(f"VanillaTransformerConfig: `{name}` must be {expected}, got {getattr(self, name)!r}.")

        def is_int(value):
            return isinstance(value, int) and not isinstance(value, bool)

        for name in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            if not is_int(getattr(self, name)) or getattr(self, name) <= 0:
                fail(name, "a positive integer")
        if self.d_model % 2:
            fail("d_model", "even (the sinusoidal encoding pairs sin and cos dimensions)")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                fail(name, f"a divisor of d_model={self.d_model}")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                fail(name, "a probability in [0, 1)")
        flags = (
            "scale_embedding",
            "norm_first",
            "stack_layer_norm",
            "tie_word_embeddings",
            "use_cache",
            "is_encoder_decoder",
        )
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                fail(name, "True or False")
        if self.classifier_pooling not in ("mean", "first"):
            fail("classifier_pooling", '"mean" or "first"')
        if self.activation_function not in ACT2FN:
            fail("activation_function", f"one of {sorted(ACT2FN)}")
        if (
            isinstance(self.layer_norm_eps, bool)
            or not isinstance(self.layer_norm_eps, (int, float))
            or self.layer_norm_eps <= 0
        ):
            fail("layer_norm_eps", "a positive number")
        if isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)) or self.init_std <= 0:
            fail("init_std", "a positive number")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            ids = getattr(self, name)
            for token_id in ids if isinstance(ids, (list, tuple)) else [ids]:
                if token_id is not None and (not is_int(token_id) or not 0 <= token_id < self.vocab_size):
                    fail(name, f"None or a token id in [0, vocab_size={self.vocab_size})")

    def get_text_config(self, decoder=None, encoder=None) -> "VanillaTransformerConfig":
        """Caches read the generic sizes (`num_hidden_layers`, `num_attention_heads`) from `decoder=True`, and they name
        the encoder's; a decoder-only config answers that with a copy holding its decoder's. Otherwise the config
        itself, which callers such as `resize_token_embeddings` update."""
        if self.is_encoder_decoder or not decoder:
            return super().get_text_config(decoder=decoder, encoder=encoder)
        decoder_sizes = copy.deepcopy(self)
        decoder_sizes.encoder_layers = self.decoder_layers
        decoder_sizes.encoder_attention_heads = self.decoder_attention_heads
        decoder_sizes.encoder_ffn_dim = self.decoder_ffn_dim
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


def max_new_tokens_for(
    source_length: int,
    max_position_embeddings: int | None = None,
    max_len_a: float = MAX_LEN_A,
    max_len_b: int = MAX_LEN_B,
) -> int:
    """The most tokens to generate for a source of `source_length` tokens (EOS included; for a batch, its padded
    length): `max_len_a` x `source_length` + `max_len_b`, within the target positions of a model with
    `max_position_embeddings` (the decoder start token takes one of them).

    The one owner of the paper's length rule: `generate()`, the translation pipeline, evaluation during training, the
    translate command, the exports' decoding options and the parity checks all call it.
    """
    limit = int(max_len_a * source_length + max_len_b)
    return limit if max_position_embeddings is None else min(limit, max_position_embeddings - 1)


SPECIAL_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


def special_token_ids(config: PreTrainedConfig) -> dict:
    """The special token ids of a configuration, to carry into another configuration or a generation config."""
    return {name: getattr(config, name, None) for name in SPECIAL_TOKEN_IDS}


def paper_generation_config(config: PreTrainedConfig, **kwargs) -> GenerationConfig:
    """The paper's decoding (section 6.1) for any seq2seq `config`'s special tokens: beam size 4, length penalty 0.6,
    stop when all beams have ended; keyword arguments override any setting.

    It sets no length limit, so that `generate(max_new_tokens=...)` and `generate(max_length=...)` apply as given, and
    otherwise the paper's limit, source length + 50 ([`max_new_tokens_for`]), per batch.
    """
    settings = dict(num_beams=4, length_penalty=0.6, early_stopping=True)
    return GenerationConfig(**special_token_ids(config), **{**settings, **kwargs})


__all__ = [
    "MAX_LEN_A",
    "MAX_LEN_B",
    "VanillaTransformerConfig",
    "max_new_tokens_for",
    "paper_generation_config",
    "special_token_ids",
]
