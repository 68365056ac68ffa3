"""The output projection's prepacked CPU path (`model/output_projection.py`): the same logits as the Linear, a copy that
follows the weight, and the Linear itself wherever the prepacked copy does not apply."""

import pytest
import torch
from torch import nn

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model.output_projection import prepacking_works, uses_prepacked_weight, vocabulary_logits
from tests.helpers import random_batch, tiny_config


needs_prepacking = pytest.mark.skipif(
    not prepacking_works(), reason="oneDNN's x86 kernels are not available on this CPU"
)


def make_model():
    return VanillaTransformerForConditionalGeneration(tiny_config(dropout=0.0)).eval()


@needs_prepacking
@pytest.mark.parametrize("shape", [(5, 32), (3, 4, 32)], ids=["packed rows", "batch x time"])
def test_prepacked_logits_equal_the_linear(shape):
    lm_head = nn.Linear(32, 99, bias=False)
    hidden_states = torch.randn(shape)
    with torch.no_grad():
        assert uses_prepacked_weight(lm_head, hidden_states)
        torch.testing.assert_close(vocabulary_logits(lm_head, hidden_states), lm_head(hidden_states))
        strided = hidden_states[..., ::2, :]  # as generate() reads the last position of each row
        torch.testing.assert_close(vocabulary_logits(lm_head, strided), lm_head(strided))


@needs_prepacking
def test_the_prepacked_copy_follows_the_weight():
    model = make_model()
    input_ids, attention_mask, labels = random_batch()
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def logits():
        with torch.no_grad():
            return model(**batch).logits

    logits()  # makes the prepacked copy
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(**batch).loss.backward()
    optimizer.step()  # an in-place update of the tied weight
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    with torch.no_grad():
        hidden_states = model.model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids).last_hidden_state
        expected = model.lm_head(hidden_states)
    torch.testing.assert_close(logits(), expected)
    other = make_model()
    model.load_state_dict(other.state_dict())  # copied in place
    torch.testing.assert_close(logits(), other(**batch).logits.detach())
    model.lm_head.weight = nn.Parameter(torch.zeros_like(model.lm_head.weight))  # replaced
    assert logits().abs().max() == 0


def test_the_linear_itself_runs_where_the_prepacked_copy_does_not_apply():
    model = make_model()
    hidden_states = torch.randn(2, 3, 32)
    assert not uses_prepacked_weight(model.lm_head, hidden_states)  # gradients on: training
    with torch.no_grad():
        with torch.autocast("cpu", torch.bfloat16):
            assert not uses_prepacked_weight(model.lm_head, hidden_states)
        assert not uses_prepacked_weight(model.lm_head, hidden_states.double())
        calls = []
        handle = model.lm_head.register_forward_hook(lambda *args: calls.append(1))
        input_ids, attention_mask, _ = random_batch()
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3, eos_token_id=None)
        assert len(calls) == 3  # a user's hook still sees every step
        handle.remove()
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        assert not uses_prepacked_weight(quantized.lm_head, hidden_states)
        assert quantized.generate(input_ids=input_ids, max_new_tokens=3).shape[1] <= 4


def test_training_gradients_reach_the_tied_weight():
    model = make_model().train()
    input_ids, attention_mask, labels = random_batch()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
