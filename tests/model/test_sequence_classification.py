"""The encoder-only classifier: pooling, padding, transformers' num_labels / problem_type losses, Trainer fine-tuning,
saving, remote code, pipeline("text-classification"), and the classification recipe (`train classification`)."""

import json
import textwrap

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    pipeline,
)

from hf_vanilla_transformer import VanillaTransformerForSequenceClassification
from hf_vanilla_transformer.data.corpus import load_parallel_corpus
from hf_vanilla_transformer.data.tokenizer import train_shared_bpe_tokenizer
from hf_vanilla_transformer.recipes.classification import (
    QUESTION_LABELS,
    classification_metrics,
    classifier_config,
    question_or_statement,
    tokenize_for_classification,
)
from tests.helpers import run_without_package, tiny_config, tiny_tokenizer


LABELS = ("negative", "neutral", "positive")


def make_model(attn_implementation="sdpa", **overrides):
    config = tiny_config(**{"num_labels": 3, **overrides})
    model = VanillaTransformerForSequenceClassification._from_config(config, attn_implementation=attn_implementation)
    return model.eval()


def padded_batch(side="right"):
    """Three rows of 6, 4 and 2 tokens ending with </s>, padded on `side`."""
    g = torch.Generator().manual_seed(0)
    rows = [torch.cat([torch.randint(4, 99, (n - 1,), generator=g), torch.tensor([2])]) for n in (6, 4, 2)]
    input_ids = torch.zeros(3, 6, dtype=torch.long)
    attention_mask = torch.zeros(3, 6, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(6 - len(row), 6) if side == "left" else slice(0, len(row))
        input_ids[i, span], attention_mask[i, span] = row, 1
    return rows, input_ids, attention_mask


# --- the architecture ------------------------------------------------------------------------------------------------


def test_auto_class_builds_the_encoder_stack_with_a_classifier():
    model = AutoModelForSequenceClassification.from_config(tiny_config(num_labels=3))
    assert type(model) is VanillaTransformerForSequenceClassification and not model.can_generate()
    names = set(model.state_dict())
    for name in [
        "model.embed_tokens.weight",
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.0.self_attn_layer_norm.bias",
        "model.layers.0.fc1.weight",
        "model.layers.0.final_layer_norm.weight",
        "classifier.weight",
        "classifier.bias",
    ]:
        assert name in names, name
    assert not any("decoder" in name or "encoder_attn" in name for name in names)
    assert model.classifier.weight.shape == (3, 16)
    # the encoder-decoder flag does not matter: the classifier always uses the encoder stack
    same = VanillaTransformerForSequenceClassification(tiny_config(num_labels=3, is_encoder_decoder=False))
    assert set(same.state_dict()) == names


@pytest.mark.parametrize("pooling", ["mean", "first"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_pooling_by_hand_from_the_encoder_states(pooling, side):
    model = make_model(classifier_pooling=pooling)
    _, input_ids, attention_mask = padded_batch(side)
    with torch.no_grad():
        states = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    for i in range(3):
        real = states[i, attention_mask[i].bool()]
        pooled = real.mean(0) if pooling == "mean" else real[0]
        torch.testing.assert_close(logits[i], model.classifier(pooled), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("pooling", ["mean", "first"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_give_the_logits_of_each_row_alone(side, pooling, attn):
    model = make_model(attn, classifier_pooling=pooling)
    rows, input_ids, attention_mask = padded_batch(side)
    with torch.no_grad():
        batched = model(input_ids=input_ids, attention_mask=attention_mask).logits
        alone = torch.cat([model(input_ids=row[None]).logits for row in rows])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


def test_attention_is_bidirectional():
    model = make_model()
    ids = torch.tensor([[5, 6, 7, 8, 2]])
    other = ids.clone()
    other[0, -2] = 9
    with torch.no_grad():
        first = model.model(input_ids=ids).last_hidden_state[0, 0]
        changed = model.model(input_ids=other).last_hidden_state[0, 0]
    assert not torch.allclose(first, changed)  # the first token sees the later ones


# --- losses: num_labels and problem_type, as transformers defines them -----------------------------------------------


def test_integer_labels_are_single_label_classification_with_cross_entropy():
    model = make_model()
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([2, 0, 1])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert model.config.problem_type == "single_label_classification"
    expected = -out.logits.double().log_softmax(-1)[torch.arange(3), labels].mean()
    torch.testing.assert_close(out.loss.double(), expected, atol=1e-6, rtol=1e-6)


def test_one_label_is_regression_with_mean_squared_error():
    model = make_model(num_labels=1)
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([0.5, -1.0, 2.0])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert model.config.problem_type == "regression" and out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, ((out.logits[:, 0] - labels) ** 2).mean())


def test_float_label_vectors_are_multi_label_classification_with_binary_cross_entropy():
    model = make_model()
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert model.config.problem_type == "multi_label_classification"
    p = out.logits.double().sigmoid()
    expected = -(labels * p.log() + (1 - labels) * (1 - p).log()).mean()
    torch.testing.assert_close(out.loss.double(), expected, atol=1e-6, rtol=1e-6)


def test_an_explicit_problem_type_is_kept():
    model = make_model(num_labels=2, problem_type="regression")
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([[0.5, 1.0], [0.0, -1.0], [2.0, 0.0]])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert model.config.problem_type == "regression"
    torch.testing.assert_close(out.loss, ((out.logits - labels) ** 2).mean())


def test_single_label_loss_with_num_items_in_batch_adds_up_over_micro_batches():
    model = make_model()
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([2, 0, 1])
    full = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    parts = [
        model(
            input_ids=input_ids[i : i + 1],
            attention_mask=attention_mask[i : i + 1],
            labels=labels[i : i + 1],
            num_items_in_batch=torch.tensor(3),
        ).loss
        for i in range(3)
    ]
    torch.testing.assert_close(sum(parts), full, atol=1e-6, rtol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients():
    model = make_model(dropout=0.0).train()
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([2, 0, 1])

    def grads():
        model.zero_grad()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain = grads()
    model.activation_checkpointing_enable()
    checkpointed = grads()
    assert all(grad.abs().sum() > 0 for grad in plain.values())
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_outputs_follow_transformers_conventions():
    model = make_model("eager")
    _, input_ids, attention_mask = padded_batch()
    labels = torch.tensor([2, 0, 1])
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        output_hidden_states=True,
        output_attentions=True,
    )
    assert len(out.hidden_states) == 3 and out.hidden_states[0].shape == (3, 6, 16)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 6, 6)
    assert torch.all(out.attentions[0][2, :, :2, 2:] == 0)  # no weight on padding
    as_tuple = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=False)
    torch.testing.assert_close(as_tuple[0], out.loss)
    torch.testing.assert_close(as_tuple[1], out.logits)
    assert model.get_input_embeddings() is model.model.embed_tokens


# --- saving, remote code, pipeline -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def saved(tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    config = classifier_config(tokenizer, LABELS, d_model=16, layers=2, heads=4, ffn_dim=32)
    config.init_std = 1.0  # an untrained model whose predictions differ visibly between inputs
    model = VanillaTransformerForSequenceClassification(config).eval()
    path = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, path


SENTENCES = ["Wo ist der Bahnhof", "Tom is not here", "Kannst du mir helfen", "I am hungry", "Das Wetter"]


def test_save_load_round_trip_keeps_the_weights_and_the_label_names(saved, tokenizer):
    model, path = saved
    reloaded, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True)
    assert type(reloaded) is VanillaTransformerForSequenceClassification
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert reloaded.config.id2label == dict(enumerate(LABELS)) and reloaded.config.label2id["positive"] == 2
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    torch.testing.assert_close(reloaded.eval()(**batch).logits, model(**batch).logits, atol=0, rtol=0)


def test_text_classification_pipeline_reports_label_names_and_softmax_scores(saved, tokenizer):
    model, _ = saved
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    with torch.no_grad():
        probabilities = model(**tokenizer(SENTENCES, return_tensors="pt", padding=True)).logits.softmax(-1)
    results = classify(SENTENCES, batch_size=2)
    assert [r["label"] for r in results] == [LABELS[i] for i in probabilities.argmax(-1)]
    for result, row in zip(results, probabilities):
        assert result["score"] == pytest.approx(row.max().item(), abs=1e-5)
    every_label = classify(SENTENCES[0], top_k=None)
    assert sorted(r["label"] for r in every_label) == sorted(LABELS)
    assert sum(r["score"] for r in every_label) == pytest.approx(1.0, abs=1e-5)


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoModelForSequenceClassification, pipeline
    path, sentences = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    classify = pipeline("text-classification", model=path, trust_remote_code=True)
    print(json.dumps(classify(sentences, top_k=None)))
    """
)


@pytest.mark.slow
def test_remote_code_classifies_in_a_process_without_the_package(saved, tmp_path):
    _, path = saved
    result = run_without_package(REMOTE_SCRIPT, str(path), json.dumps(SENTENCES), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    local = pipeline("text-classification", model=str(path))(SENTENCES, top_k=None)
    for remote_row, local_row in zip(remote, local):
        assert [r["label"] for r in remote_row] == [r["label"] for r in local_row]
        assert [r["score"] for r in remote_row] == pytest.approx([r["score"] for r in local_row], abs=1e-6)


# --- the task, metrics and training ----------------------------------------------------------------------------------


def test_questions_and_statements_lose_their_punctuation_and_keep_their_label():
    corpus = DatasetDict(
        {
            "train": Dataset.from_dict(
                {
                    "translation": [
                        {"de": "Wo ist Tom?", "en": "Where is Tom?"},
                        {"de": "Komm her!", "en": "Come here!"},
                        {"de": "„Wer ist da?“ „Tom.“", "en": '"Is it you?" "Yes, it\'s me?"'},
                    ]
                }
            )
        }
    )
    rows = question_or_statement(corpus)["train"]
    assert rows["text"] == [
        "Wo ist Tom",
        "Where is Tom",
        "Komm her",
        "Come here",
        "„Wer ist da“ „Tom",
        '"Is it you" "Yes, it\'s me',
    ]
    assert rows["label"] == [1, 1, 0, 0, 0, 1]
    assert rows["language"] == ["de", "en"] * 3
    assert QUESTION_LABELS[1] == "question"


def test_classification_metrics_count_accuracy_and_mean_recall():
    logits = np.array([[2.0, 0.0], [3.0, 1.0], [0.0, 1.0], [1.0, 0.0]])  # predicts 0, 0, 1, 0
    labels = np.array([0, 0, 1, 1])
    metrics = classification_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert metrics == {"accuracy": 0.75, "balanced_accuracy": 0.75}
    always_zero = classification_metrics(EvalPrediction(predictions=np.tile([1.0, 0.0], (4, 1)), label_ids=labels))
    assert always_zero == {"accuracy": 0.5, "balanced_accuracy": 0.5}


def test_trainer_fine_tunes_a_language_identifier_well_above_chance(tmp_path):
    """German or English? 300 sentences of the bundled corpus to train on, 200 others to test."""
    pairs = load_parallel_corpus()["train"]["translation"][:250]
    rows = [(pair[lang], label) for pair in pairs for label, lang in enumerate(("de", "en"))]
    tokenizer = train_shared_bpe_tokenizer([text for text, _ in rows], vocab_size=300)
    data = Dataset.from_dict({"text": [t for t, _ in rows], "label": [label for _, label in rows]})
    data = tokenize_for_classification(
        DatasetDict({"train": data.select(range(300)), "test": data.select(range(300, 500))}), tokenizer
    )
    torch.manual_seed(0)
    config = classifier_config(tokenizer, ("de", "en"), d_model=32, layers=1, heads=2, ffn_dim=64, dropout=0.0)
    model = VanillaTransformerForSequenceClassification(config)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        gradient_accumulation_steps=2,
        num_train_epochs=4,
        learning_rate=3e-3,
        warmup_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["test"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics,
    )
    before = trainer.evaluate()["eval_accuracy"]
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_accuracy"] >= 0.9 and after["eval_accuracy"] > before + 0.2, (before, after)


def test_an_unknown_pooling_is_refused_naming_the_setting():
    with pytest.raises(StrictDataclassFieldValidationError, match="classifier_pooling"):
        tiny_config(classifier_pooling="max")


def test_half_precision_without_an_attention_mask():
    model = make_model().to(torch.bfloat16)
    logits = model(input_ids=torch.randint(4, 100, (2, 5))).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
