"""The options of `hf-vanilla-transformer distill`, declared once (as `translate.options` declares the decoding
options): each `Option` gives the parser its argument and help, its minimum, the recipe options that it stands for
(which distill then refuses, naming it), and the step whose record keeps it, so that a rerun with another value is
refused by name. The teacher's decoding options are `translate.options`' own; the rest of a command line goes to the
translation recipe (`train translation --help`).
"""

import argparse
import os
import sys
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..data.training_corpus import CORPUS_OPTIONS
from ..errors import UNRECOGNIZED, CommandParser, InputError, check_minimums, did_you_mean, report
from ..recipes import translation
from ..translate.options import DEFAULT_SHARD_ROWS, add_arguments
from .records import option_values


# What each student preset sets; `shallow` keeps the teacher's width and encoder and decodes with two layers, at most
# the teacher's (Kasai et al. 2021, "Deep Encoder, Shallow Decoder": decoding costs per target token, encoding per
# sentence); two rather than one as chosen on the validation split (docs/distillation.md). `tiny` and `base` are the
# Bergamot students' sizes (browsermt/students): 256 and 512 wide, 6 encoder and 2 decoder layers.
PRESETS = {
    "shallow": dict(decoder_layers=2),
    "tiny": dict(d_model=256, encoder_layers=6, decoder_layers=2, heads=8, ffn_dim=1536),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=2, heads=8, ffn_dim=2048),
}
INITS = ("copy", "random")
SELECTION_METRICS = ("chrf", "bleu")  # sentence chrF or BLEU against the reference (Mozilla's pipeline offers both)
EXPORTS = ("onnx", "transformers.js")
# The translation options that are not the teacher's to take here: the recipe's own --seed, --max_tokens and
# --source_lang have those names, a corpus line is one sentence, distillation decodes by beam search, and over the
# whole vocabulary (the vocabulary map is made from its output), without terms.
NOT_TEACHER_OPTIONS = ("seed", "max_tokens", "source_lang", "split_sentences", "batch_size", "do_sample")
NOT_TEACHER_OPTIONS += ("temperature", "top_k", "top_p", "use_vmap", "vmap", "glossary", "glossary_ignore_case")
# The teacher's beam and n best: the paper's beam search (the demo's own; early stopping, which CTranslate2 runs too),
# and every hypothesis of it, which beam search has anyway, for the selection (docs/distillation.md).
TEACHER_DECODING = dict(num_beams=4, nbest=4, early_stopping=True)
# The recipe's options that no option of distill's stands for, and what decides them.
DECIDED_ELSEWHERE = {
    "architecture": "the teacher",
    "norm_first": "the teacher",
    "vocab_size": "the teacher's tokenizer",
    "tokenizer_train_pairs": "the teacher's tokenizer",
    "max_position_embeddings": "the teacher",
    "overwrite": "nothing finished is replaced",
    "resume_from_checkpoint": "a rerun resumes by itself",
}
GROUPS = {
    "student": "the student",
    "corpus": "the distilled corpus",
    "shipping": "comparison and shipping",
    "ray": "the teacher's translations on Ray",
}


@dataclass(frozen=True)
class Option:
    name: str
    group: str | None  # `GROUPS`' key; None: the command's own
    step: str | None = None  # the step whose record keeps its value (None: it changes no result)
    stands_for: tuple[str, ...] = ()  # the recipe's options it decides
    minimum: float | None = None
    argument: dict = field(default_factory=dict)  # add_argument's keywords


def option(name, group=None, step=None, stands_for=(), minimum=None, **argument) -> Option:
    return Option(name, group, step, tuple(stands_for), minimum, argument)


OPTIONS = (
    option("teacher", required=True, help="the teacher's model folder (trained by train translation)"),
    option("output_dir", required=True, help="every step's result (a rerun completes it)"),
    option(
        "monolingual",
        nargs="+",
        default=[],
        metavar="FILE",
        help="more source text to distill (text files, one sentence a line, or JSON Lines / Parquet with a 'text' "
        "column)",
    ),
    option(
        "student_preset",
        "student",
        "student-init",
        ("paper_preset",),
        choices=list(PRESETS),
        default="shallow",
        help="shallow: the teacher's width and encoder, two decoder layers (at most the teacher's); tiny, base: "
        "Bergamot's sizes",
    ),
    option(
        "student_layers",
        "student",
        stands_for=("encoder_layers", "decoder_layers"),
        metavar="ENC,DEC",
        help="encoder and decoder layers, e.g. 6,2",
    ),
    option("student_d_model", "student", stands_for=("d_model",), minimum=2, type=int),
    option("student_ffn_dim", "student", stands_for=("ffn_dim",), minimum=1, type=int),
    option("student_heads", "student", stands_for=("attention_heads",), minimum=1, type=int),
    option("student_dropout", "student", stands_for=("dropout",), type=float, help="(default: the teacher's)"),
    option(
        "init",
        "student",
        "student-init",
        ("model_name_or_path",),
        choices=INITS,
        default="copy",
        help="copy: start from the teacher's embeddings and evenly chosen layers (its widths needed); random: from "
        "scratch (default copy)",
    ),
    option(
        "selection_metric",
        "corpus",
        "distilled",
        choices=SELECTION_METRICS,
        default="chrf",
        help="the n-best hypothesis kept is the one closest to the reference by this (default chrf)",
    ),
    option(
        "drop_worst",
        "corpus",
        "distilled",
        type=float,
        default=0.05,
        help="share dropped by the teacher's score per token (default 0.05)",
    ),
    option(
        "max_length_ratio",
        "corpus",
        "distilled",
        type=float,
        default=3.0,
        help="drop pairs whose word counts differ by more than this factor (default 3)",
    ),
    option("mix_references", "corpus", "distilled", action="store_true", help="train on the references too"),
    option("baseline", "shipping", "report", action="store_true", help="also train the student on the references"),
    option(
        "export",
        "shipping",
        "report",
        default="",
        metavar="FORMATS",
        help="also onnx, transformers.js (comma-separated), checked as verify-export checks; CTranslate2 int8 always",
    ),
    option("report_threads", "shipping", minimum=1, type=int, help="threads of the report's engines (default: all)"),
    option(
        "address",
        "ray",
        default=os.environ.get("RAY_ADDRESS"),
        help="a Ray cluster to join (default: $RAY_ADDRESS, else a local Ray on this machine's cores)",
    ),
    option("num_workers", "ray", minimum=1, type=int, help="actors with the teacher (default: a GPU each, or 4 CPUs)"),
    option("verbose", "ray", action="store_true", help="show Ray's own log lines and its workers' output"),
    option(
        "shard_rows",
        "ray",
        "teacher-translations",
        minimum=1,
        type=int,
        default=DEFAULT_SHARD_ROWS,
        help="lines per shard, the unit of resume",
    ),
)
# Where a recipe option is given that distill decides: which option of distill's decides it.
DECIDES = {
    **{name: f"--{o.name}" for o in OPTIONS for name in o.stands_for},
    **DECIDED_ELSEWHERE,
}
DESCRIPTION = """Sequence-level knowledge distillation (Kim and Rush, 2016), from a trained teacher to a small student
shipped as CTranslate2 int8, with a report that measures one against the other (docs/distillation.md)."""
EPILOG = """Other options are the translation recipe's: the corpus (--train_file, --source_lang, ...; default: the
bundled corpus) and the training (--max_steps, --max_tokens, --torch_compile, ...); see `hf-vanilla-transformer train
translation --help`. Without --max_steps, --num_train_epochs or --max_train_minutes the student trains as many steps
as its teacher's run report says the teacher trained (the recipe's 3 epochs for a teacher without one)."""


def recorded(args, step: str) -> dict:
    """The options that the record of `step` keeps, as the user would type them."""
    return {f"--{o.name}": getattr(args, o.name) for o in OPTIONS if o.step == step}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, description=DESCRIPTION, epilog=EPILOG, allow_abbrev=False)
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    for o in OPTIONS:
        (groups[o.group] if o.group else parser).add_argument(f"--{o.name}", **o.argument)
    add_arguments(parser, exclude=NOT_TEACHER_OPTIONS, **TEACHER_DECODING)
    return parser


def parse(argv: list[str], prog: str):
    """distill's own options (with the teacher's decoding), the recipe's corpus options (its `DataArguments`), and the
    recipe's other options, for the training steps."""
    parser = build_parser(prog)
    args, recipe = parser.parse_known_args(argv)
    # The rest are the recipe's options: another word is named here, with the close option of either command.
    theirs = [name for action in HfArgumentParser(translation.ARGUMENTS)._actions for name in action.option_strings]
    unknown, taking = [], False
    for word in recipe:  # each unknown option with its values
        taking = word.split("=", 1)[0] not in theirs if word.startswith("--") else taking
        unknown += [word] * taking
    if unknown:
        message = f"{UNRECOGNIZED}{' '.join(unknown)}" + did_you_mean(unknown, [*parser.option_names(), *theirs])
        sys.exit(report(prog, f"{message} (see --help)"))
    check_minimums({o.name: o.minimum for o in OPTIONS if o.minimum is not None}, args)
    if not 0 <= args.drop_worst < 1:
        raise InputError(f"--drop_worst must be a share in [0, 1), got {args.drop_worst}.")
    given = option_values(recipe)
    for name, decides in DECIDES.items():
        if f"--{name}" in given:
            raise InputError(f"--{name} is not an option of distill: {decides} decides it.")
    data_args, _ = HfArgumentParser(translation.DataArguments).parse_args_into_dataclasses(
        recipe, return_remaining_strings=True
    )
    args.export = [name for name in args.export.split(",") if name]
    if any(name not in EXPORTS for name in args.export):
        raise InputError(f"--export {','.join(args.export)}: expected some of {', '.join(EXPORTS)}, comma-separated.")
    args.student_layers = parse_layers(args.student_layers)
    return args, data_args, without(recipe, (*CORPUS_OPTIONS, "max_train_samples"))


def parse_layers(value: str | None) -> tuple[int | None, int | None]:
    """--student_layers ENC,DEC (e.g. 6,2)."""
    if value is None:
        return None, None
    parts = value.replace(" ", "").split(",")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise InputError(f"--student_layers {value}: expected ENCODER,DECODER layers, e.g. 6,2.")
    return int(parts[0]), int(parts[1])


def without(argv: list[str], names) -> list[str]:
    """`argv` without the options `names` and their values."""
    kept, dropping = [], False
    for word in argv:
        if word.startswith("--"):
            dropping = word[2:].partition("=")[0] in names
        if not dropping:
            kept.append(word)
    return kept
