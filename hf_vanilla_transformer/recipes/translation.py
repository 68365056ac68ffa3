"""`hf-vanilla-transformer train translation`: a translator with the paper's recipe on `Seq2SeqTrainer`; with no
options, the bundled German->English demo.

    hf-vanilla-transformer train translation                  # the demo: 2,300 steps, the same model on every machine
    hf-vanilla-transformer train translation --train_file data/train --validation_file data/valid \
        --source_lang de --target_lang en --output_dir runs/mine       # your corpus: data/train.de + data/train.en
    accelerate launch --config_file hf_vanilla_transformer/recipes/accelerate/ddp.yaml \
        -m hf_vanilla_transformer train translation --paper_preset base --train_file wmt14/train \
        --max_steps 100000 --output_dir runs/wmt14-base  # the paper's base: 25,000 target tokens per update

Options: the dataclasses below plus every `Seq2SeqTrainingArguments` field (`--help` lists them all). The demo's
settings (2,300 steps, its output folder, its example sentences) apply only to the bundled corpus. Mistakes in the
options or the data (a missing file, a wrong column, a line that cannot be read, a folder holding another run) end
with one line naming the problem. docs/training-at-scale.md describes the corpus formats and training at the paper's
scale.
"""

import argparse
import logging
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Seq2SeqTrainingArguments, set_seed
from transformers.utils import is_torch_greater_or_equal

from ..data.corpus import (
    BUNDLED_ATTRIBUTION,
    BUNDLED_NAME,
    LONG_PAIRS,
    default_num_proc,
    limit_lengths,
    tokenize_corpus,
)
from ..data.folders import check_output_dir, load_tokenizer, resolve_model
from ..data.tokenizer import corpus_tokenizer
from ..data.trained_on import record_trained_on
from ..data.training_corpus import CorpusArguments, read_training_corpus
from ..errors import InputError
from ..model.configuration_vanilla_transformer import PAPER_PRESETS, VanillaTransformerConfig, paper_generation_config
from ..model.pipeline_translation import TranslationPipeline
from ..training.averaging import WeightAveragingCallback
from ..training.checkpoints import (
    checkpoint_folders,
    finished,
    last_complete_checkpoint,
    load_average,
    save_model,
    verify_checkpoint,
)
from ..training.metrics import build_compute_metrics
from ..training.progress import StopOnSignals
from ..training.report import run_report, write_run_report
from ..training.trainer import TranslationDataCollator, TranslationTrainer, noam_learning_rate
from .common import (
    ARCHITECTURES,
    DEMO_SIZES,
    DEMO_TRAINING,
    expand_sizes,
    model_config_for,
    parse_recipe_arguments,
    run_recipe,
    tokenizer_fields,
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
            "help": "vanilla (this package) or marian (transformers' MarianMTModel, same architecture: the reference "
            "in benchmarks).",
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
    tokenizer_train_pairs: int = field(
        default=1_000_000,
        metadata={"help": "Learn the BPE from at most this many training pairs, in blocks drawn at random (0: all)."},
    )
    max_position_embeddings: int = field(default=256)


@dataclass
class DataArguments(CorpusArguments):
    max_source_length: int = field(
        default=64, metadata={"help": "Training pairs with more source tokens are long pairs (see --long_pairs)."}
    )
    max_target_length: int = field(
        default=64,
        metadata={
            "help": "Training pairs with more target tokens are long pairs. Validation and test pairs are kept whole "
            "(cut only at --max_position_embeddings); generation follows the source: at most its length + 50 tokens."
        },
    )
    long_pairs: str = field(
        default="skip",
        metadata={
            "help": "What happens to long training pairs: skipped or truncated (and counted), or an error naming the "
            "first.",
            "choices": list(LONG_PAIRS),
        },
    )
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(
        default=200, metadata={"help": "Validation pairs scored at each evaluation during training."}
    )
    max_test_samples: int | None = field(default=None)
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Tokenizing processes. Default: one per CPU from 100,000 training pairs on."}
    )


@dataclass
class RecipeArguments:
    max_tokens: str | None = field(
        default=None,
        metadata={
            "help": "Batch pairs of similar length by token budget: at most this many padded source tokens and as "
            "many target tokens per batch and process (replaces --per_device_train_batch_size; fairseq's "
            "--max-tokens). It must hold one pair of --max_source_length and --max_target_length. 0: sentence "
            "batches. auto: as many as the GPU's free memory holds for the model (at most what one "
            "--tokens_per_update needs), --paper_preset's default on a GPU; 4096 on a CPU."
        },
    )
    tokens_per_update: int | None = field(
        default=None,
        metadata={
            "help": "With --max_tokens: derive --gradient_accumulation_steps so that one update holds about this "
            "many target tokens over all processes. --paper_preset sets the paper's 25000, with --max_tokens auto "
            "on a GPU and 4096 on a CPU."
        },
    )
    ema_decay: float = field(
        default=0.0,
        metadata={
            "help": "Keep an exponential moving average of the weights with this decay after every update, evaluate "
            "it and save it as the model (Marian's --exponential-smoothing, fairseq's --ema-decay; 0: off, the last "
            "step's weights). Checkpoints keep it beside the trained weights, so a resumed run ends as an "
            "uninterrupted one. Off by default: after the cool-down, no decay scored above the last step's weights "
            "on the demo's validation split (docs/training.md)."
        },
    )
    average_last: int = field(
        default=0,
        metadata={
            "help": "Make the final model the mean of the last N checkpoints (paper, section 6.1), --save_steps "
            "apart, the newest the last step's (0 or 1: the last step's weights). --paper_preset: 5 (base) or 20 "
            "(big)."
        },
    )
    max_train_minutes: float = field(
        default=0,
        metadata={
            "help": "Also stop training after this much wall-clock time (0: no time limit). The result then depends "
            "on the machine's speed; --max_steps gives the same model anywhere."
        },
    )
    noam_learning_rate: bool = field(
        default=False,
        metadata={"help": "Use the paper's lr = d_model^-0.5 * warmup^-0.5 peak (overrides --learning_rate)."},
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "Replace what a non-empty --output_dir holds (it must not hold a run to resume)."},
    )
    translate: list[str] | None = field(
        default=None,
        metadata={"help": "Sentences to translate at the end (the demo: five German examples; your corpus: none)."},
    )


# The demo trains a fixed number of steps, so that every machine gets the same model (same seed, data order and
# recipe): on the bundled corpus this reaches the BLEU the README states. DEMO_BLEU is the test BLEU (beam 4, length
# penalty 0.6) of the last full demo run recorded in DEMO_RESULT; a full run far below it says so at the end.
DEMO_STEPS = 2300
DEMO_BLEU, DEMO_RESULT = 39.61, "docs/results/2026-12-02-xeon-recipe.md"
DEMO_BLEU_MARGIN = 3.0
# The final scoring stays proportionate to the training ([`scored_pairs`]): at least a few dozen pairs, enough to run
# the scoring and cheap for any model.
MIN_SCORED_PAIRS = 32
DEMO_DEFAULTS = dict(
    **DEMO_TRAINING,
    output_dir="outputs/demo-de-en",
    max_steps=DEMO_STEPS,
    per_device_eval_batch_size=64,
    learning_rate=1e-3,
    train_sampling_strategy="group_by_length",
    eval_steps=400,
    save_strategy="steps",
    save_steps=400,
    save_total_limit=5,
    predict_with_generate=True,
    generation_num_beams=4,
)


# With your own corpus the demo's fixed step count, output folder and example sentences are not the defaults: the
# epochs (--num_train_epochs) or --max_steps you give decide, and --output_dir is required.
OWN_CORPUS_DEFAULTS = {key: value for key, value in DEMO_DEFAULTS.items() if key not in ("output_dir", "max_steps")}


# The paper's own schedule and averaging, which --paper_preset keeps: inverse square root after the warm-up, made for
# its 100,000 steps, and the mean of the last 5 (base) or 20 (big) checkpoints (section 6.1).
PAPER_AVERAGE_LAST = {"base": 5, "big": 20}


def paper_schedule(preset: str) -> dict:
    last = PAPER_AVERAGE_LAST[preset]
    return dict(lr_scheduler_type="inverse_sqrt", average_last=last, save_total_limit=max(5, last))


# The paper's batches (section 5.1): about 25,000 target tokens per update, in token batches of at most 4,096 tokens
# per process on a CPU (fairseq's WMT recipe), and on a GPU as many as its memory holds (on an 80 GB card, the whole
# update in one batch); the paper presets train this way unless told otherwise.
PAPER_BATCHES = dict(max_tokens="4096", tokens_per_update=25000)
GPU_PAPER_BATCHES = dict(max_tokens="auto", tokens_per_update=25000)
# On a GPU, batches are collated by worker processes while the device trains (the order stays the main process's).
# They persist between epochs and evaluations only where torch shuts such workers down at exit: before 2.13, with
# pinned memory, it waited 5 s for each worker of each loader there (pytorch/pytorch#81794), a minute after the demo.
GPU_LOADING = dict(dataloader_num_workers=4, dataloader_persistent_workers=is_torch_greater_or_equal("2.13"))
# Under --torch_compile on an accelerator, lengths padded to a multiple of this many tokens: tensor-core-sized
# products. A whole-model graph does not pack the real tokens, so the padding costs compute, which a CPU does not win
# back (with dynamic shapes, fewer distinct lengths do not mean fewer compilations).
COMPILED_PAD_MULTIPLE = 8


def given_options(argv: list[str] | None) -> dict[str, list[str]]:
    """The options `argv` names, of those that change the recipe's defaults, with their values."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    options = ("train_file", "validation_file", "test_file", "dataset_name", "output_dir", "paper_preset")
    for option in (*options, "tokens_per_update", "max_eval_samples", "max_test_samples"):
        parser.add_argument(f"--{option}", nargs="*")
    known, _ = parser.parse_known_args(argv or [])
    return {option: value for option, value in vars(known).items() if value is not None}


def parse_args(argv: list[str] | None = None, prog: str = "hf-vanilla-transformer train translation"):
    # bf16 autocast by default on GPUs only. On an AVX-512 BF16 CPU it fits 1.2x more demo steps into a time budget
    # but ends at a lower BLEU than float32 (35.4 vs 36.3); `--bf16 --use_cpu` still turns it on there.
    gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    given = given_options(argv)
    own_corpus = bool(given.keys() & {"train_file", "validation_file", "test_file", "dataset_name"})
    preset = (given.get("paper_preset") or [None])[0]
    defaults = dict(
        OWN_CORPUS_DEFAULTS if own_corpus else DEMO_DEFAULTS,
        bf16=gpu_bf16,
        dataloader_pin_memory=torch.cuda.is_available(),
        **(GPU_LOADING if torch.cuda.is_available() else {}),
        translate=None if own_corpus else list(EXAMPLES),
        **((GPU_PAPER_BATCHES if torch.cuda.is_available() else PAPER_BATCHES) if "paper_preset" in given else {}),
        **(paper_schedule(preset) if preset in PAPER_AVERAGE_LAST else {}),
    )
    parsed = parse_recipe_arguments(ARGUMENTS, defaults, argv, prog, DESCRIPTION)
    data_args, recipe_args = parsed[1], parsed[2]
    if recipe_args.ema_decay and recipe_args.average_last > 1:
        raise InputError(
            f"--ema_decay {recipe_args.ema_decay:g} and --average_last {recipe_args.average_last}: choose one "
            "average (checkpoints hold the trained weights, not the moving average)."
        )
    recipe_args.max_tokens = parse_max_tokens(recipe_args.max_tokens)
    if not recipe_args.max_tokens and "tokens_per_update" not in given:  # --max_tokens 0: the preset's update too
        recipe_args.max_tokens = recipe_args.tokens_per_update = None
    if own_corpus and "output_dir" not in given:
        raise InputError(
            f"--output_dir: name the folder for the model trained on your corpus ({DEMO_DEFAULTS['output_dir']} is "
            "the demo's)."
        )
    if (data_args.validation_file or data_args.test_file) and not (data_args.train_file or data_args.dataset_name):
        raise InputError("--validation_file and --test_file come with --train_file (the training corpus).")
    return parsed


ARGUMENTS = (ModelArguments, DataArguments, RecipeArguments, Seq2SeqTrainingArguments)  # the recipe's options
DESCRIPTION = __doc__.split("\n\n")[0] + (
    " The learning rate warms up over --warmup_steps, holds, then cools down to 0 at the last step over the last "
    "fifth of the steps (warmup_stable_decay, 1 - sqrt), whichever option ends the run (--max_steps, "
    "--num_train_epochs, --max_train_minutes): on a budget of steps the best of the schedules measured on the demo's "
    "validation split, where the paper's inverse square root never anneals (docs/training.md). --paper_preset keeps "
    "the paper's schedule, made for its 100,000 steps, and averages the last 5 (base) or 20 (big) checkpoints "
    "(section 6.1)."
)


def parse_max_tokens(value: str | None) -> int | str | None:
    """--max_tokens: a count of tokens, or auto."""
    if value is None or value == "auto":
        return value
    try:
        tokens = int(value)
    except ValueError:
        tokens = -1
    if tokens < 0:
        raise InputError(f"--max_tokens {value}: expected a number of tokens (0: sentence batches) or auto.")
    return tokens


def prepare_output_dir(training_args, recipe_args) -> str | None:
    """Return the checkpoint to resume from, refusing to train over a previous run unless `--overwrite`.

    Nothing is written into the output folder before training has started, so that a run which fails early leaves
    it as it was and the same command can simply be run again.
    """
    output_dir = Path(training_args.output_dir)
    if training_args.resume_from_checkpoint not in (None, "", "False", "false"):
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint in ("True", "true", "last"):
            return str(last_complete_checkpoint(output_dir))
        if not Path(checkpoint).is_dir():
            raise InputError(f"--resume_from_checkpoint {checkpoint}: no such checkpoint folder.")
        verify_checkpoint(checkpoint)
        return checkpoint
    resume = "To continue its training, pass --resume_from_checkpoint last."
    check_output_dir(output_dir, recipe_args.overwrite, other_cure=resume)
    return None


def build_tokenizer(model_args, data_args, corpus, resume_from):
    if model_args.model_name_or_path:
        return load_tokenizer(model_args.model_name_or_path, "--model_name_or_path", trust_remote_code=True)
    if resume_from:  # the ids of the checkpoint's embeddings belong to the tokenizer saved with it
        return AutoTokenizer.from_pretrained(resume_from)
    languages = (data_args.source_lang, data_args.target_lang)
    return corpus_tokenizer(
        corpus["train"],
        languages,
        model_args.vocab_size,
        model_args.max_position_embeddings,
        max_pairs=model_args.tokenizer_train_pairs or None,
    )


def prepare_data(data_args, training_args, model_args, resume_from):
    """The corpus read, cleaned as asked, its tokenizer (trained, or reused from the cache) and the data report."""
    with training_args.main_process_first(desc="reading the corpus"):
        corpus, cleaning = read_training_corpus(data_args)
        tokenizer = build_tokenizer(model_args, data_args, corpus, resume_from)
    return corpus, tokenizer, {"cleaning": cleaning} if cleaning else {}


def tokenize_splits(corpus, tokenizer, data_args, training_args, positions: int) -> tuple[dict, dict]:
    """Token ids of every split with the length limits applied: training pairs over --max_source_length or
    --max_target_length as --long_pairs says, validation and test pairs cut only at the model's positions."""
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_test_samples,
    }
    num_proc = data_args.preprocessing_num_workers or default_num_proc(len(corpus["train"]))
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    with training_args.main_process_first(desc="tokenizing"):
        datasets = tokenize_corpus(corpus, tokenizer, source_lang, target_lang, limits, num_proc)
        report = {}
        for split in datasets:
            if split == "train":
                lengths = (data_args.max_source_length, data_args.max_target_length, data_args.long_pairs)
            else:
                lengths = (positions, positions, "truncate")
            datasets[split], counts = limit_lengths(datasets[split], tokenizer, *lengths, split=split)
            if split == "train" or counts["truncated"]:
                report[split] = {"policy": lengths[2], **counts}
    return datasets, {"long_pairs": report}


def check_lengths(data_args, recipe_args, positions: int):
    for option, value in (
        ("--max_source_length", data_args.max_source_length),
        ("--max_target_length", data_args.max_target_length),
    ):
        if value > positions:
            raise InputError(
                f"{option} {value} is more than the model's {positions} positions (--max_position_embeddings)."
            )
    longest = max(data_args.max_source_length, data_args.max_target_length)
    if isinstance(recipe_args.max_tokens, int) and 0 < recipe_args.max_tokens < longest:
        raise InputError(
            f"--max_tokens {recipe_args.max_tokens} cannot hold one pair of --max_source_length / --max_target_length "
            f"{longest} tokens: raise it, or lower the length limits."
        )


# The options that set each configuration field: a configuration error names what the user typed.
SIZE_OPTIONS = {
    **expand_sizes("--d_model", ("--encoder_layers", "--decoder_layers"), "--attention_heads", "--ffn_dim"),
    **{name: f"--{name}" for name in ("dropout", "label_smoothing", "vocab_size", "max_position_embeddings")},
}


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
    fields = dict(tokenizer_fields(tokenizer), max_position_embeddings=model_args.max_position_embeddings)
    if model_args.architecture == "vanilla":
        fields.update(norm_first=model_args.norm_first, label_smoothing=model_args.label_smoothing)
    config = model_config_for(model_args.architecture, SIZE_OPTIONS, **sizes, **fields)
    return AutoModelForSeq2SeqLM.from_config(config)


def main(argv: list[str] | None = None, prog: str = "hf-vanilla-transformer train translation") -> int:
    """The recipe; Ctrl-C or SIGTERM stops training after a step with its checkpoint, and ends with one line saying
    how to continue."""
    return run_recipe(train, argv, prog)


def train(argv: list[str] | None, prog: str, stop: StopOnSignals) -> int:
    model_args, data_args, recipe_args, training_args = parse_args(argv, prog)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARN,
    )
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    if model_args.model_name_or_path:
        model_args.model_name_or_path = resolve_model(model_args.model_name_or_path, "--model_name_or_path")
    resume_from = prepare_output_dir(training_args, recipe_args)
    output_dir = Path(training_args.output_dir)
    done = resume_from and finished(resume_from, training_args.max_steps, training_args.num_train_epochs)
    if done:
        if training_args.process_index == 0:
            print(f"{output_dir}: {done}")
        return 0
    started = time.time()
    corpus, tokenizer, data_report = prepare_data(data_args, training_args, model_args, resume_from)
    if "train" not in corpus:
        raise InputError(f"{data_args.dataset_name!r} has no train split: it has {sorted(corpus)}.")
    if "validation" not in corpus and training_args.eval_strategy != "no":
        logger.info("No validation split: no evaluation during training.")
        training_args.eval_strategy = "no"
    model = build_model(model_args, tokenizer)
    if training_args.label_smoothing_factor:
        raise InputError("Set label smoothing with --label_smoothing (it is stored in the model's config).")
    if isinstance(model.config, VanillaTransformerConfig):
        model.config.label_smoothing = model_args.label_smoothing
    else:  # MarianMT has no such setting: transformers' LabelSmoother applies the same epsilon outside the model
        training_args.label_smoothing_factor = model_args.label_smoothing
    model.generation_config = paper_generation_config(model.config)
    record_trained_on(model.generation_config, data_args)  # languages and length limits, for translate and the demos
    if recipe_args.noam_learning_rate:
        training_args.learning_rate = noam_learning_rate(model.config.d_model, int(training_args.warmup_steps))
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("%s with %.1fM parameters, vocabulary %d", type(model).__name__, n_params / 1e6, len(tokenizer))

    positions = model.config.max_position_embeddings
    check_lengths(data_args, recipe_args, positions)
    datasets, lengths_report = tokenize_splits(corpus, tokenizer, data_args, training_args, positions)
    del corpus  # unmaps the texts, whose pages the BPE and the tokenizer read: 1 GB at 4.5 million pairs
    if "validation" in datasets and training_args.max_steps > 0:  # the epochs' steps are known once training starts
        given = "max_eval_samples" in given_options(argv)
        pairs = scored_pairs(len(datasets["validation"]), training_args.max_steps, given)
        datasets["validation"] = datasets["validation"].select(range(pairs))
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=datasets["train"],
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=TranslationDataCollator(
            tokenizer,
            model=model,
            label_pad_token_id=-100,
            pad_to_multiple_of=(
                COMPILED_PAD_MULTIPLE if training_args.torch_compile and training_args.device.type != "cpu" else None
            ),
        ),
        compute_metrics=build_compute_metrics(tokenizer),
        max_tokens=recipe_args.max_tokens,
        tokens_per_update=recipe_args.tokens_per_update,
        max_train_minutes=recipe_args.max_train_minutes,
    )
    trainer.add_callback(stop)
    if recipe_args.ema_decay:  # last: it reads the step's plan for evaluation, which the others may change
        trainer.add_callback(WeightAveragingCallback(recipe_args.ema_decay))
    with stop.deferred():  # a stop saves a checkpoint; a finished run's model is saved whole
        trainer.train(resume_from_checkpoint=resume_from)
        if stop.stopped_at is not None:
            return 0
        averaged = average_last_checkpoints(trainer, recipe_args.average_last)
        save_model(trainer)  # model, tokenizer, generation config and code files: ready to share
        trainer.save_state()
    if stop.signal is not None:
        return 0

    # The last point of the BLEU curve: the evaluation Trainer ran after the last step, unless the weights changed.
    validation = {} if averaged else last_evaluation(trainer)
    if "validation" in datasets and not validation:
        validation = trainer.evaluate()
    test, test_pairs = {}, len(datasets.get("test", []))
    if "test" in datasets:
        scored = scored_pairs(test_pairs, trainer.state.global_step, "max_test_samples" in given_options(argv))
        test = trainer.predict(datasets["test"].select(range(scored)), metric_key_prefix="test").metrics
    if trainer.is_world_process_zero():
        bundled = data_args.dataset_name is None and data_args.train_file is None
        batching = {
            "max_tokens": trainer.max_tokens,
            "tokens_per_update": recipe_args.tokens_per_update,
            "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        }
        report = run_report(
            trainer,
            task="translation",
            source_lang=data_args.source_lang,
            target_lang=data_args.target_lang,
            dataset={
                "name": BUNDLED_NAME if bundled else (data_args.dataset_name or " ".join(data_args.train_file)),
                "id": data_args.dataset_name,
                "config": data_args.dataset_config_name,
                "license": "cc-by-2.0-fr" if bundled else None,
                "attribution": BUNDLED_ATTRIBUTION if bundled else None,
            },
            train_samples=len(datasets["train"]),
            total_seconds=time.time() - started,
            recipe={
                **batching,
                **data_report,
                **lengths_report,
                "ema_decay": recipe_args.ema_decay,
                "averaged_checkpoints": averaged,
            },
            validation=_scores(validation, "eval"),
            test={**_scores(test, "test"), "pairs_in_split": test_pairs,
                  "num_beams": model.generation_config.num_beams,
                  "length_penalty": model.generation_config.length_penalty},
            command=f"{prog} {shlex.join(argv or [])}".strip(),
        )  # fmt: skip
        write_run_report(output_dir, report, trainer.state.log_history)
        print_summary(report, model, tokenizer, recipe_args.translate or [], output_dir, demo=bundled)
    return 0


def scored_pairs(pairs: int, steps: int, given: bool) -> int:
    """How many of a validation or test split's `pairs` a run of `steps` training steps scores: all that
    --max_eval_samples / --max_test_samples left where `given`, else one per step, at least `MIN_SCORED_PAIRS`. An
    undertrained model decodes every pair to the length limit (source + 50 tokens, 4 beams), so a smoke run of 5 steps
    would otherwise score for minutes; the demo's 2,300 steps score its whole test split."""
    return pairs if given else min(pairs, max(MIN_SCORED_PAIRS, steps))


def last_evaluation(trainer) -> dict:
    """The metrics of the evaluation that Trainer ran after the last step ({} when it ran none there)."""
    step = trainer.state.global_step
    return next(
        (entry for entry in reversed(trainer.state.log_history) if entry.get("step") == step and "eval_loss" in entry),
        {},
    )


def average_last_checkpoints(trainer, n: int) -> list[str]:
    """Load the mean of the run's last `n` checkpoints into the trained model; their names. Nothing changes (and a
    warning says why) where fewer were saved or the newest is not the last step's (a time budget ended the run)."""
    if n < 2:
        return []
    found = checkpoint_folders(trainer.args.output_dir)
    step = trainer.state.global_step
    if len(found) < n or found[-1].name != f"checkpoint-{step}":
        logger.warning(f"--average_last {n}: the run has no {n} checkpoints ending at step {step}; not averaged.")
        return []
    load_average(trainer.model, found[-n:])
    return [checkpoint.name for checkpoint in found[-n:]]


def _scores(metrics: dict, prefix: str) -> dict:
    """BLEU, chrF and the sample count of an evaluation's metrics, without the prefix."""
    names = ("bleu", "chrf", "num_samples", "gen_len")
    return {name: metrics[f"{prefix}_{name}"] for name in names if f"{prefix}_{name}" in metrics}


def print_summary(report, model, tokenizer, sentences, output_dir, demo: bool = False):
    test, training = report["test"], report["training"]
    if test.get("bleu") is not None:
        pairs = f"{test['num_samples']:,} pairs"
        if test["num_samples"] < test["pairs_in_split"]:
            pairs = (
                f"the first {test['num_samples']:,} of {test['pairs_in_split']:,} pairs: one per training step, at "
                f"least {MIN_SCORED_PAIRS}; --max_test_samples {test['pairs_in_split']} scores them all"
            )
        print(f"\nTest set ({pairs}; beam {test['num_beams']}): BLEU {test['bleu']:.2f}  chrF {test['chrf']:.2f}")
    averaged = training.get("averaged_checkpoints")
    print(
        f"Trained {training['steps']} steps ({training['epochs']} epochs) in {training['runtime_seconds'] / 60:.1f} "
        f"min; model saved to {output_dir}" + (f" (the mean of {', '.join(averaged)})" if averaged else "") + "\n"
    )
    pipeline = TranslationPipeline(model=model.eval(), tokenizer=tokenizer)
    translations = [r["translation_text"].strip() for r in pipeline(sentences)] if sentences else []
    for source, target in zip(sentences, translations):
        print(f"  {source}\n    -> {target}")
    note = closing_note(test.get("bleu"), training["steps"], training["epochs"], translations, demo)
    if note:
        print(f"\n{note}")


def closing_note(bleu: float | None, steps: int, epochs: float, translations: list[str], demo: bool) -> str | None:
    """What the end of a run says about low scores or odd translations, naming the likely reason: too few steps,
    broken translations (a phrase repeated), or a full demo run far below the demo's recorded BLEU."""
    low = (bleu is not None and bleu < 5) or not all(translations)
    if low and steps < DEMO_STEPS:
        return (
            f"These are the scores and translations of an undertrained model: it trained only {steps:,} steps "
            f"({epochs} epochs). The demo reaches its BLEU after {DEMO_STEPS:,} steps, its default (--max_steps); "
            "larger corpora need more."
        )
    broken = next((text for text in translations if repeated_phrase(text)), None)
    if broken is not None:
        return (
            f"The translations look broken: {broken[:80]!r} repeats the phrase {repeated_phrase(broken)!r}. After "
            f"{steps:,} steps this is not too little training: suspect generation (its cache) or the installed "
            "versions of torch and transformers."
        )
    if demo and steps >= DEMO_STEPS and bleu is not None and bleu < DEMO_BLEU - DEMO_BLEU_MARGIN:
        return (
            f"Test BLEU {bleu:.2f} is far below the {DEMO_BLEU:.2f} that this demo recorded after {DEMO_STEPS:,} "
            f"steps ({DEMO_RESULT}). The same seed and recipe land within about a point of it on any machine, so "
            "this is not too little training: something in the code or the installed software differs."
        )
    if low:
        scores = "Empty translations" if bleu is None else f"Test BLEU {bleu:.2f}"
        return f"{scores} after {steps:,} steps ({epochs} epochs): check the data, or train longer."
    return None


def repeated_phrase(text: str, times: int = 3, longest: int = 4) -> str | None:
    """A phrase of up to `longest` words that `text` says `times` times in a row ("I I I", "go home go home go
    home"), the mark of a broken decoder or model; None when there is none."""
    words = text.split()
    for size in range(1, longest + 1):
        for start in range(len(words) - size * times + 1):
            phrase = words[start : start + size]
            if all(words[start + k * size : start + (k + 1) * size] == phrase for k in range(1, times)):
                return " ".join(phrase)
    return None
