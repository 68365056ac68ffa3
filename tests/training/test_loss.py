"""The translation trainer's loss (`chunked_token_cross_entropy`, Trainer's `compute_loss_func`): the model's own
label-smoothed cross-entropy in value and gradient, computed one chunk of rows at a time so that no float32 copy of
all the logits exists; transformers' `label_smoothing_factor` takes its place."""

import pytest
import torch
from transformers import Seq2SeqTrainingArguments

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model.input_checks import CACHE_NAME
from hf_vanilla_transformer.model.modeling_vanilla_transformer import token_cross_entropy
from hf_vanilla_transformer.training import loss as training_loss
from hf_vanilla_transformer.training.loss import chunked_token_cross_entropy
from hf_vanilla_transformer.training.trainer import TranslationTrainer
from tests.helpers import random_batch, tiny_config


VOCAB = 37


def loss_and_gradient(loss_function, logits, labels, num_items_in_batch, smoothing):
    logits = logits.detach().requires_grad_()
    loss = loss_function(logits, labels, num_items_in_batch, smoothing)
    loss.backward()
    return loss, logits.grad


reference = token_cross_entropy  # the model's loss: one float32 copy of all the logits
ours = chunked_token_cross_entropy


def random_logits(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(*shape, VOCAB, generator=g)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("num_items_in_batch", [None, 40, torch.tensor(40)], ids=["none", "int", "tensor"])
def test_the_loss_and_its_gradient_are_the_models(dtype, smoothing, num_items_in_batch, monkeypatch):
    monkeypatch.setattr(training_loss, "LOSS_CHUNK_ROWS", 4)  # 22 rows: 5 full chunks and 2 rows
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


class Float32Sizes(torch.overrides.TorchFunctionMode):
    """The largest float32 tensor made while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
            self.largest = max(self.largest, out.numel())
        return out


def test_the_loss_holds_float32_logits_for_one_chunk_of_rows_at_a_time(monkeypatch):
    """No float32 tensor of the logits' size is made in the forward or the backward pass, whatever their dtype."""
    monkeypatch.setattr(training_loss, "LOSS_CHUNK_ROWS", 8)
    logits = random_logits((50,), torch.bfloat16).requires_grad_()
    labels = torch.randint(0, VOCAB, (50,))
    with Float32Sizes() as sizes:
        ours(logits, labels, None, 0.1).backward()
    assert sizes.largest == 8 * VOCAB


def translation_trainer(model, **arguments) -> TranslationTrainer:
    args = Seq2SeqTrainingArguments(output_dir="unused", report_to=[], use_cpu=True, **arguments)
    return TranslationTrainer(model=model, args=args)


def training_batch() -> dict:
    """A padded batch as the translation collator makes it: labels and the target's padding marked."""
    input_ids, attention_mask, labels = random_batch()
    target_mask = (labels != -100).long()
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, decoder_attention_mask=target_mask)


def trainer_step(trainer, batch: dict, num_items_in_batch=None):
    """The trainer's loss of `batch`, the model's outputs and its gradients."""
    trainer.model.zero_grad()
    loss, outputs = trainer.compute_loss(trainer.model, dict(batch), True, num_items_in_batch)
    loss.backward()
    return loss, outputs, {name: p.grad.clone() for name, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("num_items_in_batch", [None, torch.tensor(40)], ids=["batch", "accumulated"])
def test_the_trainer_computes_the_models_loss_and_gradients_from_its_logits(num_items_in_batch):
    model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0, label_smoothing=0.1)).train()
    trainer, batch = translation_trainer(model), training_batch()
    assert trainer.compute_loss_func == trainer.token_loss
    loss, outputs, grads = trainer_step(trainer, batch, num_items_in_batch)
    assert outputs.loss is None and outputs.get(CACHE_NAME) is None  # called without labels, and without a cache
    model.zero_grad()
    expected = model(**batch, num_items_in_batch=num_items_in_batch).loss  # the model's own loss, from its labels
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, atol=1e-7, rtol=1e-5, msg=name)


def test_a_training_step_saves_no_float32_logits_for_its_backward_pass():
    """In bf16 autocast the loss keeps the bf16 logits (which the model returns anyway) and a float32 logsumexp per
    row, not a float32 (n, v) log-softmax."""
    model = VanillaTransformerForConditionalGeneration._from_config(
        tiny_config(vocab_size=99, dropout=0.0, label_smoothing=0.1)
    ).train()
    trainer, batch = translation_trainer(model), training_batch()
    saved = []

    def keep(tensor):
        saved.append((tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        with torch.autocast("cpu", torch.bfloat16):
            trainer.compute_loss(model, batch).backward()
    assert (batch["labels"].numel(), 99) in [shape for shape, dtype in saved if dtype == torch.bfloat16]
    assert [shape for shape, dtype in saved if shape[-1:] == (99,) and dtype == torch.float32] == []


def test_a_training_steps_loss_and_gradients_are_those_of_one_chunk(monkeypatch):
    model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0, label_smoothing=0.1)).train()
    trainer, batch = translation_trainer(model), training_batch()

    def step(chunk_rows):
        monkeypatch.setattr(training_loss, "LOSS_CHUNK_ROWS", chunk_rows)
        return trainer_step(trainer, batch)

    (chunked, _, grads), (whole, _, whole_grads) = step(3), step(10**6)
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, whole_grads[name], atol=1e-7, rtol=1e-5, msg=name)


def test_transformers_label_smoothing_factor_replaces_it_with_its_label_smoother():
    """MarianMT's route in the recipe: its config has no label smoothing."""
    model = VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0))
    trainer = translation_trainer(model, label_smoothing_factor=0.1)
    assert trainer.compute_loss_func is None and trainer.label_smoother.epsilon == 0.1
