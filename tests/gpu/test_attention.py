"""Attention on CUDA: eager = SDPA = the flash SDPA kernel, all-padding rows finite in half precision, and the
package's commands keeping cuDNN's kernel (which plans every new shape) out of first place."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from tests.helpers import CUDA_TESTS, random_batch, require_bf16, tiny_config


pytestmark = CUDA_TESTS

DTYPES = [torch.bfloat16, torch.float16]
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # relative, of a whole tensor


def models(dtype, **overrides):
    """The same weights with eager and with SDPA attention; heads of 64 (the flash kernel wants multiples of 8)."""
    config = tiny_config(d_model=128, encoder_attention_heads=2, decoder_attention_heads=2, dropout=0.0, **overrides)
    eager = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation="eager")
    sdpa = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    return eager.to("cuda", dtype), sdpa.to("cuda", dtype)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def forward_backward(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and the gradient of every parameter (flattened), in training mode without dropout."""
    model.zero_grad(set_to_none=True)
    out = model.train()(**batch)
    out.loss.backward()
    return out.logits.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_eager_sdpa_and_the_flash_kernel_agree_on_a_batch_without_padding(dtype):
    """Without padding no mask is materialised (the masks are all ones): encoder and cross-attention run unmasked,
    decoder self-attention with the kernel's causal rule, so the flash kernel alone can run every attention."""
    if dtype == torch.bfloat16:
        require_bf16()
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip(f"{torch.cuda.get_device_name()}: the flash SDPA kernel needs compute capability 8.0 or higher")
    eager, sdpa = models(dtype)
    input_ids = torch.randint(4, 99, (3, 12), device="cuda")
    labels = torch.randint(4, 99, (3, 9), device="cuda")
    batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
    batch["decoder_attention_mask"] = torch.ones_like(labels)
    eager_logits, eager_grads = forward_backward(eager, batch)
    sdpa_logits, sdpa_grads = forward_backward(sdpa, batch)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises where a call cannot use it (a mask, a head size)
        flash_logits, flash_grads = forward_backward(sdpa, batch)
    for logits, grads in ((sdpa_logits, sdpa_grads), (flash_logits, flash_grads)):
        assert relative_error(logits, eager_logits) < TOLERANCE[dtype]
        assert relative_error(grads, eager_grads) < 2 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, *DTYPES], ids=["fp32", "bf16", "fp16"])
def test_eager_and_sdpa_agree_on_a_padded_batch(dtype):
    if dtype == torch.bfloat16:
        require_bf16()
    eager, sdpa = models(dtype)
    input_ids, attention_mask, labels = random_batch(batch_size=4, source_length=11, target_length=8)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    batch["decoder_attention_mask"] = (labels != -100).long()
    batch = {name: value.cuda() for name, value in batch.items()}
    real = batch["labels"] != -100
    with torch.no_grad():
        a, b = eager.eval()(**batch), sdpa.eval()(**batch)
    assert relative_error(b.logits[real], a.logits[real]) < TOLERANCE[dtype]
    assert b.loss.item() == pytest.approx(a.loss.item(), rel=TOLERANCE[dtype])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_all_padding_rows_are_finite_in_half_precision(attn, dtype):
    """A source of padding only, and a target without a label: logits, loss and gradients stay finite."""
    if dtype == torch.bfloat16:
        require_bf16()
    config = tiny_config(label_smoothing=0.1)
    model = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn)
    model = model.to("cuda", dtype).train()
    input_ids, attention_mask, labels = random_batch(batch_size=4)
    input_ids[1], attention_mask[1] = 0, 0
    labels[2] = -100
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out = model(**{name: value.cuda() for name, value in batch.items()})
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    out.loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), name


# A command's process (its CUDA settings, then attention with a padding mask, forward and backward): the names of the
# CUDA kernels that ran.
KERNELS_OF_A_COMMAND = textwrap.dedent(
    """
    import torch
    from hf_vanilla_transformer.cuda import cuda_defaults

    cuda_defaults()
    q, k, v = (torch.randn(8, 2, 40, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = (torch.arange(40, device="cuda") < 30)[None, None, None, :].expand(8, 1, 40, 40)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
        torch.cuda.synchronize()
    print("\\n".join(event.key for event in profile.key_averages()))
    """
)


def test_a_commands_attention_does_not_run_cudnns_kernel_which_plans_every_new_shape():
    require_bf16()
    env = {name: value for name, value in os.environ.items() if name != "TORCH_CUDNN_SDPA_DEPRIORITIZED"}
    run = subprocess.run([sys.executable, "-c", KERNELS_OF_A_COMMAND], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() and "cudnn" not in run.stdout.lower(), run.stdout
