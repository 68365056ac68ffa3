"""Training steps on CUDA: bf16 and fp16 autocast (as `--bf16` / `--fp16` train) finite and close to float32, as
few host synchronisations per step as the CPU test counts, the packed rows rounded up without changing a real token's
result, and the chunked loss equal to torch's."""

import warnings

import pytest
import torch

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.model import padding
from hf_vanilla_transformer.training import loss as training_loss
from tests.helpers import (
    CUDA_TESTS,
    HOST_READS_PER_TRAINING_STEP,
    random_batch,
    record_packed_rows,
    require_bf16,
    tiny_config,
)
from tests.training.test_loss import loss_and_gradient, ours, reference


pytestmark = CUDA_TESTS


def model_and_batch(attn_implementation="sdpa"):
    config = tiny_config(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.0, label_smoothing=0.1)
    model = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
    input_ids, attention_mask, labels = random_batch(batch_size=4, source_length=9, target_length=7)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    return model.cuda().train(), {name: value.cuda() for name, value in batch.items()}


def gradients(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_half_precision_training_step_is_finite_and_close_to_float32(dtype):
    if dtype == torch.bfloat16:
        require_bf16()
    model, batch = model_and_batch()
    reference = model(**batch).loss
    reference.backward()
    reference_gradients = gradients(model)
    model.zero_grad(set_to_none=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # What Trainer does for --fp16, from a scale at which this model's gradients cannot overflow: the step is taken.
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, enabled=dtype == torch.float16)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cuda", dtype):
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    half_gradients = gradients(model)
    assert torch.isfinite(loss) and torch.isfinite(half_gradients).all()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-2)
    assert torch.nn.functional.cosine_similarity(half_gradients, reference_gradients, dim=0) > 0.99
    scaler.step(optimizer)
    scaler.update()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(not torch.equal(p, q) for p, q in zip(model.parameters(), before) if p.grad is not None)


@pytest.mark.parametrize("decoder_mask", [False, True], ids=["labels-only", "with-decoder-mask"])
def test_a_training_step_synchronises_with_the_host_as_often_as_the_cpu_test_counts(decoder_mask, monkeypatch):
    """torch.cuda's sync debug mode warns at every operation that makes the host wait for the GPU. The stacks pack
    their rows up to a multiple of 8 here: at the default multiple this batch is too small to pack."""
    monkeypatch.setitem(padding.PACKED_ROWS_MULTIPLE, "cuda", 8)
    model, batch = model_and_batch()
    if decoder_mask:
        batch["decoder_attention_mask"] = (batch["labels"] != -100).long()
    model(**batch).loss.backward()  # warm-up: kernels loaded, allocator primed
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            model(**batch).loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # Only the per-operation warnings: torch also warns once per process that the mode is a prototype.
    syncs = [str(w.message) for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
    assert len(syncs) == HOST_READS_PER_TRAINING_STEP, syncs


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_packed_rows_rounded_up_on_cuda_change_nothing_a_real_token_sees(attn_implementation, monkeypatch):
    """On CUDA each stack packs its rows up to a multiple of `PACKED_ROWS_MULTIPLE` with padded positions, here some of
    a source row and a target row that are all padding: the loss, the gradients and the encoder's output (zeros at
    every padded position) are those of the real rows alone."""
    config = tiny_config(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.0, label_smoothing=0.1)
    model = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
    model = model.cuda().train()
    input_ids, attention_mask, labels = random_batch(batch_size=8, source_length=30, target_length=30)
    input_ids[1], attention_mask[1], labels[3] = 0, 0, -100
    batch = {name: value.cuda() for name, value in dict(input_ids=input_ids, attention_mask=attention_mask).items()}

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(**batch, labels=labels.cuda()).loss
        loss.backward()
        with torch.no_grad():
            states = model.get_encoder()(**batch).last_hidden_state
        return loss, gradients(model), states

    rows = record_packed_rows(monkeypatch)
    rounded = step()
    monkeypatch.setitem(padding.PACKED_ROWS_MULTIPLE, "cuda", 1)
    exact = step()
    assert rows == [192, 192, 192, 156, 185, 156]  # 156 source and 185 target tokens, rounded up to multiples of 64
    assert torch.all(rounded[2][~batch["attention_mask"].bool()] == 0)
    for value, expected in zip(rounded, exact):
        assert torch.isfinite(value).all()
        torch.testing.assert_close(value, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_chunked_loss_is_torchs_cross_entropy_on_cuda(dtype, monkeypatch):
    """The trainer's loss against the model's (a float32 copy of the logits) in value and gradient, 64-row chunks."""
    if dtype == torch.bfloat16:
        require_bf16()
    monkeypatch.setattr(training_loss, "LOSS_CHUNK_ROWS", 64)
    g = torch.Generator("cuda").manual_seed(0)
    logits = (4 * torch.randn(300, 1000, generator=g, device="cuda")).to(dtype)
    labels = torch.randint(0, 1000, (300,), generator=g, device="cuda")
    labels[::7] = -100
    loss, grad = loss_and_gradient(ours, logits, labels, None, 0.1)
    expected_loss, expected_grad = loss_and_gradient(reference, logits, labels, None, 0.1)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad, expected_grad, atol=1e-7, rtol=1e-5 if dtype == torch.float32 else 2**-7)
