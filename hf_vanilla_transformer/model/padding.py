# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""The padding optimization, in one place: a stack packs its real (non-padding) tokens once and every layer
works on the packed rows (as transformers' flash-attention helpers unpad and pad around their kernel).

Not the paper, so not in the modeling file; it ships beside it as remote code and imports only torch and transformers.
"""

import dataclasses

import torch
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import is_torchdynamo_compiling


# cuBLAS chooses a matmul's kernels the first time it meets its shape, which costs the host time: on a GPU each stack
# packs its rows up to a multiple of this many, with padded positions, so that a run meets a few row counts instead of
# a new one at every batch. On a CPU the added rows would only cost compute.
PACKED_ROWS_MULTIPLE = {"cuda": 64}


class Padding:
    """Which tokens of one side (the source, or the target) are real, and their states packed into rows.

    Linear layers, layer norms, dropout and residual sums cost as much for a padding token as for a real one, so each
    stack packs its real tokens once, (b, t, d) -> (n, d), and every layer works on the packed rows; only the attention
    kernel, which needs the (b, t) layout, spreads them out. Where the rows are rounded up (`PACKED_ROWS_MULTIPLE`),
    padded positions are packed too, computed as in models that do not pack; no real token attends to them, and the
    stack's output has zeros at every padded position all the same. Without padding, packing and unpacking do
    nothing. Under `torch.compile`, where `nonzero` has no static size, packing flattens all b * t rows, padding
    included: the layers then see rows as they do eagerly, and inductor's code for them is faster than for (b, t, d)
    states (on a CPU it saved the feed-forward's ReLU as a byte mask, which cost more than the ReLU). Built by each
    stack from its 2D `attention_mask`.
    """

    def __init__(self, attention_mask: torch.Tensor | None, pack: bool = True, rows_multiple: int = 1):
        self.mask = None  # (b, t) 2D mask while some token is padding (or may be, when compiling); else None
        self.index = None  # (rows,) flat indices of the real tokens, then of padded ones up to `rows_multiple`
        self.real = None  # the number of real tokens, when some token is padding
        self.flatten = False  # when packing under torch.compile: all b * t rows
        if attention_mask is None or attention_mask.dim() != 2:  # a 4D mask is applied as given, without packing
            return
        if is_torchdynamo_compiling():
            self.mask, self.flatten = attention_mask, pack
            return
        real = attention_mask.flatten() != 0
        self.real = int(real.sum())  # the only host synchronisation of a stack
        if self.real == real.numel():
            return
        self.mask = attention_mask
        rows = min(-(-self.real // rows_multiple) * rows_multiple, real.numel())
        if pack and rows < real.numel():
            self.index = real.argsort(descending=True, stable=True)[:rows]  # the real tokens in order, then padding

    @classmethod
    def of_stack(cls, attention_mask: torch.Tensor | None, output_hidden_states: bool, cache=None) -> "Padding":
        """The `Padding` of a stack's side. Its states are not packed when recorded per layer (hidden states keep
        their (b, t, d) shape), nor after a right-padded prompt: the next token is read from its last position."""
        multiple = PACKED_ROWS_MULTIPLE.get(attention_mask.device.type, 1) if attention_mask is not None else 1
        padding = cls(attention_mask, pack=not output_hidden_states, rows_multiple=multiple)
        if cache is not None and padding.index is not None and not padding.mask[:, -1].all():
            padding.index = None  # computed, as Marian and a static cache's 4D mask do, rather than zeros
        return padding

    def pack(self, states: torch.Tensor) -> torch.Tensor:
        """(b, t, ...) -> (rows, ...)."""
        if self.flatten:
            return states.flatten(0, 1)
        return states if self.index is None else states.flatten(0, 1).index_select(0, self.index)

    def spread(self, states: torch.Tensor) -> torch.Tensor:
        """(rows, ...) -> (b, t, ...): every packed row at its position, those that round the rows up included, and
        zeros elsewhere. What the attention kernel reads: no real token attends to a padded position."""
        return self.place(states, self.index)

    def unpack(self, states: torch.Tensor) -> torch.Tensor:
        """(rows, ...) -> (b, t, ...), zeros at every padded position: a stack's output."""
        if self.index is not None and len(self.index) > self.real:
            return self.place(states[: self.real], self.index[: self.real])
        return self.place(states, self.index)

    def place(self, states: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        if self.flatten:
            return states.view(*self.mask.shape, *states.shape[1:])
        if index is None:
            return states
        unpacked = states.new_zeros(self.mask.numel(), *states.shape[1:]).index_copy_(0, index, states)
        return unpacked.view(*self.mask.shape, *states.shape[1:])


NO_PADDING = Padding(None)


@dataclasses.dataclass
class VanillaTransformerEncoderOutput(BaseModelOutput):
    r"""
    padding_mask (`torch.Tensor` of shape `(batch_size, source_length)`, *optional*):
        The source's 2D mask if some source token is padding, else `None`, for the cross-attention (not in tuples):
        the encoder's `Padding` found it, and the decoder needs not find it again.
    """

    padding_mask: torch.Tensor | None = None

    def to_tuple(self) -> tuple:
        return tuple(value for name, value in self.items() if name != "padding_mask")


__all__ = ["NO_PADDING", "PACKED_ROWS_MULTIPLE", "Padding", "VanillaTransformerEncoderOutput"]
