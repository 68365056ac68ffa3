"""`hf-vanilla-transformer train classification`: the Transformer's encoder stack as a sentence classifier with
`Trainer`, on a task built from the bundled corpus; it reports test accuracy (overall, per language, against always
answering "statement") and classifies a few sentences with pipeline("text-classification").

    hf-vanilla-transformer train classification             # the demo: ~5 minutes on 2 CPU cores

The task: is a German or English sentence a question? The model sees the sentence without its question mark (and
without any final punctuation), so it has to tell "Kommst du morgen" from "Du kommst morgen" by the words and their
order.
"""

import re
import shlex
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import transformers
from datasets import DatasetDict
from transformers import DataCollatorWithPadding, TrainingArguments, pipeline, set_seed

from ..data.corpus import BUNDLED_ATTRIBUTION, BUNDLED_NAME, load_parallel_corpus
from ..data.folders import check_output_dir
from ..data.tokenizer import train_shared_bpe_tokenizer
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ..training.checkpoints import FileModesCallback, save_model
from ..training.progress import TrainingProgressCallback
from ..training.report import run_report, write_run_report
from ..training.schedule import RecipeTrainer
from .common import DEMO_TRAINING, SINGLE_STACK_OPTIONS, parse_recipe_arguments, run_recipe, single_stack_config


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
    overwrite: bool = field(default=False, metadata={"help": "Replace what a non-empty --output_dir holds."})


DEMO_DEFAULTS = dict(
    **DEMO_TRAINING,
    output_dir="outputs/demo-classifier",
    per_device_eval_batch_size=256,
    learning_rate=5e-4,
    num_train_epochs=3,
    eval_steps=500,
    save_strategy="no",
)


def main(argv: list[str] | None = None, prog: str = "hf-vanilla-transformer train classification") -> int:
    """The recipe; Ctrl-C or SIGTERM stops training after a step, and ends with one line (it does not resume)."""
    return run_recipe(train, argv, prog, resumable=False)


def train(argv: list[str] | None, prog: str, stop) -> int:
    defaults = dict(DEMO_DEFAULTS, dataloader_pin_memory=torch.cuda.is_available())
    args, training_args = parse_recipe_arguments(
        (ClassifierArguments, TrainingArguments), defaults, argv, prog, __doc__.split("\n\n")[0]
    )
    check_output_dir(training_args.output_dir, args.overwrite)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    started = time.time()

    sentences = question_or_statement(load_parallel_corpus("de", "en"))
    tokenizer = train_shared_bpe_tokenizer(sentences["train"]["text"], args.vocab_size)
    sizes = dict(d_model=args.d_model, layers=args.layers, heads=args.heads, ffn_dim=args.ffn_dim)
    config = classifier_config(
        tokenizer,
        QUESTION_LABELS,
        **sizes,
        dropout=args.dropout,
        classifier_pooling=args.pooling,
        options=SINGLE_STACK_OPTIONS,
    )
    model = VanillaTransformerForSequenceClassification(config)
    data = tokenize_for_classification(sentences, tokenizer)
    trainer = RecipeTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],  # Trainer drops the columns the model does not take (text, language)
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics,
        callbacks=[TrainingProgressCallback(args.max_train_minutes), FileModesCallback(), stop],
    )
    with stop.deferred():  # a stop ends training after a step; a finished run's model is saved whole
        trainer.train()
        if stop.stopped_at is not None:
            return 0
        save_model(trainer)  # model (with id2label), tokenizer and code files
    if stop.signal is not None:
        return 0

    validation = trainer.evaluate()
    test = trainer.predict(data["test"], metric_key_prefix="test")
    correct = test.predictions.argmax(-1) == test.label_ids
    languages = np.array(data["test"]["language"])
    if trainer.is_world_process_zero():
        report = run_report(
            trainer,
            task="text-classification",
            dataset={"name": f"{BUNDLED_NAME}: question or statement", "attribution": BUNDLED_ATTRIBUTION},
            train_samples=len(data["train"]),
            total_seconds=time.time() - started,
            validation={key.removeprefix("eval_"): value for key, value in validation.items()},
            test={
                "accuracy": test.metrics["test_accuracy"],
                "balanced_accuracy": test.metrics["test_balanced_accuracy"],
                "majority_class_accuracy": float((test.label_ids == 0).mean()),
                "accuracy_by_language": {
                    lang: float(correct[languages == lang].mean()) for lang in np.unique(languages)
                },
                "sentences": len(correct),
            },
            recipe={"pooling": args.pooling},
            command=f"{prog} {shlex.join(argv or [])}".strip(),
        )
        write_run_report(training_args.output_dir, report, trainer.state.log_history)
        print_summary(report, args.examples, training_args.output_dir)
    return 0


def print_summary(report, examples, output_dir):
    test, training = report["test"], report["training"]
    by_language = ", ".join(f"{lang} {accuracy:.1%}" for lang, accuracy in test["accuracy_by_language"].items())
    print(
        f"\nTest set ({test['sentences']} sentences): accuracy {test['accuracy']:.1%} ({by_language}), balanced "
        f"accuracy {test['balanced_accuracy']:.1%}; always answering 'statement': "
        f"{test['majority_class_accuracy']:.1%}"
        f"\nTrained {training['steps']} steps ({training['epochs']} epochs, {report['model']['parameters']:,} "
        f"parameters) in {training['runtime_seconds'] / 60:.1f} min; model saved to {output_dir}\n"
    )
    classify = pipeline("text-classification", model=output_dir)
    for sentence, result in zip(examples, classify(examples)):
        print(f"  {sentence!r:32} -> {result['label']} ({result['score']:.2f})")


__all__ = [
    "QUESTION_LABELS",
    "classification_metrics",
    "classifier_config",
    "question_or_statement",
    "tokenize_for_classification",
]
