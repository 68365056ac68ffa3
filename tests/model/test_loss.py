"""The loss, `token_cross_entropy`: torch's label-smoothed cross-entropy in value and gradient, computed one chunk of
rows at a time so that no float32 copy of all the logits exists."""

import pytest
import torch
from torch import nn

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model import modeling_vanilla_transformer
from hf_vanilla_transformer.model.modeling_vanilla_transformer import token_cross_entropy
from tests.helpers import random_batch, tiny_config


VOCAB = 37


def reference(logits, labels, num_items_in_batch, smoothing):
    """What `token_cross_entropy` computed before it was chunked: one float32 copy of all the logits."""
    logits, labels = logits.reshape(-1, logits.shape[-1]), labels.flatten()
    loss = nn.functional.cross_entropy(
        logits.float(), labels, ignore_index=-100, reduction="sum", label_smoothing=smoothing
    )
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum().clamp(min=1)
    return loss / num_items_in_batch


def loss_and_gradient(loss_function, logits, labels, num_items_in_batch, smoothing):
    logits = logits.detach().requires_grad_()
    loss = loss_function(logits, labels, num_items_in_batch, smoothing)
    loss.backward()
    return loss, logits.grad


def ours(logits, labels, num_items_in_batch, smoothing):
    return token_cross_entropy(logits, labels, num_items_in_batch, tiny_config(label_smoothing=smoothing))


def random_logits(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(*shape, VOCAB, generator=g)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("num_items_in_batch", [None, 40, torch.tensor(40)], ids=["none", "int", "tensor"])
def test_the_loss_and_its_gradient_are_torchs_cross_entropy(dtype, smoothing, num_items_in_batch, monkeypatch):
    monkeypatch.setattr(modeling_vanilla_transformer, "LOSS_CHUNK_ROWS", 4)  # 22 rows: 5 full chunks and 2 rows
    logits = random_logits((2, 11), dtype)
    labels = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    labels[0, 7:] = labels[1, 3] = -100
    loss, grad = loss_and_gradient(ours, logits, labels, num_items_in_batch, smoothing)
    expected_loss, expected_grad = loss_and_gradient(reference, logits, labels, num_items_in_batch, smoothing)
    assert loss.dtype == torch.float32 and grad.dtype == dtype
    torch.testing.assert_close(loss, expected_loss, atol=1e-6, rtol=1e-6)
    # bf16: the reference's gradient is rounded from float32 to bf16 as ours is, at most one bf16 step apart.
    torch.testing.assert_close(grad, expected_grad, atol=1e-7, rtol=1e-6 if dtype == torch.float32 else 2**-7)
    assert not grad[0, 7:].any() and not grad[1, 3].any()


@pytest.mark.parametrize("rows", [0, 5], ids=["no-rows", "all-ignored"])
def test_a_batch_without_targets_has_loss_and_gradient_zero(rows):
    logits = random_logits((rows,), torch.bfloat16)
    labels = torch.full((rows,), -100)
    loss, grad = loss_and_gradient(ours, logits, labels, None, 0.1)
    assert loss.item() == 0.0 and grad.shape == logits.shape and not grad.any()


def test_the_loss_holds_float32_logits_for_one_chunk_of_rows_at_a_time(monkeypatch):
    """No float32 tensor of the logits' size is made in the forward or the backward pass, whatever their dtype."""
    monkeypatch.setattr(modeling_vanilla_transformer, "LOSS_CHUNK_ROWS", 8)

    class Float32Sizes(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.largest = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                self.largest = max(self.largest, out.numel())
            return out

    logits = random_logits((50,), torch.bfloat16).requires_grad_()
    labels = torch.randint(0, VOCAB, (50,))
    with Float32Sizes() as sizes:
        ours(logits, labels, None, 0.1).backward()
    assert sizes.largest == 8 * VOCAB


def test_a_training_step_saves_no_float32_logits_for_its_backward_pass():
    """In bf16 autocast the loss keeps the bf16 logits (which the model returns anyway) and a float32 logsumexp per
    target, not a float32 (n, v) log-softmax."""
    config = tiny_config(vocab_size=99, dropout=0.0, label_smoothing=0.1)
    model = VanillaTransformerForConditionalGeneration._from_config(config).train()
    input_ids, attention_mask, labels = random_batch()
    saved = []

    def keep(tensor):
        saved.append((tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        with torch.autocast("cpu", torch.bfloat16):
            model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    n = int((labels != -100).sum())
    assert ((n, 99), torch.bfloat16) in saved
    assert [shape for shape, dtype in saved if shape[-1:] == (99,) and dtype == torch.float32] == []


def test_a_training_steps_loss_and_gradients_are_those_of_one_chunk(monkeypatch):
    model = VanillaTransformerForConditionalGeneration._from_config(tiny_config(dropout=0.0, label_smoothing=0.1))
    input_ids, attention_mask, labels = random_batch()

    def step(chunk_rows):
        monkeypatch.setattr(modeling_vanilla_transformer, "LOSS_CHUNK_ROWS", chunk_rows)
        model.zero_grad()
        out = model.train()(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        return out, {name: p.grad.clone() for name, p in model.named_parameters()}

    (chunked, grads), (whole, whole_grads) = step(3), step(10**6)
    torch.testing.assert_close(chunked.loss, reference(whole.logits, labels, None, 0.1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(chunked.loss, whole.loss, atol=1e-6, rtol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, whole_grads[name], atol=1e-7, rtol=1e-5, msg=name)
