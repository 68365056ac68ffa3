"""What the three heads' recipes share: the paper's optimizer and schedule, the demo model's sizes, sizes and a
tokenizer -> a configuration, and the argument parsing of `hf-vanilla-transformer train ...`."""

import os
import re
import signal
import sys

from huggingface_hub.errors import StrictDataclassError
from transformers import HfArgumentParser, MarianConfig, PreTrainedConfig

from ..data.tokenizer import MIN_VOCAB_SIZE
from ..errors import InputError, OneLineErrors, check_minimums
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..training.progress import StopOnSignals


# Section 5.3: Adam with beta1 = 0.9, beta2 = 0.98 and epsilon = 1e-9; the learning rate rises linearly over the
# warm-up steps, then decays with the inverse square root of the step (transformers' `inverse_sqrt`).
PAPER_OPTIMIZER = dict(
    adam_beta1=0.9,
    adam_beta2=0.98,
    adam_epsilon=1e-9,
    weight_decay=0.0,
    lr_scheduler_type="inverse_sqrt",
)
# The paper's schedule was made for 100,000 steps and checkpoint averaging; in a run of a few thousand steps it leaves
# the learning rate at a third of its peak at the end. The recipes' own anneals to 0 by the last step, whatever ends
# the run: warm-up, a stable phase, and a cool-down of 1 - sqrt shape over the last fifth of the steps
# (`training/schedule.py`; Hägele et al. 2024), chosen on the translation demo's validation split
# (docs/results/2026-12-02-xeon-recipe.md).
BUDGET_SCHEDULE = dict(lr_scheduler_type="warmup_stable_decay")
# Every head's demo: the paper's optimizer on the bundled corpus, a fixed number of steps (the same model on every
# machine), logged and evaluated as it goes. Each head adds its own learning rate, batch and step count.
DEMO_TRAINING = dict(
    PAPER_OPTIMIZER,
    **BUDGET_SCHEDULE,
    warmup_steps=300,
    per_device_train_batch_size=64,
    eval_strategy="steps",
    logging_steps=50,
    dataloader_num_workers=0,
    report_to="none",
    seed=42,
    # Every parameter takes part in every step: under DDP, transformers' default for a model without gradient
    # checkpointing (True) would search the autograd graph for unused ones after every forward, and say it found none.
    ddp_find_unused_parameters=False,
)
# The demos' model: 7.6M parameters with the translator's shared vocabulary of 8,000.
DEMO_SIZES = dict(d_model=256, layers=3, heads=4, ffn_dim=1024)
ARCHITECTURES = ("vanilla", "marian")
# Options of every recipe (its own and `TrainingArguments`') that would fail only once training starts, inside torch's
# sampler or the tokenizer trainer, when below these.
MINIMUMS = dict(
    per_device_train_batch_size=1,
    per_device_eval_batch_size=1,
    gradient_accumulation_steps=1,
    vocab_size=MIN_VOCAB_SIZE,
)


def expand_sizes(d_model: int, layers: int | tuple[int, int], heads: int, ffn_dim: int) -> dict:
    """The configuration fields of a model `d_model` wide with `layers` per stack (or `(encoder, decoder)` layers),
    `heads` attention heads and feed-forward width `ffn_dim` in every layer. Both stacks get sizes even where a model
    uses one (a decoder-only or encoder-only head): generic code reads both."""
    encoder_layers, decoder_layers = layers if isinstance(layers, tuple) else (layers, layers)
    return dict(
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
    )


# The options of the single-stack recipes (language-modeling, classification) that set each configuration field: a
# configuration error names what the user typed.
SINGLE_STACK_OPTIONS = {
    **expand_sizes("--d_model", "--layers", "--heads", "--ffn_dim"),
    "vocab_size": "--vocab_size",
    "dropout": "--dropout",
}


def tokenizer_fields(tokenizer) -> dict:
    """The vocabulary size and special token ids of a configuration that fits `tokenizer`: decoding starts from its
    `<s>`, as in this package's tokenizers."""
    return dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )


def model_config_for(
    architecture: str = "vanilla", options: dict[str, str] | None = None, **fields
) -> PreTrainedConfig:
    """A `VanillaTransformerConfig` (`"vanilla"`) or a `MarianConfig` (`"marian"`) with `fields` (sizes from
    [`expand_sizes`], [`tokenizer_fields`], dropout...); sizes that do not fit together are an [`InputError`], which
    names the command-line option behind a field where `options` (field -> option) says which.

    MarianMTModel then has this package's architecture: sinusoidal positions, post-norm, ReLU, one embedding matrix
    scaled by sqrt(d_model) and shared by source, target and output, no dropout on attention or activations, and no
    forced end-of-sequence token (our models end sentences themselves). Its sizes are checked by this package's
    configuration (the same fields): MarianConfig checks none, and its model fails with its layers' names.
    """
    if architecture not in ARCHITECTURES:
        raise InputError(f"--architecture must be one of {ARCHITECTURES}, got {architecture!r}.")
    try:
        config = VanillaTransformerConfig(**fields)
        if architecture == "vanilla":
            return config
        same_architecture = dict(
            activation_function="relu",
            scale_embedding=True,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            attention_dropout=0.0,
            activation_dropout=0.0,
            forced_eos_token_id=None,
        )
        return MarianConfig(**{**same_architecture, **fields})
    except (ValueError, StrictDataclassError) as error:  # sizes that do not fit together, named by the configuration
        raise InputError(named_as_options(str(error.__cause__ or error), options or {})) from None


def named_as_options(message: str, options: dict[str, str]) -> str:
    """A configuration's `message` with the fields that `options` maps (`encoder_attention_heads`, d_model=256)
    named as the options the user typed (--attention_heads, --d_model 256)."""
    if not options:
        return message
    message = re.sub(r"^\w+Config: ", "", message)
    names = "|".join(map(re.escape, sorted(options, key=len, reverse=True)))
    message = re.sub(rf"`({names})`", lambda match: options[match[1]], message)
    return re.sub(rf"\b({names})=", lambda match: f"{options[match[1]]} ", message)


def single_stack_config(
    tokenizer,
    d_model: int = 256,
    layers: int = 4,
    heads: int = 4,
    ffn_dim: int = 1024,
    max_position_embeddings: int = 128,
    options: dict[str, str] | None = None,
    **kwargs,
) -> VanillaTransformerConfig:
    """A config that fits `tokenizer` for a model of one stack: pass `is_encoder_decoder=False` for
    [`VanillaTransformerForCausalLM`]; [`VanillaTransformerForSequenceClassification`] takes either. `kwargs` go to the
    config; `options` as in [`model_config_for`]."""
    fields = dict(expand_sizes(d_model, layers, heads, ffn_dim), **tokenizer_fields(tokenizer), **kwargs)
    return model_config_for("vanilla", options, max_position_embeddings=max_position_embeddings, **fields)


def run_recipe(train, argv: list[str] | None, prog: str, resumable: bool = True, ending: bool = True) -> int:
    """`train(argv, prog, stop)`, a recipe, with Ctrl-C and SIGTERM handled by `stop`, a [`StopOnSignals`] that the
    recipe adds to its trainer: a stop ends with one line saying where the run stopped and how to continue (unless
    not `ending`: a command that runs the recipe as one of its steps says how it goes on), and exit status 128 + the
    signal's number (130 for Ctrl-C)."""
    stop = StopOnSignals(resumable)
    with stop.handling():
        try:
            status = train(argv, prog, stop)
        except KeyboardInterrupt:
            stop.signal = stop.signal or signal.SIGINT
    if stop.signal is None:
        return status
    if ending and int(os.environ.get("RANK", "0")) == 0:  # one line from all the processes of a distributed run
        print(f"{prog}: {stop.ending()}", file=sys.stderr)
    return stop.exit_status


class RecipeArgumentParser(OneLineErrors, HfArgumentParser):
    """`HfArgumentParser` (the recipe's dataclasses and every `TrainingArguments` option) with one-line errors."""


def parse_recipe_arguments(dataclass_types, defaults: dict, argv: list[str] | None, prog: str, description: str):
    """The recipe's dataclasses parsed from `argv`, with `defaults` in place of the dataclasses' own."""
    parser = RecipeArgumentParser(dataclass_types, prog=prog, description=description)
    parser.set_defaults(**defaults)
    *parsed, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:  # HfArgumentParser would raise a ValueError: a traceback for a user's mistake
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    check_minimums(MINIMUMS, *parsed)
    if any(getattr(arguments, "torch_compile", False) for arguments in parsed):
        compile_with_dynamic_shapes()
    return tuple(parsed)


def compile_with_dynamic_shapes() -> None:
    """Batches vary in shape: under `--torch_compile` the model is compiled with dynamic shapes from the first batch on
    (accelerate's setting; Trainer leaves it unset), unless the user set it. `accelerate launch` sets it to False
    where its own configuration does not compile (backend NO): compiled so, every new shape would compile anew, up to
    torch's limit."""
    launcher_default = os.environ.get("ACCELERATE_DYNAMO_BACKEND") == "NO"
    if launcher_default or "ACCELERATE_DYNAMO_USE_DYNAMIC" not in os.environ:
        os.environ["ACCELERATE_DYNAMO_USE_DYNAMIC"] = "true"


__all__ = [
    "ARCHITECTURES",
    "DEMO_SIZES",
    "BUDGET_SCHEDULE",
    "DEMO_TRAINING",
    "PAPER_OPTIMIZER",
    "SINGLE_STACK_OPTIONS",
    "expand_sizes",
    "model_config_for",
    "parse_recipe_arguments",
    "run_recipe",
    "single_stack_config",
    "tokenizer_fields",
]
