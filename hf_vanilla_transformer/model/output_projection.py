# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""The output projection's CPU fast path, in one place: a prepacked copy of the (v, d) output matrix for inference.

At every decoding step the final Linear of Figure 1 multiplies a few rows (one per sequence or beam) by the whole
output matrix: the largest product of the step, with weights that other layers have pushed out of the cache since the
step before. In float32 on a CPU, oneDNN multiplies by a copy of that matrix prepacked once in a quarter to a half of
the time of torch's default product (docs/performance.md). So, without gradients, on a CPU, in float32, the projection
keeps such a copy (made again whenever the weight is replaced or changed in place) and multiplies by it. Training,
other devices and dtypes, autocast, compilation, export and wrapped or hooked layers run the Linear itself.

Not the paper, so not in the modeling file; it ships beside it as remote code and imports only torch and transformers.
"""

import functools

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary
from transformers.utils.import_utils import is_tracing


@functools.cache
def prepacking_works() -> bool:
    """Whether this torch runs oneDNN's prepacked product (private ops, as torch.compile's CPU backend uses them) on an
    x86 CPU, the kernels measured; elsewhere (ARM) torch's own product is kept. Probed on first use."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")):
        return False
    try:
        weight, rows = torch.ones(3, 2), torch.ones(1, 2)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        return torch.equal(torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", [], ""), rows @ weight.T)
    except (AttributeError, RuntimeError, TypeError):
        return False


_prepacked = WeakIdKeyDictionary()  # weight -> ((its version, its data pointer), the prepacked copy)


def uses_prepacked_weight(lm_head: nn.Module, hidden_states: torch.Tensor) -> bool:
    """Whether `vocabulary_logits` multiplies by the prepacked copy rather than calling `lm_head`."""
    weight = getattr(lm_head, "weight", None)
    return (
        not is_tracing(hidden_states)  # first: compilers cannot trace some of the checks below
        and torch.backends.mkldnn.enabled
        and type(lm_head) is nn.Linear  # not quantized, not an adapter
        and not (lm_head._forward_hooks or lm_head._forward_pre_hooks or "forward" in vars(lm_head))
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
        and weight.device.type == "cpu"
        and weight.dtype == hidden_states.dtype == torch.float32
        and not weight.is_inference()  # no version counter to see in-place changes by
        and prepacking_works()
    )


def vocabulary_logits(lm_head: nn.Linear, hidden_states: torch.Tensor) -> torch.Tensor:
    """`lm_head(hidden_states)`: (..., d) -> (..., v)."""
    if not uses_prepacked_weight(lm_head, hidden_states):
        return lm_head(hidden_states)
    weight = lm_head.weight
    state = (weight._version, weight.data_ptr())
    packed_state, packed = _prepacked.get(weight, (None, None))
    if packed_state != state:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        _prepacked[weight] = (state, packed)
    return torch.ops.mkldnn._linear_pointwise(hidden_states, packed, lm_head.bias, "none", [], "")
