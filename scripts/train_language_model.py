#!/usr/bin/env python
"""Train a GPT-style language model (the Transformer's decoder stack alone) on one side of the bundled corpus, then
continue prompts greedily and with temperature / top-k / top-p sampling.

    python scripts/train_language_model.py                                  # the demo: ~8 minutes on 2 CPU cores
    python scripts/train_language_model.py --language de --output_dir outputs/demo-lm-de --max_steps 3000

Arguments: the dataclass below plus every `TrainingArguments` field (`--help` lists them all). The output folder loads
with `pipeline("text-generation", model=folder)` (add `trust_remote_code=True` where this package is not installed).
"""

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import DataCollatorForSeq2Seq, HfArgumentParser, Trainer, TrainingArguments, set_seed

from hf_vanilla_transformer import VanillaTransformerForCausalLM
from hf_vanilla_transformer.data import BUNDLED_ATTRIBUTION, load_parallel_corpus
from hf_vanilla_transformer.language_modeling import (
    complete,
    monolingual,
    sampling_generation_config,
    single_stack_config,
    tokenize_texts,
    train_language_model_tokenizer,
)
from hf_vanilla_transformer.training import TrainingProgressCallback, epochs_seen, write_json


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


DEMO_DEFAULTS = dict(
    output_dir="outputs/demo-lm",
    per_device_train_batch_size=64,
    per_device_eval_batch_size=128,
    learning_rate=1e-3,
    lr_scheduler_type="inverse_sqrt",
    warmup_steps=300,
    adam_beta2=0.98,
    max_steps=1500,  # a fixed length: the same model on every machine
    eval_strategy="steps",
    eval_steps=500,
    save_strategy="no",
    logging_steps=50,
    report_to="none",
    seed=42,
)


def main():
    parser = HfArgumentParser((LanguageModelArguments, TrainingArguments))
    parser.set_defaults(**DEMO_DEFAULTS, dataloader_pin_memory=torch.cuda.is_available())
    args, training_args = parser.parse_args_into_dataclasses()
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    started = time.time()

    corpus = monolingual(load_parallel_corpus("de", "en"), args.language)
    tokenizer = train_language_model_tokenizer(corpus["train"]["text"], args.vocab_size, args.max_length)
    sizes = dict(d_model=args.d_model, layers=args.layers, heads=args.heads, ffn_dim=args.ffn_dim)
    config = single_stack_config(tokenizer, is_encoder_decoder=False, **sizes, dropout=args.dropout)
    model = VanillaTransformerForCausalLM(config)
    model.generation_config = sampling_generation_config(
        config, args.temperature, args.top_k, args.top_p, max_new_tokens=args.max_new_tokens
    )
    data = {split: tokenize_texts(texts, tokenizer, args.max_length) for split, texts in corpus.items()}
    minutes = args.max_train_minutes
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer),  # pads labels with -100
        callbacks=[TrainingProgressCallback(minutes)],
    )
    train_result = trainer.train()
    trainer.save_model()  # model, tokenizer, generation config and code files

    metrics = {}
    for split in ("validation", "test"):
        loss = trainer.evaluate(data[split], metric_key_prefix=split)[f"{split}_loss"]
        metrics[split] = {"loss": loss, "perplexity": math.exp(loss), "texts": len(data[split])}
    metrics["training"] = {
        "steps": trainer.state.global_step,
        "epochs": epochs_seen(trainer.state),
        "runtime_seconds": round(train_result.metrics["train_runtime"], 1),
        "total_seconds": round(time.time() - started, 1),
        "parameters": model.num_parameters(),
    }
    metrics["dataset"] = {"language": args.language, "attribution": BUNDLED_ATTRIBUTION}
    if trainer.is_world_process_zero():
        write_json(Path(training_args.output_dir) / "metrics.json", metrics)
        report(model.eval(), tokenizer, args, metrics, training_args.output_dir)


def report(model, tokenizer, args, metrics, output_dir):
    print(
        f"\nPerplexity: validation {metrics['validation']['perplexity']:.1f}, test {metrics['test']['perplexity']:.1f}"
        f" ({metrics['test']['texts']} texts each)\nTrained {metrics['training']['steps']} steps "
        f"({metrics['training']['epochs']} epochs, {metrics['training']['parameters']:,} parameters) in "
        f"{metrics['training']['runtime_seconds'] / 60:.1f} min; model saved to {output_dir}"
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


if __name__ == "__main__":
    main()
