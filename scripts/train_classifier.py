#!/usr/bin/env python
"""Train the Transformer's encoder stack as a sentence classifier with `Trainer`: question or statement, for German and
English sentences of the bundled corpus with their question marks removed. Reports test accuracy (overall, per
language, against always answering "statement") and classifies a few sentences with pipeline("text-classification").

    python scripts/train_classifier.py                     # the demo: ~5 minutes on 2 CPU cores

Arguments: the dataclass below plus every `TrainingArguments` field (`--help` lists them all).
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import DataCollatorWithPadding, HfArgumentParser, Trainer, TrainingArguments, pipeline, set_seed

from hf_vanilla_transformer import VanillaTransformerForSequenceClassification
from hf_vanilla_transformer.classification import (
    QUESTION_LABELS,
    classification_metrics,
    classifier_config,
    question_or_statement,
    tokenize_for_classification,
)
from hf_vanilla_transformer.data import BUNDLED_ATTRIBUTION, load_parallel_corpus
from hf_vanilla_transformer.tokenization import train_shared_bpe_tokenizer
from hf_vanilla_transformer.training import TrainingProgressCallback, epochs_seen, write_json


@dataclass
class ClassifierArguments:
    vocab_size: int = field(default=8000, metadata={"help": "Size of the BPE vocabulary trained on the sentences."})
    d_model: int = field(default=256)
    layers: int = field(default=3)
    heads: int = field(default=4)
    ffn_dim: int = field(default=1024)
    dropout: float = field(default=0.1)
    pooling: str = field(default="mean", metadata={"help": "mean or first", "choices": ["mean", "first"]})
    max_train_minutes: float = field(
        default=0,
        metadata={"help": "Also stop after this many minutes (0: none); the result then depends on the machine."},
    )
    examples: list[str] = field(
        default_factory=lambda: [
            "Do you know where Tom lives",
            "I know where Tom lives",
            "Weißt du, wo Tom wohnt",
            "Ich weiß, wo Tom wohnt",
            "You are a teacher",
            "Are you a teacher",
            "Hast du Hunger",
            "Du hast Hunger",
        ],
        metadata={"help": "Sentences (without their punctuation) to classify at the end."},
    )


DEMO_DEFAULTS = dict(
    output_dir="outputs/demo-classifier",
    per_device_train_batch_size=64,
    per_device_eval_batch_size=256,
    learning_rate=5e-4,
    lr_scheduler_type="inverse_sqrt",
    warmup_steps=300,
    adam_beta2=0.98,
    num_train_epochs=3,
    eval_strategy="steps",
    eval_steps=500,
    save_strategy="no",
    logging_steps=100,
    report_to="none",
    seed=42,
)


def main():
    parser = HfArgumentParser((ClassifierArguments, TrainingArguments))
    parser.set_defaults(**DEMO_DEFAULTS, dataloader_pin_memory=torch.cuda.is_available())
    args, training_args = parser.parse_args_into_dataclasses()
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    started = time.time()

    sentences = question_or_statement(load_parallel_corpus("de", "en"))
    tokenizer = train_shared_bpe_tokenizer(sentences["train"]["text"], args.vocab_size)
    sizes = dict(d_model=args.d_model, layers=args.layers, heads=args.heads, ffn_dim=args.ffn_dim)
    config = classifier_config(
        tokenizer, QUESTION_LABELS, **sizes, dropout=args.dropout, classifier_pooling=args.pooling
    )
    model = VanillaTransformerForSequenceClassification(config)
    data = tokenize_for_classification(sentences, tokenizer)
    minutes = args.max_train_minutes
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],  # Trainer drops the columns the model does not take (text, language)
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics,
        callbacks=[TrainingProgressCallback(minutes)],
    )
    train_result = trainer.train()
    trainer.save_model()  # model (with id2label), tokenizer and code files

    test = trainer.predict(data["test"], metric_key_prefix="test")
    correct = test.predictions.argmax(-1) == test.label_ids
    languages = np.array(data["test"]["language"])
    metrics = {
        "validation": trainer.evaluate(),
        "test": {
            "accuracy": test.metrics["test_accuracy"],
            "balanced_accuracy": test.metrics["test_balanced_accuracy"],
            "majority_class_accuracy": float((test.label_ids == 0).mean()),
            "accuracy_by_language": {lang: float(correct[languages == lang].mean()) for lang in np.unique(languages)},
            "sentences": len(correct),
        },
        "training": {
            "steps": trainer.state.global_step,
            "epochs": epochs_seen(trainer.state),
            "runtime_seconds": round(train_result.metrics["train_runtime"], 1),
            "total_seconds": round(time.time() - started, 1),
            "parameters": model.num_parameters(),
        },
        "dataset": {"attribution": BUNDLED_ATTRIBUTION},
    }
    if trainer.is_world_process_zero():
        write_json(Path(training_args.output_dir) / "metrics.json", metrics)
        report(metrics, args.examples, training_args.output_dir)


def report(metrics, examples, output_dir):
    test, training = metrics["test"], metrics["training"]
    by_language = ", ".join(f"{lang} {accuracy:.1%}" for lang, accuracy in test["accuracy_by_language"].items())
    print(
        f"\nTest set ({test['sentences']} sentences): accuracy {test['accuracy']:.1%} ({by_language}), balanced "
        f"accuracy {test['balanced_accuracy']:.1%}; always answering 'statement': {test['majority_class_accuracy']:.1%}"
        f"\nTrained {training['steps']} steps ({training['epochs']} epochs, {training['parameters']:,} parameters) in "
        f"{training['runtime_seconds'] / 60:.1f} min; model saved to {output_dir}\n"
    )
    classify = pipeline("text-classification", model=output_dir)
    for sentence, result in zip(examples, classify(examples)):
        print(f"  {sentence!r:32} -> {result['label']} ({result['score']:.2f})")


if __name__ == "__main__":
    main()
