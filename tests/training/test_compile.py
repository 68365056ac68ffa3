"""Training under `torch.compile` (Trainer's `--torch_compile`): the model's forward and backward in one graph, a
bounded number of compilations over batches of varying shapes, and the losses of eager training."""

import numpy as np
import pytest
import torch
from accelerate.utils import compile_regions
from datasets import Dataset
from torch._dynamo.utils import counters
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.training.trainer import TranslationDataCollator, TranslationTrainer
from tests.helpers import random_batch, tiny_config, tiny_tokenizer


@pytest.mark.parametrize("decoder_mask", [False, True], ids=["labels-only", "with-decoder-mask"])
def test_a_training_step_compiles_into_one_graph_without_breaks(decoder_mask):
    model = VanillaTransformerForConditionalGeneration._from_config(tiny_config(), attn_implementation="sdpa").train()
    input_ids, attention_mask, labels = random_batch(batch_size=4, source_length=9, target_length=7)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    if decoder_mask:
        batch["decoder_attention_mask"] = (labels != -100).long()
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda **inputs: model(**inputs).loss)(**batch)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


@pytest.mark.parametrize("recorded", [False, True], ids=["outputs", "hidden-states"])
def test_the_compiled_forward_gives_the_eager_outputs_at_every_real_position(recorded):
    """Compiled, the stacks work on all b * t rows, padding included; eager, on the real tokens' rows. The loss, the
    real positions' logits and the gradients agree, and hidden states recorded per layer keep their (b, t, d) shape."""
    model = VanillaTransformerForConditionalGeneration._from_config(
        tiny_config(dropout=0.0, label_smoothing=0.1), attn_implementation="sdpa"
    ).train()
    input_ids, attention_mask, labels = random_batch(batch_size=4, source_length=9, target_length=7)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, output_hidden_states=recorded)
    torch._dynamo.reset()
    eager, eager_grads = loss_and_gradients(model, batch)
    compiled, compiled_grads = loss_and_gradients(model, batch, torch.compile(model))
    torch.testing.assert_close(compiled.loss, eager.loss)
    real = labels != -100
    torch.testing.assert_close(compiled.logits[real], eager.logits[real])
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
    if recorded:
        for states in ("encoder_hidden_states", "decoder_hidden_states"):
            for eager_states, compiled_states in zip(eager[states], compiled[states], strict=True):
                torch.testing.assert_close(compiled_states, eager_states)  # every position: none is packed


def test_compiled_by_layer_the_layers_compute_the_real_tokens_alone_and_give_the_eager_outputs():
    """Regional compilation, as `--torch_compile` compiles with accelerate's ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION
    (`compile_regions`): each layer is compiled on its own, the stacks pack the real tokens eagerly, and the compiled
    layers compute those rows alone, in the same graphs for batches of another shape."""
    model = VanillaTransformerForConditionalGeneration._from_config(
        tiny_config(dropout=0.0, label_smoothing=0.1), attn_implementation="sdpa"
    ).train()
    torch._dynamo.reset()
    counters.clear()
    regional = compile_regions(model, dynamic=True)  # shares the model's parameters
    rows, graphs = [], []
    regional.model.encoder.layers[0].register_forward_pre_hook(lambda layer, args: rows.append(len(args[0])))
    for batch_size, source_length, target_length in ((4, 9, 7), (3, 12, 5)):
        input_ids, attention_mask, labels = random_batch(batch_size, source_length, target_length)
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        eager, eager_grads = loss_and_gradients(model, batch)
        compiled, compiled_grads = loss_and_gradients(model, batch, regional)
        assert rows[-1] == int(attention_mask.sum()) < attention_mask.numel()  # the real tokens' rows
        torch.testing.assert_close(compiled.loss, eager.loss)
        real = labels != -100
        torch.testing.assert_close(compiled.logits[real], eager.logits[real])
        for name, grad in eager_grads.items():
            torch.testing.assert_close(compiled_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
        graphs.append(counters["stats"]["unique_graphs"])
    assert not counters["graph_break"] and graphs[1] == graphs[0]  # the second batch's shapes compiled nothing


def loss_and_gradients(model, batch, forward=None):
    """The outputs of `forward` (by default the model itself; or the model compiled) and the model's gradients."""
    model.zero_grad()
    outputs = (model if forward is None else forward)(**batch)
    outputs.loss.backward()
    return outputs, {name: p.grad.clone() for name, p in model.named_parameters()}


def train(trainer_class, compiled: bool, tmp_path, steps: int) -> list[float]:
    """The losses of `steps` steps of a tiny model on token batches of varying shapes (a plain `Seq2SeqTrainer`
    takes sentence batches of 8), dropout off: eager and compiled differ by float rounding alone."""
    tokenizer = tiny_tokenizer()
    rng = np.random.default_rng(0)
    source = rng.integers(3, 30, 300)
    target = np.clip((source * rng.uniform(0.7, 1.4, 300)).astype(int), 2, 40)
    rows = {
        "input_ids": [rng.integers(4, 100, s).tolist() + [2] for s in source],
        "labels": [rng.integers(4, 100, t).tolist() + [2] for t in target],
    }
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), dropout=0.0))
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / f"{trainer_class.__name__}-{compiled}"),
        report_to=[],
        use_cpu=True,
        seed=7,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=1e-3,
        per_device_train_batch_size=8,
        torch_compile=compiled,
    )
    collator = TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=8)
    extra = dict(max_tokens=256) if trainer_class is TranslationTrainer else {}
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(rows),
        processing_class=tokenizer,
        data_collator=collator,
        **extra,
    )
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.slow
@pytest.mark.parametrize("trainer_class", [TranslationTrainer, Seq2SeqTrainer])
def test_compiled_training_gives_the_eager_losses_with_few_compilations(trainer_class, tmp_path):
    torch._dynamo.reset()
    counters.clear()
    compiled = train(trainer_class, True, tmp_path, steps=12)
    # One graph for the first batch's shapes, then dynamic shapes for the later batches: a bounded number of
    # compilations however many shapes the batches take.
    assert counters["stats"]["unique_graphs"] <= 3 and not counters["graph_break"]
    eager = train(trainer_class, False, tmp_path, steps=12)
    assert compiled == pytest.approx(eager, rel=1e-3)
