"""Sequence classification with the encoder stack: the demo task built from the bundled corpus, its data and metrics.

The task: is a German or English sentence a question? The model sees the sentence without its question mark (and
without any final punctuation), so it has to tell "Kommst du morgen" from "Du kommst morgen" by the words and their
order.
"""

import re

import numpy as np
from datasets import DatasetDict

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .language_modeling import single_stack_config


QUESTION_LABELS = ("statement", "question")  # label ids 0 and 1
_CLOSING_QUOTES = " \"'“”„«»‚‘’"
_FINAL_PUNCTUATION = re.compile(r"[\s.!…" + re.escape(_CLOSING_QUOTES) + r"]+$")


def question_or_statement(corpus: DatasetDict, languages: tuple[str, ...] = ("de", "en")) -> DatasetDict:
    """Every sentence of `languages` in each split of a parallel corpus (a `translation` column, as from
    `load_parallel_corpus`) as `{"text", "label", "language"}` rows: label 1 if the sentence ends with a question mark.
    The text loses every "?" (a dialogue's earlier question would give the answer away) and its final punctuation."""

    def split_sentences(batch):
        rows = {"text": [], "label": [], "language": []}
        for pair in batch["translation"]:
            for language in languages:
                sentence = pair[language]
                rows["label"].append(int(sentence.rstrip(_CLOSING_QUOTES).endswith("?")))
                rows["text"].append(_FINAL_PUNCTUATION.sub("", sentence.replace("?", "")))
                rows["language"].append(language)
        return rows

    return DatasetDict(
        {
            split: dataset.map(split_sentences, batched=True, remove_columns=dataset.column_names)
            for split, dataset in corpus.items()
        }
    )


def tokenize_for_classification(dataset: DatasetDict, tokenizer, max_length: int = 64) -> DatasetDict:
    """`input_ids` and `attention_mask` of the `text` column (unpadded: `DataCollatorWithPadding` pads batches)."""
    return dataset.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=max_length), batched=True, desc="tokenizing"
    )


def classifier_config(tokenizer, labels: tuple[str, ...] | list[str], **sizes) -> VanillaTransformerConfig:
    """An encoder config (sizes as in [`single_stack_config`]) with `id2label` / `label2id` from `labels`: the
    text-classification pipeline reports these names."""
    return single_stack_config(
        tokenizer, id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)}, **sizes
    )


def classification_metrics(eval_prediction) -> dict[str, float]:
    """`compute_metrics` for `Trainer`: accuracy, and the mean of the per-class recalls ("balanced accuracy", which a
    model that always answers the majority class cannot raise above 1 / number of classes)."""
    logits, labels = eval_prediction.predictions, eval_prediction.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    predictions = logits.argmax(-1)
    recalls = [float((predictions[labels == label] == label).mean()) for label in np.unique(labels)]
    return {"accuracy": float((predictions == labels).mean()), "balanced_accuracy": float(np.mean(recalls))}


__all__ = [
    "QUESTION_LABELS",
    "classification_metrics",
    "classifier_config",
    "question_or_statement",
    "tokenize_for_classification",
]
