# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""The checks of the model's inputs: one typed block, reached by one call per stack, so that a caller's mistake is an
error naming the argument and what was expected instead of an `IndexError` or a NaN deep inside a layer. And the
one place that knows the cache's name in each transformers release (`CACHE_NAME`, `takes_cache`).

Not the paper, so not in the modeling file; it ships beside it as remote code and imports only torch and transformers.
"""

import dataclasses
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils import is_torchdynamo_compiling


# transformers 5.24 renamed the decoding cache from `past_key_values` to `cache`: the argument `generate()` passes to
# `forward` and the output field it reads back. Both releases meet here alone: the models take `cache` (and, through
# `takes_cache`, 5.23's name) and their outputs carry it under the installed release's name.
CACHE_NAME = "cache" if "cache" in {field.name for field in dataclasses.fields(Seq2SeqLMOutput)} else "past_key_values"


def takes_cache(forward: Callable) -> Callable:
    """`forward` also takes the cache as `past_key_values`: what `generate()` passes before 5.24, deprecated from 5.24
    on (as in transformers' own models)."""

    @functools.wraps(forward)
    def forward_taking_either_name(self, *args, past_key_values: Cache | None = None, **kwargs):
        if past_key_values is not None:
            if CACHE_NAME == "cache":
                warnings.warn("`past_key_values` is deprecated: pass the cache as `cache`.", FutureWarning, 2)
            kwargs["cache"] = past_key_values
        return forward(self, *args, **kwargs)

    return forward_taking_either_name


@dataclass(frozen=True)
class StackInputs:
    """The argument names of one stack's inputs, so that every error names what the caller passed."""

    ids: str
    embeds: str
    mask: str
    side: str


SOURCE = StackInputs("input_ids", "inputs_embeds", "attention_mask", "source")
TARGET = StackInputs("decoder_input_ids", "decoder_inputs_embeds", "decoder_attention_mask", "target")
SEQUENCE = StackInputs("input_ids", "inputs_embeds", "attention_mask", "target")  # decoder-only models


def check_inputs(
    config, names: StackInputs, input_ids, inputs_embeds, attention_mask, past_length=0, position_ids=None
) -> None:
    """Every check of a stack's inputs, with errors naming the argument instead of an `IndexError` deep inside. Ids
    that `generate()` produced (`past_length > 0`) are in range by construction."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of `{names.ids}` or `{names.embeds}`.")
    if input_ids is not None:
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise TypeError(f"`{names.ids}` must hold integer token ids (torch.long), got dtype {input_ids.dtype}.")
        if input_ids.dim() != 2:
            raise ValueError(
                f"`{names.ids}` must have shape (batch_size, sequence_length), got {tuple(input_ids.shape)}."
            )
        if input_ids.shape[1] == 0:
            raise ValueError(f"`{names.ids}` is empty (sequence length 0): every sequence needs a token, e.g. EOS.")
        if isinstance(past_length, int) and past_length == 0:
            check_token_ids(input_ids, names.ids, config.vocab_size)
    if not isinstance(past_length, int):  # a static cache's length is a tensor: nothing more to check per step
        return
    batch_size, length = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
    expected = (batch_size, past_length + length)
    if attention_mask is not None and attention_mask.dim() != 4 and tuple(attention_mask.shape) != expected:
        raise ValueError(
            f"`{names.mask}` must have shape (batch_size, sequence_length) = {expected} with 1 for real tokens and 0 "
            f"for padding, got {tuple(attention_mask.shape)}."
        )
    positions = past_length + length
    if position_ids is not None and past_length == 0:  # packed sequences restart their positions
        positions = int(position_ids.max()) + 1
    if positions > config.max_position_embeddings:
        raise ValueError(
            f"The {names.side} sequence has {positions} positions but the model supports at most "
            f"max_position_embeddings={config.max_position_embeddings}; truncate the input (e.g. "
            "tokenizer(..., truncation=True)) or generate fewer tokens."
        )


def check_labels(config, labels: torch.Tensor, source: torch.Tensor | None) -> None:
    """Target ids for the loss, in the vocabulary (or -100), one row per `source` row (ids or embeddings)."""
    batch_size = source.shape[0] if source is not None else None
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"`labels` must hold integer token ids (torch.long), got dtype {labels.dtype}.")
    if batch_size is not None and labels.shape[0] != batch_size:
        raise ValueError(f"`labels` has batch size {labels.shape[0]} but the source has batch size {batch_size}.")
    check_token_ids(labels, "labels", config.vocab_size, ignore_index=-100)


def check_token_ids(ids: torch.Tensor, name: str, vocab_size: int, ignore_index: int | None = None) -> None:
    """Ids in [0, vocab_size) (or `ignore_index`). Checked where reading them costs nothing, on the CPU: on a GPU the
    read would stall the device at every batch, and an id out of range stops the embedding or loss kernel there."""
    if ids.device.type != "cpu" or is_torchdynamo_compiling():
        return
    valid = (ids >= 0) & (ids < vocab_size)
    if ignore_index is not None:
        valid |= ids == ignore_index
    if bool(valid.all()):
        return
    bad, allowed = int(ids[~valid][0]), f"[0, {vocab_size})"
    if ignore_index is None:
        raise ValueError(f"`{name}` contains token id {bad}, outside the vocabulary {allowed}.")
    raise ValueError(f"`{name}` contains token id {bad}: {name} must be in {allowed} or {ignore_index}.")


def check_encoder_states(config, hidden_states, encoder_hidden_states, cache) -> None:
    """The decoder's encoder states: present exactly in encoder-decoder models, with the target's batch size; their
    cache keeps the cross-attention's keys and values apart (a plain cache would mix them with the
    self-attention's)."""
    if (encoder_hidden_states is None) == config.is_encoder_decoder:
        raise ValueError(
            "The decoder needs `encoder_hidden_states`: pass `input_ids` or `encoder_outputs`."
            if config.is_encoder_decoder
            else "A decoder-only model (`config.is_encoder_decoder=False`) takes no `encoder_hidden_states`."
        )
    if encoder_hidden_states is not None and encoder_hidden_states.shape[0] != hidden_states.shape[0]:
        raise ValueError(
            f"The decoder inputs have batch size {hidden_states.shape[0]} but the encoder outputs have batch size "
            f"{encoder_hidden_states.shape[0]}: source and target batches must match."
        )
    if config.is_encoder_decoder and cache is not None and not isinstance(cache, EncoderDecoderCache):
        raise TypeError(f"The decoding cache must be an `EncoderDecoderCache`, got {type(cache).__name__}.")


__all__ = ["CACHE_NAME", "SEQUENCE", "SOURCE", "TARGET", "StackInputs", "check_encoder_states", "check_inputs"]
__all__ += ["check_labels", "takes_cache"]
