#!/usr/bin/env python
"""Train a translator with the paper's recipe on Seq2SeqTrainer; with no arguments, the bundled German->English demo.

    python scripts/train_translation.py                                   # the demo: 2,300 steps, the same model anywhere
    python scripts/train_translation.py --paper_preset base --dataset_name wmt14 --dataset_config_name de-en \
        --max_steps 100000 --bf16 --output_dir runs/wmt14-base             # the paper's base model
    accelerate launch --config_file scripts/accelerate_configs/ddp.yaml scripts/train_translation.py ...

Arguments: the dataclasses below plus every `Seq2SeqTrainingArguments` field (`--help` lists them all). Mistakes in
them (a missing file, a wrong column, a folder holding another run) end with one line naming the problem.
"""

import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    HfArgumentParser,
    Seq2SeqTrainingArguments,
    set_seed,
)

from hf_vanilla_transformer import TranslationPipeline, VanillaTransformerConfig, paper_generation_config
from hf_vanilla_transformer.configuration_vanilla_transformer import PAPER_PRESETS
from hf_vanilla_transformer.data import BUNDLED_ATTRIBUTION, BUNDLED_NAME, load_parallel_corpus, tokenize_corpus
from hf_vanilla_transformer.errors import InputError, exit_on_input_error
from hf_vanilla_transformer.plotting import plot_training_curves
from hf_vanilla_transformer.sizes import ARCHITECTURES, DEMO_SIZES, expand_sizes, model_config_for
from hf_vanilla_transformer.tokenization import train_shared_bpe_tokenizer
from hf_vanilla_transformer.training import (
    TranslationDataCollator,
    TranslationTrainer,
    build_compute_metrics,
    cpu_model,
    epochs_seen,
    last_complete_checkpoint,
    noam_learning_rate,
    verify_checkpoint,
    write_json,
)


logger = logging.getLogger("train_translation")

EXAMPLES = [
    "Ich habe heute keine Zeit.",
    "Wo ist der Bahnhof?",
    "Tom hat gestern ein neues Fahrrad gekauft.",
    "Kannst du mir bitte helfen?",
    "Das Wetter ist heute sehr schön.",
]


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Fine-tune this model (and its tokenizer) instead of training from scratch."}
    )
    architecture: str = field(
        default="vanilla",
        metadata={
            "help": "vanilla (this package) or marian (transformers' MarianMTModel, same architecture: the reference in benchmarks).",
            "choices": list(ARCHITECTURES),
        },
    )
    paper_preset: str | None = field(
        default=None,
        metadata={
            "help": "Start from the paper's 'base' or 'big' model instead of the sizes below.",
            "choices": ["base", "big"],
        },
    )
    d_model: int = field(default=DEMO_SIZES["d_model"], metadata={"help": "Model width."})
    encoder_layers: int = field(default=DEMO_SIZES["layers"])
    decoder_layers: int = field(default=DEMO_SIZES["layers"])
    attention_heads: int = field(default=DEMO_SIZES["heads"])
    ffn_dim: int = field(default=DEMO_SIZES["ffn_dim"])
    dropout: float = field(default=0.1)
    label_smoothing: float = field(
        default=0.1, metadata={"help": "The loss's label smoothing (the paper's 0.1), kept in the model's config."}
    )
    norm_first: bool = field(default=False, metadata={"help": "Pre-norm instead of the paper's post-norm."})
    vocab_size: int = field(
        default=8000, metadata={"help": "Size of the shared BPE vocabulary trained on the corpus."}
    )
    max_position_embeddings: int = field(default=256)


@dataclass
class DataArguments:
    source_lang: str = field(default="de")
    target_lang: str = field(default="en")
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub dataset, e.g. wmt14 (needs network). Default: the bundled Tatoeba corpus."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset config, e.g. de-en."})
    train_file: str | None = field(
        default=None, metadata={"help": "Local JSON Lines / TSV / CSV corpus (and the two below)."}
    )
    validation_file: str | None = field(default=None)
    test_file: str | None = field(default=None)
    max_source_length: int = field(
        default=64, metadata={"help": "Longer sources are truncated (the demo's longest has 41 tokens)."}
    )
    max_target_length: int = field(
        default=64,
        metadata={
            "help": "Longer targets are truncated. Generation follows the source instead: at most its length + 50 tokens."
        },
    )
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(
        default=200, metadata={"help": "Validation pairs scored at each evaluation during training."}
    )
    max_test_samples: int | None = field(default=None)
    preprocessing_num_workers: int | None = field(default=None)


@dataclass
class RecipeArguments:
    max_train_minutes: float = field(
        default=0,
        metadata={
            "help": "Also stop training after this much wall-clock time (0: no time limit). The result then depends on "
            "the machine's speed; --max_steps gives the same model anywhere."
        },
    )
    noam_learning_rate: bool = field(
        default=False,
        metadata={"help": "Use the paper's lr = d_model^-0.5 * warmup^-0.5 peak (overrides --learning_rate)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Allow training into a non-empty output folder that holds no checkpoint to resume."},
    )
    translate: list[str] = field(
        default_factory=lambda: list(EXAMPLES), metadata={"help": "Sentences to translate at the end."}
    )


# The demo trains a fixed number of steps, so that every machine gets the same model (same seed, data order and
# recipe): on the bundled corpus this reaches the BLEU the README states.
DEMO_STEPS = 2300
DEMO_DEFAULTS = dict(
    output_dir="outputs/demo-de-en",
    max_steps=DEMO_STEPS,
    per_device_train_batch_size=64,
    per_device_eval_batch_size=64,
    learning_rate=1e-3,
    lr_scheduler_type="inverse_sqrt",
    warmup_steps=300,
    adam_beta1=0.9,
    adam_beta2=0.98,
    adam_epsilon=1e-9,
    weight_decay=0.0,
    train_sampling_strategy="group_by_length",
    eval_strategy="steps",
    eval_steps=400,
    save_strategy="steps",
    save_steps=400,
    save_total_limit=5,
    logging_steps=50,
    predict_with_generate=True,
    generation_num_beams=4,
    dataloader_num_workers=0,
    report_to="none",
    seed=42,
)


def parse_args(argv=None):
    parser = HfArgumentParser((ModelArguments, DataArguments, RecipeArguments, Seq2SeqTrainingArguments))
    # bf16 autocast by default on GPUs only. On an AVX-512 BF16 CPU it fits 1.2x more demo steps into a time budget
    # but ends at a lower BLEU than float32 (35.4 vs 36.3); `--bf16 --use_cpu` still turns it on there.
    gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    parser.set_defaults(**DEMO_DEFAULTS, bf16=gpu_bf16, dataloader_pin_memory=torch.cuda.is_available())
    return parser.parse_args_into_dataclasses(args=argv)


def prepare_output_dir(training_args, recipe_args) -> str | None:
    """Return the checkpoint to resume from, refusing to silently overwrite a previous run.

    Nothing is written into the output folder before training has started, so that a run which fails early leaves
    it as it was and the same command can simply be run again.
    """
    output_dir = Path(training_args.output_dir)
    if training_args.resume_from_checkpoint not in (None, "", "False", "false"):
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint in ("True", "true", "last"):
            return str(last_complete_checkpoint(output_dir))
        if not Path(checkpoint).is_dir():
            raise InputError(f"--resume_from_checkpoint: {checkpoint} is not a folder.")
        verify_checkpoint(checkpoint)
        return checkpoint
    if output_dir.is_dir() and any(output_dir.iterdir()) and not recipe_args.overwrite_output_dir:
        raise InputError(
            f"Output folder {output_dir} is not empty. Resume with --resume_from_checkpoint last, choose another "
            "--output_dir, or pass --overwrite_output_dir to train over it."
        )
    return None


def build_tokenizer(model_args, data_args, corpus, resume_from):
    if model_args.model_name_or_path:
        return AutoTokenizer.from_pretrained(model_args.model_name_or_path, trust_remote_code=True)
    if resume_from:  # the ids of the checkpoint's embeddings belong to the tokenizer saved with it
        return AutoTokenizer.from_pretrained(resume_from)
    pairs = corpus["train"]["translation"]
    texts = (pair[lang] for pair in pairs for lang in (data_args.source_lang, data_args.target_lang))
    return train_shared_bpe_tokenizer(texts, model_args.vocab_size, model_args.max_position_embeddings)


def build_model(model_args, tokenizer):
    if model_args.model_name_or_path:
        return AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path, trust_remote_code=True)
    if model_args.paper_preset:
        sizes = PAPER_PRESETS[model_args.paper_preset]
    else:
        layers = (model_args.encoder_layers, model_args.decoder_layers)
        sizes = {
            **expand_sizes(model_args.d_model, layers, model_args.attention_heads, model_args.ffn_dim),
            "dropout": model_args.dropout,
        }
    fields = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        max_position_embeddings=model_args.max_position_embeddings,
    )
    if model_args.architecture == "vanilla":
        fields["norm_first"] = model_args.norm_first
    try:
        config = model_config_for(model_args.architecture, **sizes, **fields)
    except ValueError as error:  # sizes that do not fit together, named by the configuration
        raise InputError(str(error)) from error
    return AutoModelForSeq2SeqLM.from_config(config)


@exit_on_input_error
def main(argv=None):
    model_args, data_args, recipe_args, training_args = parse_args(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARN,
    )
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    resume_from = prepare_output_dir(training_args, recipe_args)
    output_dir = Path(training_args.output_dir)
    started = time.time()

    corpus = load_parallel_corpus(
        data_args.source_lang,
        data_args.target_lang,
        data_args.dataset_name,
        data_args.dataset_config_name,
        data_args.train_file,
        data_args.validation_file,
        data_args.test_file,
    )
    if "validation" not in corpus and training_args.eval_strategy != "no":
        logger.info("No validation split: no evaluation during training.")
        training_args.eval_strategy = "no"
    tokenizer = build_tokenizer(model_args, data_args, corpus, resume_from)
    model = build_model(model_args, tokenizer)
    if training_args.label_smoothing_factor:
        raise InputError("Set label smoothing with --label_smoothing (it is stored in the model's config).")
    if isinstance(model.config, VanillaTransformerConfig):
        model.config.label_smoothing = model_args.label_smoothing
    else:  # MarianMT has no such setting: transformers' LabelSmoother applies the same epsilon outside the model
        training_args.label_smoothing_factor = model_args.label_smoothing
    model.generation_config = paper_generation_config(model.config)
    if recipe_args.noam_learning_rate:
        training_args.learning_rate = noam_learning_rate(model.config.d_model, int(training_args.warmup_steps))
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("%s with %.1fM parameters, vocabulary %d", type(model).__name__, n_params / 1e6, len(tokenizer))

    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_test_samples,
    }
    with training_args.main_process_first(desc="tokenizing"):
        datasets = tokenize_corpus(
            corpus,
            tokenizer,
            data_args.source_lang,
            data_args.target_lang,
            data_args.max_source_length,
            data_args.max_target_length,
            limits,
            data_args.preprocessing_num_workers,
        )
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=datasets["train"],
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100),
        compute_metrics=build_compute_metrics(tokenizer),
        max_train_minutes=recipe_args.max_train_minutes,
    )
    train_result = trainer.train(resume_from_checkpoint=resume_from)
    trainer.save_model()  # model, tokenizer, generation config and code files: ready to share
    trainer.save_state()

    metrics = {"train": train_result.metrics}
    if "validation" in datasets:
        metrics["validation"] = trainer.evaluate()  # also the last point of the BLEU curve
    if "test" in datasets:
        predictions = trainer.predict(datasets["test"], metric_key_prefix="test")
        metrics["test"] = predictions.metrics
    if trainer.is_world_process_zero():
        summary = summarize(
            model,
            tokenizer,
            data_args,
            training_args,
            trainer.state,
            metrics,
            model_args.label_smoothing,
            len(datasets["train"]),
            time.time() - started,
        )
        write_json(output_dir / "metrics.json", summary)
        plot_training_curves(trainer.state.log_history, output_dir / "training_curves.png")
        report(summary, model, tokenizer, recipe_args.translate, output_dir)


def summarize(model, tokenizer, data_args, training_args, state, metrics, epsilon, train_samples, seconds):
    test = metrics.get("test", {})
    bundled = data_args.dataset_name is None and data_args.train_file is None
    return {
        "source_lang": data_args.source_lang,
        "target_lang": data_args.target_lang,
        "dataset": {
            "name": BUNDLED_NAME if bundled else (data_args.dataset_name or data_args.train_file),
            "id": data_args.dataset_name,
            "config": data_args.dataset_config_name,
            "license": "cc-by-2.0-fr" if bundled else None,
            "attribution": BUNDLED_ATTRIBUTION if bundled else None,
        },
        "model": {
            "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "d_model": model.config.d_model,
            "encoder_layers": model.config.encoder_layers,
            "decoder_layers": model.config.decoder_layers,
            "vocab_size": len(tokenizer),
        },
        "test": {
            "bleu": test.get("test_bleu"),
            "chrf": test.get("test_chrf"),
            "num_samples": test.get("test_num_samples"),
            "num_beams": model.generation_config.num_beams,
            "length_penalty": model.generation_config.length_penalty,
        },
        "training": {
            "steps": state.global_step,
            "epochs": epochs_seen(state),
            "runtime_seconds": round(metrics["train"].get("train_runtime", 0.0), 1),
            "total_seconds": round(seconds, 1),
            "train_samples": train_samples,
            "hardware": hardware(),
            "learning_rate": training_args.learning_rate,
            "lr_scheduler": str(
                training_args.lr_scheduler_type.value
                if hasattr(training_args.lr_scheduler_type, "value")
                else training_args.lr_scheduler_type
            ),
            "warmup_steps": training_args.warmup_steps,
            "label_smoothing": epsilon,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "world_size": training_args.world_size,
            "bf16": training_args.bf16,
            "seed": training_args.seed,
        },
        "command": " ".join(["python", os.path.relpath(sys.argv[0]), *map(shlex.quote, sys.argv[1:])]),
    }


def hardware() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"{cpu_model()}, {torch.get_num_threads()} threads ({os.cpu_count()} cores visible)"


def report(summary, model, tokenizer, sentences, output_dir):
    test, training = summary["test"], summary["training"]
    if test["bleu"] is not None:
        print(
            f"\nTest set ({test['num_samples']} pairs, beam {test['num_beams']}): BLEU {test['bleu']:.2f}  chrF {test['chrf']:.2f}"
        )
    print(
        f"Trained {training['steps']} steps ({training['epochs']} epochs) in {training['runtime_seconds'] / 60:.1f} "
        f"min; model saved to {output_dir}\n"
    )
    translations = [
        r["translation_text"] for r in TranslationPipeline(model=model.eval(), tokenizer=tokenizer)(sentences)
    ]
    for source, target in zip(sentences, translations):
        print(f"  {source}\n    -> {target.strip()}")
    if (test["bleu"] is not None and test["bleu"] < 5) or not all(t.strip() for t in translations):
        print(
            f"\nThese are the scores and translations of an undertrained model: it trained only {training['steps']:,} "
            f"steps ({training['epochs']} epochs). The demo reaches its BLEU after {DEMO_STEPS:,} steps, its "
            "default (--max_steps); larger corpora need more."
        )


if __name__ == "__main__":
    main()
