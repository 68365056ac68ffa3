# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a transformers model.

Figure 1 of the paper, box by box, in the order of this file (which is the order the data flows):

    Input / Output Embedding    `VanillaTransformerStack.embed_tokens` (x sqrt(d_model), section 3.4)
    Positional Encoding         `VanillaTransformerSinusoidalPositionalEncoding` (section 3.5)
    Multi-Head Attention        `VanillaTransformerAttention` (section 3.2.2), all three uses
    Add & Norm, Feed Forward    `VanillaTransformerLayer.add_and_norm` (section 5.4), `.feed_forward` (section 3.3)
    the left block, N x         `VanillaTransformerEncoderLayer`, stacked by `VanillaTransformerEncoder`
    the right block, N x        `VanillaTransformerDecoderLayer`, stacked by `VanillaTransformerDecoder`
    both stacks                 `VanillaTransformerModel`
    Linear + Softmax            `VanillaTransformerForConditionalGeneration.lm_head`, trained by `token_cross_entropy`

The other heads reuse one stack: `VanillaTransformerForCausalLM` (the decoder without cross-attention) and
`VanillaTransformerForSequenceClassification` (the encoder). Not the paper, and beside this file: `padding.py` (each
stack packs its real tokens into rows once; the encoder's output carries the source's mask) and `input_checks.py`
(errors naming the argument; the cache's name).

Shapes: b batch, s source length, t target length (new tokens), k key length (cache + new), n real (non-padding)
tokens packed by `Padding`, h heads, d d_model, dh head dim, v vocabulary. Masks follow transformers: 2D
`attention_mask` with 1 = real token, 0 = padding.
"""

import copy

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    SequenceClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .input_checks import (
    CACHE_NAME,
    SEQUENCE,
    SOURCE,
    TARGET,
    StackInputs,
    check_encoder_states,
    check_inputs,
    check_labels,
    takes_cache,
)
from .padding import NO_PADDING, Padding, VanillaTransformerEncoderOutput


class VanillaTransformerSinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (section 3.5).

    Computed from the positions on every call: there is no table to save, to rebuild after meta-device loading, or to
    index out of range.
    """

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.embedding_dim = embedding_dim

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        two_i = torch.arange(0, self.embedding_dim, 2, device=position_ids.device, dtype=torch.float32)
        angles = position_ids.unsqueeze(-1).float() / torch.pow(10000.0, two_i / self.embedding_dim)  # (b, t, d/2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # interleaved (b, t, d)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # (b, h, t, dh)
    key: torch.Tensor,  # (b, h, k, dh)
    value: torch.Tensor,  # (b, h, k, dh)
    attention_mask: torch.Tensor | None,  # additive (b, 1, t, k): 0 to keep, finfo(dtype).min to mask
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
):
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (b, h, t, k)
    if attention_mask is not None:
        # Adding in float32: finfo(fp16).min plus a negative score would overflow to -inf in half precision, and a row
        # of -inf (an all-padding sequence) softmaxes to NaN.
        scores = scores.float() + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (b, t, h, dh)
    return output, weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention (section 3.2.2), used for encoder self-, decoder self- and decoder cross-attention."""

    def __init__(self, config: VanillaTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int):
        super().__init__()
        self.config = config
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        # Read by the SDPA and flash kernels when no mask is materialised: must be False for encoder and
        # cross-attention.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def split_heads(self, states: torch.Tensor, padding: Padding) -> torch.Tensor:
        """Packed (n, d) or (b, t, d) -> (b, h, t, dh)."""
        states = padding.spread(states)
        return states.view(*states.shape[:2], -1, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (n, d) packed by `padding`, or (b, t, d)
        key_value_states: torch.Tensor | None = None,  # the encoder output (b, s, d), for cross-attention
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding: Padding = NO_PADDING,  # of `hidden_states`
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        query = self.split_heads(self.q_proj(hidden_states), padding)
        if is_cross_attention and cache is not None and cache.is_updated.get(self.layer_idx):
            # The encoder output does not change during generation: its keys and values are projected once.
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            key, value = layer.keys, layer.values
        else:
            source, source_padding = (key_value_states, NO_PADDING) if is_cross_attention else (hidden_states, padding)
            key = self.split_heads(self.k_proj(source), source_padding)  # (b, h, k, dh)
            value = self.split_heads(self.v_proj(source), source_padding)
            if cache is not None:
                layers = cache  # a plain cache in decoder-only models
                if isinstance(cache, EncoderDecoderCache):
                    layers = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache
                key, value = layers.update(key, value, self.layer_idx)
                if is_cross_attention:
                    cache.is_updated[self.layer_idx] = True
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        dropout = self.dropout if self.training else 0.0
        output, weights = attention_interface(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        output = padding.pack(output.reshape(*output.shape[:2], -1))  # (b, t, h, dh) -> packed (n, d)
        return self.out_proj(output), weights


class VanillaTransformerLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: Add & Norm around each sublayer, and the position-wise feed-forward
    network."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def sublayer_input(self, layer_norm: nn.LayerNorm, hidden_states: torch.Tensor) -> torch.Tensor:
        """What a sublayer reads: x (post-norm, the paper's), or LayerNorm(x) (pre-norm)."""
        return layer_norm(hidden_states) if self.norm_first else hidden_states

    def add_and_norm(self, layer_norm: nn.LayerNorm, hidden_states: torch.Tensor, sublayer_output: torch.Tensor):
        """Add & Norm (section 5.4): post-norm `LayerNorm(x + Dropout(Sublayer(x)))`, or pre-norm
        `x + Dropout(Sublayer(LayerNorm(x)))`."""
        hidden_states = hidden_states + nn.functional.dropout(sublayer_output, p=self.dropout, training=self.training)
        return hidden_states if self.norm_first else layer_norm(hidden_states)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3)."""
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class VanillaTransformerEncoderLayer(VanillaTransformerLayer):
    """Figure 1, left: self-attention and feed-forward, each with Add & Norm."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, False, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.d_model, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None, padding: Padding = NO_PADDING, **kwargs) -> torch.Tensor:
        # Self Attention (its weights are recorded by `capture_outputs`)
        attention_output, _ = self.self_attn(
            hidden_states=self.sublayer_input(self.self_attn_layer_norm, hidden_states),
            attention_mask=attention_mask,
            padding=padding,
            **kwargs,
        )
        hidden_states = self.add_and_norm(self.self_attn_layer_norm, hidden_states, attention_output)
        # Fully Connected
        feed_forward_output = self.feed_forward(self.sublayer_input(self.final_layer_norm, hidden_states))
        return self.add_and_norm(self.final_layer_norm, hidden_states, feed_forward_output)


class VanillaTransformerDecoderLayer(VanillaTransformerLayer):
    """Figure 1, right: masked self-attention, attention over the encoder output, feed-forward, each with
    Add & Norm."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, True, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        if config.is_encoder_decoder:  # decoder-only models have no encoder to attend to
            self.encoder_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, False, layer_idx)
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.d_model, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor | None = None,  # positional, so reentrant gradient checkpointing sees it
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        padding: Padding = NO_PADDING,  # of the target
        **kwargs,
    ) -> torch.Tensor:
        # Self Attention
        attention_output, _ = self.self_attn(
            hidden_states=self.sublayer_input(self.self_attn_layer_norm, hidden_states),
            attention_mask=attention_mask,
            cache=cache,
            padding=padding,
            **kwargs,
        )
        hidden_states = self.add_and_norm(self.self_attn_layer_norm, hidden_states, attention_output)
        # Cross-Attention Block (not in decoder-only models)
        if encoder_hidden_states is not None:
            attention_output, _ = self.encoder_attn(
                hidden_states=self.sublayer_input(self.encoder_attn_layer_norm, hidden_states),
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                cache=cache,
                padding=padding,
                **kwargs,
            )
            hidden_states = self.add_and_norm(self.encoder_attn_layer_norm, hidden_states, attention_output)
        # Fully Connected
        feed_forward_output = self.feed_forward(self.sublayer_input(self.final_layer_norm, hidden_states))
        return self.add_and_norm(self.final_layer_norm, hidden_states, feed_forward_output)


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config: VanillaTransformerConfig
    config_class = VanillaTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    def __init__(self, config: VanillaTransformerConfig, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if getattr(self, "generation_config", None) is not None:  # the heads that generate
            # Generation stops at the model's positions rather than at GenerationConfig's default of 20 tokens.
            self.generation_config.max_length = config.max_position_embeddings

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        model = self.base_model
        if isinstance(model, VanillaTransformerModel) and model.shared is None:
            # Untied: transformers resizes the input (source) and output matrices; the target embeddings are a third,
            # resized as Marian resizes its decoder's.
            model.decoder.embed_tokens = self._get_resized_embeddings(
                model.decoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers maps only the saved class in `auto_map`; a folder saved by either seq2seq class also loads with
        # the other's Auto class and the translation pipeline (`custom_pipelines`) where the package is not installed.
        if self._auto_class in ("AutoModel", "AutoModelForSeq2SeqLM"):
            from .pipeline_translation import CUSTOM_PIPELINES  # not at load: it imports transformers' pipelines

            module = type(self).__module__.rsplit(".", 1)[-1]
            seq2seq = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
            auto_map = {
                auto: f"{module}.{cls.__name__}" for auto, cls in zip(("AutoModel", "AutoModelForSeq2SeqLM"), seq2seq)
            }
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **auto_map}
            self.config.custom_pipelines = CUSTOM_PIPELINES
        super().save_pretrained(save_directory, *args, **kwargs)


class VanillaTransformerStack(VanillaTransformerPreTrainedModel):
    """What the encoder and the decoder share: token embeddings x sqrt(d_model) + sinusoidal positions (sections 3.4,
    3.5), with dropout on the sum (section 5.4), a stack of layers, and a final LayerNorm (pre-norm stacks). The token
    embeddings are the stack's own unless given (`VanillaTransformerModel`'s shared matrix)."""

    def __init__(self, config: VanillaTransformerConfig, inputs: StackInputs, layers: list[nn.Module], embed_tokens):
        super().__init__(config)
        self.inputs = inputs
        self.embed_scale = config.d_model**0.5 if config.scale_embedding else 1.0
        if embed_tokens is None:
            embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_tokens = embed_tokens
        self.embed_positions = VanillaTransformerSinusoidalPositionalEncoding(config.d_model)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.stack_layer_norm else None
        self.post_init()

    def embed(self, input_ids, inputs_embeds, attention_mask, past_length=0, position_ids=None) -> torch.Tensor:
        """(b, t) ids or (b, t, d) unscaled embeddings -> (b, t, d) input of the first layer."""
        check_inputs(self.config, self.inputs, input_ids, inputs_embeds, attention_mask, past_length, position_ids)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds.to(self.embed_tokens.weight.dtype)  # e.g. float32 embeddings into a half model
        length = inputs_embeds.shape[1]
        if position_ids is None and attention_mask is not None and attention_mask.dim() == 2:
            # Counting only the real tokens, so that left and right padding give the same positions.
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]  # (b, t)
        elif position_ids is None:
            position_ids = (torch.arange(length, device=inputs_embeds.device) + past_length).unsqueeze(0)  # (1, t)
        hidden_states = inputs_embeds * self.embed_scale + self.embed_positions(position_ids).to(inputs_embeds.dtype)
        return nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)

    def padding_mask(self, hidden_states, attention_mask, key_states=None) -> torch.Tensor | None:
        """The attention mask hiding the padded keys (of `key_states`, else of `hidden_states`): `attention_mask` is
        `None` when no key is padding (known already: no synchronisation to find out), else a 2D or a 4D mask."""
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            encoder_hidden_states=key_states,
            allow_is_bidirectional_skip=attention_mask is None,
        )

    def finish(self, hidden_states: torch.Tensor, padding: Padding) -> torch.Tensor:
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return padding.unpack(hidden_states)  # (b, t, d)


class VanillaTransformerEncoder(VanillaTransformerStack):
    """`config.encoder_layers` [`VanillaTransformerEncoderLayer`]s over the embedded source."""

    _can_record_outputs = {"hidden_states": VanillaTransformerEncoderLayer, "attentions": VanillaTransformerAttention}

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        layers = [VanillaTransformerEncoderLayer(config, i) for i in range(config.encoder_layers)]
        super().__init__(config, SOURCE, layers, embed_tokens)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, s)
        attention_mask: torch.Tensor | None = None,  # (b, s)
        inputs_embeds: torch.Tensor | None = None,  # (b, s, d), unscaled like `embed_tokens(input_ids)`
        **kwargs: Unpack[TransformersKwargs],
    ) -> VanillaTransformerEncoderOutput:
        hidden_states = self.embed(input_ids, inputs_embeds, attention_mask)
        recorded = kwargs.get("output_hidden_states", self.config.output_hidden_states)  # hidden states per layer
        source_padding = Padding.of_stack(attention_mask, output_hidden_states=recorded)
        is_4d = attention_mask is not None and attention_mask.dim() == 4
        attention_mask = self.padding_mask(hidden_states, attention_mask if is_4d else source_padding.mask)
        hidden_states = source_padding.pack(hidden_states)
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask, padding=source_padding, **kwargs)
        return VanillaTransformerEncoderOutput(
            last_hidden_state=self.finish(hidden_states, source_padding),
            padding_mask=attention_mask if is_4d else source_padding.mask,
        )


class VanillaTransformerDecoder(VanillaTransformerStack):
    """`config.decoder_layers` [`VanillaTransformerDecoderLayer`]s: causal self-attention plus cross-attention."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        layers = [VanillaTransformerDecoderLayer(config, i) for i in range(config.decoder_layers)]
        super().__init__(config, TARGET if config.is_encoder_decoder else SEQUENCE, layers, embed_tokens)

    @merge_with_config_defaults
    @capture_outputs
    @takes_cache
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, t)
        attention_mask: torch.Tensor | None = None,  # (b, k): cached + new target tokens
        encoder_hidden_states: torch.Tensor | None = None,  # (b, s, d)
        encoder_attention_mask: torch.Tensor | None = None,  # (b, s), None when no source token is padding
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (b, t, d), unscaled
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,  # (b, t); by default counted over the real tokens
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
            if self.config.is_encoder_decoder:
                cache = EncoderDecoderCache(cache, DynamicCache(config=self.config))
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embed(input_ids, inputs_embeds, attention_mask, past_length, position_ids)
        new_tokens = attention_mask[:, -hidden_states.shape[1] :] if attention_mask is not None else None
        recorded = kwargs.get("output_hidden_states", self.config.output_hidden_states)  # hidden states per layer
        target_padding = Padding.of_stack(new_tokens, output_hidden_states=recorded, cache=cache)
        causal_mask = self.causal_mask(hidden_states, attention_mask, target_padding, cache, past_length, position_ids)
        check_encoder_states(self.config, hidden_states, encoder_hidden_states, cache)
        cross_mask = None  # decoder-only models have no cross-attention
        if encoder_hidden_states is not None:
            cross_mask = self.padding_mask(hidden_states, encoder_attention_mask, encoder_hidden_states)
        hidden_states = target_padding.pack(hidden_states)
        for decoder_layer in self.layers:
            # The cache by keyword: gradient checkpointing drops it.
            layer_inputs = (hidden_states, causal_mask, encoder_hidden_states, cross_mask)
            hidden_states = decoder_layer(*layer_inputs, cache=cache, padding=target_padding, **kwargs)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.finish(hidden_states, target_padding), **{CACHE_NAME: cache}
        )

    def causal_mask(self, hidden_states, attention_mask, target_padding, cache, past_length, position_ids):
        """The self-attention mask over cached + new tokens, or `None` where the kernel's causal rule is enough."""
        no_past = isinstance(past_length, int) and past_length == 0  # a static cache's length is a tensor
        if no_past and (attention_mask is None or attention_mask.dim() == 2):
            attention_mask = target_padding.mask  # known already: no synchronisation to find out
        cache = getattr(cache, "self_attention_cache", cache)
        if attention_mask is None and hidden_states.shape[1] == 1 and not getattr(cache, "is_compileable", False):
            return None  # one new token may see every cached one (a static cache would also hold empty slots)
        # The cache by position: its keyword is `past_key_values` before transformers 5.24 and `cache` from it on.
        return create_causal_mask(
            self.config,
            hidden_states,
            attention_mask,
            cache,
            position_ids=position_ids,  # sequences packed in one row (positions restarting) do not see each other
            allow_is_causal_skip=attention_mask is None or not no_past,
        )


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """Encoder and decoder with one shared embedding matrix (section 3.4) when `config.tie_word_embeddings`: one
    module, built here and handed to both stacks (sharding frameworks such as FSDP gather a weight when its module
    runs). Its three names are declared tied, so that it is saved once, as `shared.weight`."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.shared = None  # untied models have no `shared` matrix rather than an unused one, which would break DDP
        if config.tie_word_embeddings:
            self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = VanillaTransformerEncoder(config, self.shared)
        self.decoder = VanillaTransformerDecoder(config, self.shared)
        self.post_init()

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        # The stacks' embeddings are `shared` itself, not weights to tie when loading: `shared.weight` loads them, and
        # a folder without it leaves all three missing, to be initialised (marked as tied, they would stay on meta).
        return super().get_expanded_tied_weights_keys(all_submodels) if all_submodels else {}

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.shared is not None:
            self.shared = self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    @can_return_tuple
    @takes_cache
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, VanillaTransformerEncoderOutput):
            encoder_outputs = self.adopt_encoder_outputs(encoder_outputs, attention_mask)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=encoder_outputs.padding_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: decoder_outputs.get(CACHE_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )

    def adopt_encoder_outputs(self, encoder_outputs, attention_mask) -> VanillaTransformerEncoderOutput:
        """Encoder outputs computed elsewhere (a tuple, a `BaseModelOutput`), checked against the source mask, which
        is kept only if some source token is padding. `generate()` keeps the encoder's own output, with its mask."""
        if not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        check_inputs(self.config, SOURCE, None, encoder_outputs.last_hidden_state, attention_mask)
        is_4d = attention_mask is not None and attention_mask.dim() == 4
        padding_mask = attention_mask if is_4d else Padding(attention_mask, pack=False).mask
        return VanillaTransformerEncoderOutput(**encoder_outputs, padding_mask=padding_mask)


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch, label_smoothing: float):
    """Token-level cross-entropy in float32, label smoothed, over the targets that are not -100, divided by
    `num_items_in_batch` (passed by `Trainer`: the target count of the whole accumulated batch, so that gradient
    accumulation gives the update of one large batch), else by the batch's target count (at least 1)."""
    labels = labels.flatten().to(logits.device)
    loss = nn.functional.cross_entropy(
        logits.flatten(0, -2).float(), labels, ignore_index=-100, reduction="sum", label_smoothing=label_smoothing
    )
    return loss / targets_count(labels, num_items_in_batch)


def targets_count(labels: torch.Tensor, num_items_in_batch) -> torch.Tensor | int:
    """What a summed token loss is divided by: `num_items_in_batch`, else the targets in `labels` (at least 1)."""
    if num_items_in_batch is None:
        return (labels != -100).sum().clamp(min=1)
    return num_items_in_batch.to(labels.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend `decoder_start_token_id`, drop the last token, replace -100 by padding."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError("`config.pad_token_id` and `config.decoder_start_token_id` must be set for decoder inputs.")
    shifted = input_ids.new_empty(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """[`VanillaTransformerModel`] plus the output projection tied to the shared embeddings, a loss and `generate()`.

    `labels` (b, t) are the target ids, -100 where there is no target; without `decoder_input_ids` the decoder reads
    them shifted right behind `decoder_start_token_id`. The loss is label smoothed by `config.label_smoothing`. In
    training mode the decoder skips the positions after each row's last target (unless `decoder_attention_mask` says
    otherwise): their states, and so their logits, are 0.
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    @takes_cache
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (b, t); -100 marks positions without a target
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            check_labels(self.config, labels, input_ids if input_ids is not None else inputs_embeds)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
            if self.training and decoder_attention_mask is None:
                # A causal decoder never needs what follows a row's last target.
                decoder_attention_mask = (labels != -100).flip(-1).cummax(-1).values.flip(-1).long()
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (b, t, v)
        loss = None
        if labels is not None:
            loss = token_cross_entropy(logits, labels, num_items_in_batch, self.config.label_smoothing)
        other_outputs = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **other_outputs)


class VanillaTransformerForCausalLM(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The decoder stack alone, GPT-style: masked self-attention and feed-forward layers, no cross-attention, and the
    output projection tied to the token embeddings. As transformers' `BartForCausalLM`, it also takes an
    encoder-decoder config and builds its decoder (the `decoder_*` fields)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: VanillaTransformerConfig):
        if config.is_encoder_decoder:
            config = copy.deepcopy(config)
            config.is_encoder_decoder = False
        super().__init__(config)
        self.model = VanillaTransformerDecoder(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    @takes_cache
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, t)
        attention_mask: torch.Tensor | None = None,  # (b, k): cached + new tokens
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (b, t), the inputs themselves: shifted here; -100 is ignored
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,  # (b, t); generate() passes them: a 4D mask hides the padding
        logits_to_keep: int = 0,  # `generate()` asks for the last position only
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        # Position i predicts token i + 1: `labels` are the inputs; `shift_labels` come aligned (sequence parallelism).
        shift_labels = kwargs.pop("shift_labels", None)
        if labels is not None and shift_labels is None:
            shift_labels = nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
        if shift_labels is not None:
            use_cache = False
            check_labels(self.config, shift_labels, input_ids if input_ids is not None else inputs_embeds)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            position_ids=position_ids,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        hidden_states = hidden_states[:, -logits_to_keep:] if logits_to_keep else hidden_states
        logits = self.lm_head(hidden_states)  # (b, t, v)
        loss = None
        if shift_labels is not None:
            loss = token_cross_entropy(logits, shift_labels, num_items_in_batch, self.config.label_smoothing)
        other_outputs = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return CausalLMOutputWithCrossAttentions(loss=loss, logits=logits, **other_outputs)


class VanillaTransformerForSequenceClassification(VanillaTransformerPreTrainedModel):
    """The encoder stack with a linear classifier on the pooled final states (`config.classifier_pooling`: the mean of
    the real tokens, or the first real token). `config.num_labels` and `config.problem_type` as in transformers:
    regression for one label, single- or multi-label classification otherwise."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerEncoder(config)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, s)
        attention_mask: torch.Tensor | None = None,  # (b, s)
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (b,) class ids; floats for regression, (b, num_labels) for multi-label
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        hidden_states = outputs.last_hidden_state  # (b, s, d)
        real = hidden_states.new_ones(hidden_states.shape[:2])
        if attention_mask is not None and attention_mask.dim() == 2:
            real = attention_mask.to(hidden_states.dtype)
        if self.config.classifier_pooling == "first":
            first = real.argmax(-1)  # the first real token (argmax returns the first maximum)
            pooled = hidden_states[torch.arange(hidden_states.shape[0], device=first.device), first]
        else:
            pooled = (hidden_states * real.unsqueeze(-1)).sum(1) / real.sum(1, keepdim=True).clamp(min=1)
        logits = self.classifier(pooled)  # (b, num_labels)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config, num_items_in_batch=num_items_in_batch)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForSequenceClassification",
]
