"""What every step of a `distill` run reads: the parsed options, the teacher, the student's sizes and configuration,
the recipe's options and the output folder (`Run`), all checked before the first step starts."""

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from transformers import GenerationConfig

from ..data.folders import check_model_type, check_output_dir, check_translation_folder, load_tokenizer, resolve_model
from ..errors import InputError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..recipes.translation import parse_args
from ..training.report import read_run_report
from ..translate.backends import check_before_loading
from ..translate.options import DecodeOptions, EngineOptions, default_threads
from .corpus import corpus_inputs, file_stamps
from .records import option_values
from .student import StudentSizes, check_copy, student_config


# The options that set how long the recipe trains. Given none, the student trains as many steps as its teacher did (its
# run report says how many): the recipe's own default of 3 epochs left the demo's student 1,335 steps behind a teacher
# of 2,300, and 2 BLEU below it.
TRAINING_LENGTH = ("--max_steps", "--num_train_epochs", "--max_train_minutes")


@dataclass
class Run:
    """One run's options and what they resolve to; the steps take it."""

    args: object  # distill's parsed options (`options.parse`)
    data_args: object  # the recipe's corpus options
    recipe: list[str]  # the recipe's other options, with the training length
    prog: str
    command: str  # as the user gave it, for the student's model card
    output_dir: Path
    teacher: Path
    tokenizer: object
    engine: EngineOptions
    decoding: DecodeOptions  # the teacher's
    length_penalty: float  # the teacher's search's, to undo in its scores
    sizes: StudentSizes
    student_config: VanillaTransformerConfig
    training_args: object  # the recipe's, checked now rather than after the teacher's translations
    corpus_inputs: dict
    monolingual: dict

    @property
    def languages(self) -> tuple[str, str]:
        return self.data_args.source_lang, self.data_args.target_lang

    @property
    def main_process(self) -> bool:
        """Under accelerate launch every process trains; the other steps are the first process's."""
        return int(os.environ.get("RANK", "0")) == 0

    @property
    def report_threads(self) -> int:
        return self.args.report_threads or default_threads()

    def path(self, *parts) -> Path:
        return self.output_dir.joinpath(*parts)

    def recipe_argv(self, name: str, train_file: Path) -> list[str]:
        """The translation recipe's command line for training `name` (a folder of the output) on `train_file`."""
        corpus = self.path("corpus")
        argv = [*self.recipe, "--model_name_or_path", str(self.path("student-init")), "--train_file", str(train_file)]
        argv += ["--test_file", str(corpus / "test.jsonl"), "--output_dir", str(self.path(name))]
        argv += ["--source_lang", self.languages[0], "--target_lang", self.languages[1]]
        if (corpus / "validation.jsonl").is_file() or not corpus.is_dir():
            argv += ["--validation_file", str(corpus / "validation.jsonl")]
        return argv

    @classmethod
    def of(cls, args, data_args, recipe: list[str], prog: str, command: str = "") -> "Run":
        output_dir = check_output_dir(args.output_dir, overwrite=True).resolve()  # a rerun completes it
        teacher = check_teacher(args.teacher)
        length = teacher_length(teacher, recipe)
        if length and int(os.environ.get("RANK", "0")) == 0:
            print(f"{prog}: the student trains {length[-1]} steps, as its teacher did.", file=sys.stderr)
        decoding = DecodeOptions.of(args)
        if decoding.num_beams == 1:  # the teacher's greedy search: distill's default early stopping has no beams
            decoding = dataclasses.replace(decoding, early_stopping=None)
        decoding = dataclasses.replace(decoding, split_sentences=False, source_lang=data_args.source_lang)
        engine = EngineOptions.of(args).prepared(processes=None)
        check_before_loading(str(teacher), engine, decoding)  # not in Ray's workers
        teacher_config = VanillaTransformerConfig.from_pretrained(teacher)
        encoder_layers, decoder_layers = args.student_layers
        sizes = StudentSizes.of(
            teacher_config,
            args.student_preset,
            d_model=args.student_d_model,
            encoder_layers=encoder_layers,
            decoder_layers=decoder_layers,
            heads=args.student_heads,
            ffn_dim=args.student_ffn_dim,
        )
        config = student_config(teacher_config, sizes, args.student_dropout)
        if args.init == "copy":
            check_copy(config, teacher_config)
        length_penalty = decoding.length_penalty
        if length_penalty is None:
            length_penalty = GenerationConfig.from_pretrained(teacher).length_penalty or 1.0
        run = cls(
            args=args,
            data_args=data_args,
            recipe=recipe + length,
            prog=prog,
            command=command,
            output_dir=output_dir,
            teacher=teacher,
            tokenizer=load_tokenizer(str(teacher), "--teacher"),
            engine=engine,
            decoding=decoding,
            length_penalty=length_penalty,
            sizes=sizes,
            student_config=config,
            training_args=None,
            corpus_inputs=corpus_inputs(data_args),
            monolingual=file_stamps(args.monolingual),
        )
        run.training_args = parse_args(run.recipe_argv("student", run.path("distilled", "train.jsonl")), prog)[3]
        return run


def check_teacher(name: str) -> Path:
    """The teacher's local folder, refused by name where it holds no model of this package for translation."""
    folder = resolve_model(name, "--teacher")
    if not Path(folder).is_dir():
        raise InputError(f"--teacher {name}: give a local model folder (download a Hub model first).")
    check_translation_folder(folder, "--teacher")
    check_model_type(folder, VanillaTransformerForConditionalGeneration, "--teacher")
    return Path(folder).resolve()


def teacher_stamps(folder: Path) -> dict:
    """What decides the teacher's outputs: its weights, configurations and tokenizer files, with their stamps."""
    names = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
    return file_stamps([*sorted(folder.glob("*.safetensors")), *(folder / n for n in names if (folder / n).is_file())])


def teacher_length(teacher: Path, recipe: list[str]) -> list[str]:
    """`--max_steps` of the teacher's training where the recipe options set no length (see `TRAINING_LENGTH`)."""
    steps = read_run_report(teacher).get("training", {}).get("steps")
    if any(name in option_values(recipe) for name in TRAINING_LENGTH) or not steps:
        return []
    return ["--max_steps", str(steps)]
