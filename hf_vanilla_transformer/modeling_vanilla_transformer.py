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
"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a transformers model.

Shapes: b batch, s source length, t target length (new tokens), k key length (cache + new), h heads, d d_model,
dh head dim, v vocabulary. Masks follow transformers: 2D `attention_mask` with 1 = real token, 0 = padding.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling, logging
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla_transformer import VanillaTransformerConfig


logger = logging.get_logger(__name__)


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend `decoder_start_token_id`, drop the last token, replace -100 by padding."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError(
            "`config.pad_token_id` and `config.decoder_start_token_id` must be set to build decoder inputs."
        )
    shifted = input_ids.new_empty(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


def _check_token_ids(ids: torch.Tensor | None, name: str, config: VanillaTransformerConfig, check_range: bool = True):
    """Turn the usual deep `IndexError`/`RuntimeError` of bad token ids into an error naming the argument."""
    if ids is None:
        return
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"`{name}` must hold integer token ids (torch.long), got dtype {ids.dtype}.")
    if ids.dim() != 2:
        raise ValueError(f"`{name}` must have shape (batch_size, sequence_length), got {tuple(ids.shape)}.")
    if ids.shape[1] == 0:
        raise ValueError(f"`{name}` is empty (sequence length 0): every sequence needs at least one token, e.g. EOS.")
    if check_range and not is_torchdynamo_compiling():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"`{name}` contains token id {bad}, outside the vocabulary [0, {config.vocab_size}).")


def _check_padding_mask(mask: torch.Tensor | None, name: str, batch_size: int, length: int):
    """2D masks must be (b, length); prepared 4D masks are passed through untouched, as in transformers."""
    if mask is None or mask.dim() == 4:
        return
    if mask.dim() != 2 or mask.shape[0] != batch_size or mask.shape[1] != length:
        raise ValueError(
            f"`{name}` must have shape (batch_size, sequence_length) = ({batch_size}, {length}) with 1 for real tokens "
            f"and 0 for padding, got {tuple(mask.shape)}."
        )


def _real_token_index(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Flat (b*t) indices of the real tokens of a 2D mask; None when nothing is padding (or under torch.compile,
    where the data-dependent size would break the graph)."""
    if mask is None or mask.dim() != 2 or is_torchdynamo_compiling():
        return None
    index = mask.flatten().nonzero().squeeze(-1)
    return None if index.numel() == mask.numel() else index


def _unpad(hidden_states: torch.Tensor, token_index: torch.Tensor | None) -> torch.Tensor:
    """(b, t, d) -> (n, d): the real tokens only; unchanged when there is no padding to skip."""
    return hidden_states if token_index is None else hidden_states.flatten(0, 1).index_select(0, token_index)


def _repad(tokens: torch.Tensor, token_index: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """(n, d') -> (*shape, d') with zeros at the padded positions: the inverse of `_unpad`."""
    if token_index is None:
        return tokens
    padded = tokens.new_zeros(math.prod(shape), tokens.shape[-1]).index_copy_(0, token_index, tokens)
    return padded.view(*shape, -1)


def _on_tokens(fn: Callable, hidden_states: torch.Tensor, token_index: torch.Tensor | None) -> torch.Tensor:
    """Apply a position-wise `fn` to the real tokens only; padded positions come back as zeros.

    Linear layers are nearly all of the work, so skipping padding makes a padded batch cost about what its real tokens
    cost. Results at real positions are unchanged.
    """
    return _repad(fn(_unpad(hidden_states, token_index)), token_index, hidden_states.shape[:-1])


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
        # Adding in float32: finfo(fp16).min plus a negative score would overflow to -inf in half precision, and a row of
        # -inf (an all-padding sequence) softmaxes to NaN.
        scores = scores.float() + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (b, t, h, dh)
    return output, weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention (section 3.2.2), used for encoder self-, decoder self- and decoder cross-attention."""

    def __init__(
        self, config: VanillaTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None = None
    ):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        # Read by the SDPA and flash kernels when no mask is materialised: must be False for encoder and cross-attention.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (b, t, d)
        key_value_states: torch.Tensor | None = None,  # encoder output (b, s, d) for cross-attention
        past_key_values: EncoderDecoderCache | None = None,
        attention_mask: torch.Tensor | None = None,
        token_index: torch.Tensor | None = None,  # real tokens of `hidden_states` (see `_on_tokens`)
        key_token_index: torch.Tensor | None = None,  # real tokens of `key_value_states`
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        input_shape = hidden_states.shape[:-1]
        tokens = _unpad(hidden_states, token_index)  # gathered once for the query, key and value projections
        query = _repad(self.q_proj(tokens), token_index, input_shape)
        query = query.view(*input_shape, -1, self.head_dim).transpose(1, 2)  # (b, h, t, dh)

        cache = None
        if past_key_values is not None:
            cache = (
                past_key_values.cross_attention_cache if is_cross_attention else past_key_values.self_attention_cache
            )
        if is_cross_attention and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # The encoder output does not change during generation: its keys/values are projected once.
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source_index = key_token_index if is_cross_attention else token_index
            source_shape = (key_value_states if is_cross_attention else hidden_states).shape[:-1]
            source = _unpad(key_value_states, source_index) if is_cross_attention else tokens
            kv_shape = (*source_shape, -1, self.head_dim)
            key = (
                _repad(self.k_proj(source), source_index, source_shape).view(kv_shape).transpose(1, 2)
            )  # (b, h, k, dh)
            value = _repad(self.v_proj(source), source_index, source_shape).view(kv_shape).transpose(1, 2)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return _on_tokens(self.out_proj, output.reshape(*input_shape, -1), token_index), weights


class VanillaTransformerLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: the residual connection and the position-wise feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def add_feed_forward(self, config: VanillaTransformerConfig, ffn_dim: int):
        """Called by subclasses after their attention sublayers, so that modules are registered in data-flow order."""
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def residual(self, hidden_states: torch.Tensor, layer_norm: nn.LayerNorm, sublayer: Callable) -> torch.Tensor:
        """Post-norm `LayerNorm(x + Dropout(Sublayer(x)))` (section 5.4), or pre-norm `x + Dropout(Sublayer(LayerNorm(x)))`."""
        if self.norm_first:
            output = sublayer(layer_norm(hidden_states))
            return hidden_states + nn.functional.dropout(output, p=self.dropout, training=self.training)
        output = sublayer(hidden_states)
        return layer_norm(hidden_states + nn.functional.dropout(output, p=self.dropout, training=self.training))

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3)."""
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class VanillaTransformerEncoderLayer(VanillaTransformerLayer):
    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, False, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.add_feed_forward(config, config.encoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_index: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        def self_attention(x):
            return self.self_attn(x, attention_mask=attention_mask, token_index=token_index, **kwargs)[0]

        hidden_states = self.residual(hidden_states, self.self_attn_layer_norm, self_attention)
        return self.residual(
            hidden_states, self.final_layer_norm, lambda x: _on_tokens(self.feed_forward, x, token_index)
        )


class VanillaTransformerDecoderLayer(VanillaTransformerLayer):
    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, True, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, False, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.add_feed_forward(config, config.decoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        token_index: torch.Tensor | None = None,
        encoder_token_index: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        def self_attention(x):
            return self.self_attn(
                x, past_key_values=past_key_values, attention_mask=attention_mask, token_index=token_index, **kwargs
            )[0]

        def cross_attention(x):
            return self.encoder_attn(
                x,
                encoder_hidden_states,
                past_key_values=past_key_values,
                attention_mask=encoder_attention_mask,
                token_index=token_index,
                key_token_index=encoder_token_index,
                **kwargs,
            )[0]

        hidden_states = self.residual(hidden_states, self.self_attn_layer_norm, self_attention)
        hidden_states = self.residual(hidden_states, self.encoder_attn_layer_norm, cross_attention)
        return self.residual(
            hidden_states, self.final_layer_norm, lambda x: _on_tokens(self.feed_forward, x, token_index)
        )


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

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        embeddings = super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        model = self.base_model
        if isinstance(model, VanillaTransformerModel) and model.shared is None:
            # Untied: transformers resizes the input (source) and output matrices; the target embeddings are a third.
            model.decoder.embed_tokens = self._get_resized_embeddings(
                model.decoder.embed_tokens, embeddings.weight.shape[0], mean_resizing=mean_resizing
            )
        return embeddings

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        from safetensors import SafetensorError  # a dependency of transformers: remote code needs nothing more

        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:  # transformers passes it on without naming the folder
            raise OSError(
                f"The safetensors weights of {pretrained_model_name_or_path} cannot be read ({error}): the file is "
                "corrupt or only partially downloaded (a git-lfs pointer, an interrupted copy). Download it again."
            ) from error

    def save_pretrained(self, save_directory, *args, **kwargs):
        import os

        # Imported here so that transformers copies the pipeline file with this one, when saving and when loading
        # remote code: it looks for relative imports in the file's text.
        from .pipeline_translation import CUSTOM_PIPELINES

        if self._auto_class is not None:
            # transformers copies the code files and maps only the saved class. Map both model classes, so that
            # AutoModel and AutoModelForSeq2SeqLM load the folder as remote code whichever of them saved it, and name
            # the pipeline, so that pipeline("translation", model=folder, trust_remote_code=True) works without this
            # package.
            module = self.__class__.__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.VanillaTransformerModel",
                "AutoModelForSeq2SeqLM": f"{module}.VanillaTransformerForConditionalGeneration",
            }
            self.config.custom_pipelines = CUSTOM_PIPELINES
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            # safetensors (0.8) writes the weights through a temporary file of mode 0600 renamed into place; give them
            # the mode the process umask gives every other file saved here. Reading the umask means setting it.
            umask = os.umask(0o077)
            os.umask(umask)
            for name in os.listdir(save_directory):
                if name.endswith(".safetensors"):
                    os.chmod(os.path.join(save_directory, name), 0o666 & ~umask)


def _position_ids(attention_mask: torch.Tensor | None, length: int, past_length, device) -> torch.Tensor:
    """Positions of the last `length` tokens, counting only real tokens so that left and right padding agree."""
    if attention_mask is not None and attention_mask.dim() == 2:
        return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]  # (b, t)
    return (torch.arange(length, device=device) + past_length).unsqueeze(0)  # (1, t)


def _check_length(name: str, length, config: VanillaTransformerConfig):
    if not is_torchdynamo_compiling() and int(length) > config.max_position_embeddings:
        raise ValueError(
            f"{name} has {int(length)} positions but the model supports at most max_position_embeddings="
            f"{config.max_position_embeddings}; truncate the input (e.g. tokenizer(..., truncation=True)) or "
            "generate fewer tokens."
        )


class VanillaTransformerStack(VanillaTransformerPreTrainedModel):
    """What the encoder and the decoder share: token embeddings x sqrt(d_model) + sinusoidal positions (sections 3.4,
    3.5), with dropout on the sum (section 5.4), a stack of layers, and the final LayerNorm of pre-norm stacks."""

    def __init__(self, config: VanillaTransformerConfig, layers: list[nn.Module]):
        super().__init__(config)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = VanillaTransformerSinusoidalPositionalEncoding(config.d_model)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.stack_layer_norm else None
        self.post_init()

    def embed(self, input_ids, inputs_embeds, attention_mask, past_length=0, prefix="", check_range=True):
        """(b, t) ids or (b, t, d) unscaled embeddings -> (b, t, d) input of the first layer; `prefix` names the
        arguments in errors ("" for the source, "decoder_" for the target)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"Pass exactly one of `{prefix}input_ids` or `{prefix}inputs_embeds`.")
        _check_token_ids(input_ids, f"{prefix}input_ids", self.config, check_range)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds.to(self.embed_tokens.weight.dtype)  # e.g. float32 embeddings into a half model
        batch_size, length = inputs_embeds.shape[:2]
        _check_padding_mask(attention_mask, f"{prefix}attention_mask", batch_size, past_length + length)
        _check_length("The target sequence" if prefix else "The source sequence", past_length + length, self.config)
        position_ids = _position_ids(attention_mask, length, past_length, inputs_embeds.device)
        hidden_states = inputs_embeds * self.embed_scale + self.embed_positions(position_ids).to(inputs_embeds.dtype)
        return nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)


class VanillaTransformerEncoder(VanillaTransformerStack):
    """`config.encoder_layers` [`VanillaTransformerEncoderLayer`]s over the embedded source."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerEncoderLayer,
        "attentions": VanillaTransformerAttention,
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, [VanillaTransformerEncoderLayer(config, i) for i in range(config.encoder_layers)])

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, s)
        attention_mask: torch.Tensor | None = None,  # (b, s)
        inputs_embeds: torch.Tensor | None = None,  # (b, s, d), unscaled like `embed_tokens(input_ids)`
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        hidden_states = self.embed(input_ids, inputs_embeds, attention_mask)
        token_index = _real_token_index(attention_mask)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask, token_index=token_index, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaTransformerDecoder(VanillaTransformerStack):
    """`config.decoder_layers` [`VanillaTransformerDecoderLayer`]s: causal self-attention plus cross-attention."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, [VanillaTransformerDecoderLayer(config, i) for i in range(config.decoder_layers)])

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (b, t)
        attention_mask: torch.Tensor | None = None,  # (b, k): cached + new target tokens
        encoder_hidden_states: torch.Tensor | None = None,  # (b, s, d)
        encoder_attention_mask: torch.Tensor | None = None,  # (b, s)
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (b, t, d), unscaled
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states`: pass `input_ids` or `encoder_outputs`.")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        # Ids produced by generation are in range by construction; checking once, before the cache fills, avoids a
        # device synchronisation at every decoding step.
        check_range = is_torchdynamo_compiling() or past_length == 0
        hidden_states = self.embed(input_ids, inputs_embeds, attention_mask, past_length, "decoder_", check_range)
        batch_size, length = hidden_states.shape[:2]
        if encoder_hidden_states.shape[0] != batch_size:
            raise ValueError(
                f"The decoder inputs have batch size {batch_size} but the encoder outputs have batch size "
                f"{encoder_hidden_states.shape[0]}: source and target batches must match."
            )
        _check_padding_mask(encoder_attention_mask, "attention_mask", batch_size, encoder_hidden_states.shape[1])

        token_index = _real_token_index(attention_mask[:, -length:] if attention_mask is not None else None)
        cross_cached = past_key_values is not None and past_key_values.is_updated.get(0, False)
        encoder_token_index = (
            None if cross_cached else _real_token_index(encoder_attention_mask)
        )  # for K/V projections
        self_attention_cache = past_key_values.self_attention_cache if past_key_values is not None else None
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            past_key_values=self_attention_cache,
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, so that reentrant gradient checkpointing sees it
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                token_index=token_index,
                encoder_token_index=encoder_token_index,
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values
        )


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """Encoder and decoder with one shared embedding matrix (section 3.4) when `config.tie_word_embeddings`."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        # Untied models have no `shared` matrix at all rather than an unused one, which would break DDP.
        self.shared = (
            nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
            if config.tie_word_embeddings
            else None
        )
        self.encoder = VanillaTransformerEncoder(config)
        self.decoder = VanillaTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared if self.shared is not None else self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.shared is not None:
            self.shared = value
            self.decoder.embed_tokens = value
        self.encoder.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        if past_key_values is not None and not isinstance(past_key_values, EncoderDecoderCache):
            raise TypeError(
                f"`past_key_values` must be an `EncoderDecoderCache`, got {type(past_key_values).__name__}."
            )

        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """[`VanillaTransformerModel`] plus the output projection tied to the shared embeddings, a loss and `generate()`."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def _validate_generated_length(self, generation_config, input_ids_length, has_default_max_length):
        super()._validate_generated_length(generation_config, input_ids_length, has_default_max_length)
        # Fail before decoding rather than after generating max_position_embeddings tokens.
        if generation_config.max_length > self.config.max_position_embeddings:
            raise ValueError(
                f"generate() would produce up to {generation_config.max_length} target positions but the model "
                f"supports at most max_position_embeddings={self.config.max_position_embeddings}: lower "
                "`max_new_tokens` / `max_length`."
            )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (b, t); -100 marks positions without a target
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; -100 marks positions without a target. Without `decoder_input_ids`, the decoder reads the
            labels shifted right behind `decoder_start_token_id`. In training mode, positions without a target are
            not projected to the vocabulary (their logits are 0): the loss does not need them. The loss is label
            smoothed by `config.label_smoothing`.
        """
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            _check_labels(labels, input_ids if input_ids is not None else inputs_embeds, self.config)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states, loss = outputs.last_hidden_state, None
        label_index = _real_token_index(labels != -100) if labels is not None and self.training else None
        if label_index is not None:
            # Training: project only the positions that have a target, and take the loss on those rows directly.
            target_logits = self.lm_head(hidden_states.flatten(0, 1).index_select(0, label_index))  # (n, v)
            loss = seq2seq_cross_entropy(
                target_logits, labels.flatten()[label_index], num_items_in_batch, self.config.label_smoothing
            )
            logits = _repad(target_logits, label_index, hidden_states.shape[:-1])
        else:
            logits = self.lm_head(hidden_states)  # (b, t, v)
            if labels is not None:
                loss = seq2seq_cross_entropy(logits, labels, num_items_in_batch, self.config.label_smoothing)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


def _check_labels(labels: torch.Tensor, source: torch.Tensor | None, config: VanillaTransformerConfig):
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"`labels` must hold integer token ids (torch.long), got dtype {labels.dtype}.")
    if source is not None and labels.shape[0] != source.shape[0]:
        raise ValueError(f"`labels` has batch size {labels.shape[0]} but the source has batch size {source.shape[0]}.")
    if not is_torchdynamo_compiling():
        bad = (labels != -100) & ((labels < 0) | (labels >= config.vocab_size))
        if bad.any():
            raise ValueError(
                f"`labels` contains token id {int(labels[bad][0])}: labels must be in [0, {config.vocab_size}) or -100 "
                "(ignored)."
            )


def seq2seq_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level (label-smoothed) cross-entropy over the targets that are not -100, divided by their number.

    `num_items_in_batch` (passed by `Trainer`) is the token count of the whole accumulated batch, so that gradient
    accumulation gives the same update as one large batch. A batch without any target token has loss 0, not NaN.
    """
    logits, labels = logits.reshape(-1, logits.shape[-1]), labels.flatten().to(logits.device)
    loss = nn.functional.cross_entropy(
        logits.float(), labels, ignore_index=-100, reduction="sum", label_smoothing=label_smoothing
    )
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum().clamp(min=1)
    elif torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


__all__ = [
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
]
