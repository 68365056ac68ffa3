"""`hf-vanilla-transformer train language-modeling`: a GPT-style language model (the Transformer's decoder stack alone)
on one side of the bundled corpus, then prompts continued greedily and with temperature / top-k / top-p sampling.

    hf-vanilla-transformer train language-modeling                  # the demo: ~8 minutes on 2 CPU cores
    hf-vanilla-transformer train language-modeling --language de --output_dir outputs/demo-lm-de --max_steps 3000

A decoder-only model is a [`VanillaTransformerForCausalLM`] built from a config with `is_encoder_decoder=False`; this
module supplies its tokenizer, data and sampling settings and the recipe. The output folder loads with
`pipeline("text-generation", model=folder)` (add `trust_remote_code=True` where this package is not installed).
"""

import math
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import transformers
from datasets import Dataset, DatasetDict
from tokenizers import decoders, processors
from transformers import (
    DataCollatorForSeq2Seq,
    GenerationConfig,
    PreTrainedTokenizerFast,
    TrainingArguments,
    set_seed,
)

from ..data.corpus import BUNDLED_ATTRIBUTION, BUNDLED_NAME, load_parallel_corpus
from ..data.folders import check_output_dir
from ..data.tokenizer import BOS, train_shared_bpe_tokenizer
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig, special_token_ids
from ..model.modeling_vanilla_transformer import VanillaTransformerForCausalLM
from ..training.checkpoints import FileModesCallback, save_model
from ..training.progress import TrainingProgressCallback
from ..training.report import run_report, write_run_report
from ..training.schedule import RecipeTrainer
from .common import DEMO_TRAINING, SINGLE_STACK_OPTIONS, parse_recipe_arguments, run_recipe, single_stack_config


def train_language_model_tokenizer(
    texts: Iterable[str], vocab_size: int = 4000, model_max_length: int = 128
) -> PreTrainedTokenizerFast:
    """The BPE of [`train_shared_bpe_tokenizer`], set up for a language model.

    - Encodings start with `<s>` and do not end with `</s>`: a prompt is continued, not closed. [`tokenize_texts`]
      appends `</s>` to training texts, so that the model learns where a sentence ends and `generate()` stops there.
    - Decoding keeps the space before a first word: `pipeline("text-generation")` decodes the new tokens on their own
      and appends them to the prompt.
    - Padding goes on the left, where batched generation needs it.
    """
    shared = train_shared_bpe_tokenizer(texts, vocab_size, model_max_length)
    backend = shared.backend_tokenizer
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, shared.bos_token_id)]
    )
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=model_max_length,
        padding_side="left",
        **shared.special_tokens_map,
    )


def monolingual(corpus: DatasetDict, language: str) -> DatasetDict:
    """The `language` side of a parallel corpus (a `translation` column, as from `load_parallel_corpus`) as `text`
    rows, split by split."""
    return DatasetDict(
        {
            split: dataset.map(
                lambda batch: {"text": [pair[language] for pair in batch["translation"]]},
                batched=True,
                remove_columns=dataset.column_names,
            )
            for split, dataset in corpus.items()
        }
    )


def tokenize_texts(dataset: Dataset, tokenizer, max_length: int = 128, text_column: str = "text") -> Dataset:
    """`input_ids` = `<s>` text `</s>` (no `</s>` after a text cut at `max_length`: it did not end there) and `labels`,
    the same ids with `<s>` as -100: it is the given start, never a prediction (with left padding it would otherwise
    be "predicted" from the padding before it). Pad batches with `DataCollatorForSeq2Seq`, which pads labels with
    -100 on the tokenizer's side."""
    if text_column not in dataset.column_names:
        raise ValueError(f"The dataset has no column {text_column!r}; its columns are {dataset.column_names}.")

    def tokenize(batch):
        rows = tokenizer(batch[text_column], truncation=True, max_length=max_length)["input_ids"]
        rows = [row + [tokenizer.eos_token_id] if len(row) < max_length else row for row in rows]
        labels = [[-100 if token == tokenizer.bos_token_id else token for token in row] for row in rows]
        return {"input_ids": rows, "attention_mask": [[1] * len(row) for row in rows], "labels": labels}

    return dataset.map(tokenize, batched=True, remove_columns=dataset.column_names, desc="tokenizing")


def sampling_generation_config(
    config: VanillaTransformerConfig, temperature: float = 0.8, top_k: int = 50, top_p: float = 0.95, **kwargs
) -> GenerationConfig:
    """Sampling defaults for a trained language model: varied text, where greedy decoding gives every prompt its one
    most likely continuation."""
    return GenerationConfig(
        do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, **special_token_ids(config), **kwargs
    )


@torch.no_grad()
def complete(model, tokenizer, prompts: list[str], **generate_kwargs) -> list[str]:
    """Each prompt continued by `model.generate(**generate_kwargs)`, as text (prompt included)."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left").to(model.device)
    generated = model.generate(**batch, **generate_kwargs)
    return [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]


@dataclass
class LanguageModelArguments:
    language: str = field(default="en", metadata={"help": "Side of the bundled German-English corpus: en or de."})
    vocab_size: int = field(default=4000, metadata={"help": "Size of the BPE vocabulary trained on the texts."})
    d_model: int = field(default=256)
    layers: int = field(default=4)
    heads: int = field(default=4)
    ffn_dim: int = field(default=1024)
    dropout: float = field(default=0.1)
    max_length: int = field(
        default=64, metadata={"help": "Longer texts are cut (the corpus's longest has 34 tokens)."}
    )
    max_train_minutes: float = field(
        default=0,
        metadata={"help": "Also stop after this many minutes (0: none); the result then depends on the machine."},
    )
    prompts: list[str] = field(
        default_factory=lambda: ["Tom is", "I don't think", "Where did you", "The weather"],
        metadata={"help": "Prompts to continue at the end."},
    )
    temperature: float = field(default=0.8, metadata={"help": "Sampling temperature (saved as the default)."})
    top_k: int = field(default=50, metadata={"help": "Sample from the k most likely tokens (saved as the default)."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling threshold (saved as the default)."})
    max_new_tokens: int = field(default=30, metadata={"help": "Length limit of generated continuations."})
    overwrite: bool = field(default=False, metadata={"help": "Replace what a non-empty --output_dir holds."})


DEMO_DEFAULTS = dict(
    **DEMO_TRAINING,
    output_dir="outputs/demo-lm",
    per_device_eval_batch_size=128,
    learning_rate=1e-3,
    max_steps=1500,  # a fixed length: the same model on every machine
    eval_steps=500,
    save_strategy="no",
)


def main(argv: list[str] | None = None, prog: str = "hf-vanilla-transformer train language-modeling") -> int:
    """The recipe; Ctrl-C or SIGTERM stops training after a step, and ends with one line (it does not resume)."""
    return run_recipe(train, argv, prog, resumable=False)


def train(argv: list[str] | None, prog: str, stop) -> int:
    defaults = dict(DEMO_DEFAULTS, dataloader_pin_memory=torch.cuda.is_available())
    args, training_args = parse_recipe_arguments(
        (LanguageModelArguments, TrainingArguments), defaults, argv, prog, __doc__.split("\n\n")[0]
    )
    check_output_dir(training_args.output_dir, args.overwrite)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    started = time.time()

    corpus = monolingual(load_parallel_corpus("de", "en"), args.language)
    tokenizer = train_language_model_tokenizer(corpus["train"]["text"], args.vocab_size, args.max_length)
    config = single_stack_config(
        tokenizer, args.d_model, args.layers, args.heads, args.ffn_dim, args.max_length, is_encoder_decoder=False,
        dropout=args.dropout, options={**SINGLE_STACK_OPTIONS, "max_position_embeddings": "--max_length"},
    )  # fmt: skip
    model = VanillaTransformerForCausalLM(config)
    model.generation_config = sampling_generation_config(
        config, args.temperature, args.top_k, args.top_p, max_new_tokens=args.max_new_tokens
    )
    data = {split: tokenize_texts(texts, tokenizer, args.max_length) for split, texts in corpus.items()}
    trainer = RecipeTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer),  # pads labels with -100
        callbacks=[TrainingProgressCallback(args.max_train_minutes), FileModesCallback(), stop],
    )
    with stop.deferred():  # a stop ends training after a step; a finished run's model is saved whole
        trainer.train()
        if stop.stopped_at is not None:
            return 0
        save_model(trainer)  # model, tokenizer, generation config and code files
    if stop.signal is not None:
        return 0

    results = {}
    for split in ("validation", "test"):
        loss = trainer.evaluate(data[split], metric_key_prefix=split)[f"{split}_loss"]
        results[split] = {"loss": loss, "perplexity": math.exp(loss), "texts": len(data[split])}
    if trainer.is_world_process_zero():
        report = run_report(
            trainer,
            task="language-modeling",
            dataset={"name": f"{BUNDLED_NAME}, {args.language} side", "attribution": BUNDLED_ATTRIBUTION},
            train_samples=len(data["train"]),
            total_seconds=time.time() - started,
            validation=results["validation"],
            test=results["test"],
            recipe={"language": args.language},
            command=f"{prog} {shlex.join(argv or [])}".strip(),
        )
        write_run_report(training_args.output_dir, report, trainer.state.log_history)
        print_summary(model.eval(), tokenizer, args, report, training_args.output_dir)
    return 0


def print_summary(model, tokenizer, args, report, output_dir):
    print(
        f"\nPerplexity: validation {report['validation']['perplexity']:.1f}, test {report['test']['perplexity']:.1f}"
        f" ({report['test']['texts']} texts each)\nTrained {report['training']['steps']} steps "
        f"({report['training']['epochs']} epochs, {report['model']['parameters']:,} parameters) in "
        f"{report['training']['runtime_seconds'] / 60:.1f} min; model saved to {output_dir}"
    )
    print("\nGreedy:")
    for text in complete(model, tokenizer, args.prompts, do_sample=False):
        print(f"  {text}")
    print(f"\nSampled (temperature {args.temperature}, top-k {args.top_k}, top-p {args.top_p}):")
    for text in complete(model, tokenizer, [p for p in args.prompts for _ in range(2)]):
        print(f"  {text}")
    print("\nSampled from nothing (<s> alone), temperature 1.0:")
    for text in complete(model, tokenizer, [""] * 4, temperature=1.0):
        print(f"  {text}")


__all__ = [
    "complete",
    "monolingual",
    "sampling_generation_config",
    "tokenize_texts",
    "train_language_model_tokenizer",
]
