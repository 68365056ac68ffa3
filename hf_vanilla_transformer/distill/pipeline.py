"""`hf-vanilla-transformer distill`: sequence-level knowledge distillation (Kim and Rush, 2016), from a trained teacher
to a small student shipped as CTranslate2 int8, with a report that measures one against the other.

    hf-vanilla-transformer distill --teacher outputs/demo-de-en --output_dir outputs/distill

Steps, each writing its result into --output_dir (records in steps/, see `records`):

    corpus                    the corpus read and cleaned as the translation recipe does, written as JSON Lines
    teacher-translations      the teacher's n best of every training source (and --monolingual line), on Ray Data
                              through translate-corpus's engine: resumable shards
    distilled                 per line the hypothesis with the best chrF against the reference; filtered
    student-init              the student: the teacher's configuration at the student's sizes, layers copied or random
    student                   trained by the translation recipe on the distilled pairs (resumes from its checkpoints)
    baseline                  (--baseline) the same student trained on the references for as many steps
    vocabulary-map            student/vmap.txt, the lexical shortlist of `--use_vmap`, from the distilled pairs
    student-ctranslate2-int8, teacher-ctranslate2-int8, student-onnx (--export)
    report                    report.json, report.md and the student's model card

Options other than those below are the translation recipe's (`hf-vanilla-transformer train translation --help`): the
corpus (--train_file, --dataset_name, --source_lang, ...; default: the bundled corpus) and the training (--max_steps,
--max_tokens, --torch_compile, ...). docs/distillation.md describes the steps and the choices.
"""

import dataclasses
import json
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path

import torch
from transformers import GenerationConfig, HfArgumentParser, set_seed

from ..data.folders import (
    check_model_type,
    check_output_dir,
    check_translation_folder,
    load_tokenizer,
    load_translation_model,
    resolve_model,
    write_whole,
    writes_folder,
)
from ..data.training_corpus import CORPUS_OPTIONS
from ..data.vocabulary_map import VMAP_NAME, write_vocabulary_map
from ..errors import UNRECOGNIZED, CommandParser, InputError, check_minimums, did_you_mean, import_extra, report
from ..interop.parity import misses, parity_table
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..recipes import translation
from ..recipes.common import run_recipe
from ..recipes.translation import DataArguments, parse_args
from ..training.checkpoints import checkpoint_folders, last_complete_checkpoint, verify_checkpoint
from ..training.report import read_run_report
from ..translate.backends import check_before_loading
from ..translate.corpus import DEFAULT_SHARD_ROWS, translate_corpus
from ..translate.options import DecodeOptions, EngineOptions, add_arguments, default_threads
from ..translate.ray_session import RaySession
from ..translate.translator import output_settings
from .corpus import SELECTION_METRICS, SOURCES, corpus_inputs, distill_pairs, file_stamps, write_corpus
from .records import Step, Steps, option_values
from .report import distillation_gain, evaluate_models, format_report, gaps, write_model_card
from .student import INITS, PRESETS, StudentSizes, build_student, check_copy, parse_layers, student_config


# The translation options that are not the teacher's to take here: the recipe's own --seed, --max_tokens and
# --source_lang have those names, a corpus line is one sentence, distillation decodes by beam search, and over the
# whole vocabulary (the vocabulary map is made from its output), without terms.
NOT_TEACHER_OPTIONS = ("seed", "max_tokens", "source_lang", "split_sentences", "batch_size")
NOT_TEACHER_OPTIONS += ("do_sample", "temperature", "top_k", "top_p", "use_vmap", "vmap", "glossary")
NOT_TEACHER_OPTIONS += ("glossary_ignore_case",)
# The teacher's beam and n best: the paper's beam search (the demo's own; early stopping, which CTranslate2 runs too),
# and every hypothesis of it, which beam search has anyway, for the chrF selection (docs/distillation.md).
TEACHER_DECODING = dict(num_beams=4, nbest=4, early_stopping=True)
EXPORTS = ("onnx", "transformers.js")
# The recipe's model options: the student's sizes replace them, and the teacher decides the rest.
STUDENT_OWN = {
    "model_name_or_path": "--init",
    "architecture": "the teacher",
    "paper_preset": "--student_preset",
    "d_model": "--student_d_model",
    "encoder_layers": "--student_layers",
    "decoder_layers": "--student_layers",
    "attention_heads": "--student_heads",
    "ffn_dim": "--student_ffn_dim",
    "dropout": "--student_dropout",
    "norm_first": "the teacher",
    "vocab_size": "the teacher's tokenizer",
    "tokenizer_train_pairs": "the teacher's tokenizer",
    "max_position_embeddings": "the teacher",
    "overwrite": "nothing finished is replaced",
    "resume_from_checkpoint": "a rerun resumes by itself",
}
# The recipe's corpus options that the corpus step reads; the others go on to the recipe with the distilled corpus.
CORPUS_STEP_OPTIONS = (*CORPUS_OPTIONS, "max_train_samples")
TRAINED = ("student", "baseline")  # the steps every process of `accelerate launch` takes part in
# The options that set how long the recipe trains. Given none, the student trains as many steps as its teacher did (its
# run report says how many): the recipe's own default of 3 epochs left the demo's student 1,335 steps behind a teacher
# of 2,300, and 2 BLEU below it.
TRAINING_LENGTH = ("--max_steps", "--num_train_epochs", "--max_train_minutes")


def build_parser(prog: str):
    parser = CommandParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="Other options are the translation recipe's: the corpus (--train_file, --source_lang, ...; default: "
        "the bundled corpus) and the training (--max_steps, --max_tokens, --torch_compile, ...); see "
        "`hf-vanilla-transformer train translation --help` and docs/distillation.md. Without --max_steps, "
        "--num_train_epochs or --max_train_minutes the student trains as many steps as its teacher's run report "
        "says the teacher trained (the recipe's 3 epochs for a teacher without one).",
        allow_abbrev=False,
    )
    parser.add_argument("--teacher", required=True, help="the teacher's model folder (trained by train translation)")
    parser.add_argument("--output_dir", required=True, help="every step's result (a rerun completes it)")
    parser.add_argument("--monolingual", nargs="+", default=[], metavar="FILE", help="more source text to distill "
                        "(text files, one sentence a line, or JSON Lines / Parquet with a 'text' column)")  # fmt: skip
    student = parser.add_argument_group("the student")
    student.add_argument("--student_preset", choices=list(PRESETS), default="shallow", help="shallow: the "
                         "teacher's width and encoder, one decoder layer; tiny, base: Bergamot's sizes")  # fmt: skip
    student.add_argument("--student_layers", metavar="ENC,DEC", help="encoder and decoder layers, e.g. 6,2")
    student.add_argument("--student_d_model", type=int)
    student.add_argument("--student_ffn_dim", type=int)
    student.add_argument("--student_heads", type=int)
    student.add_argument("--student_dropout", type=float, help="(default: the teacher's)")
    student.add_argument("--init", choices=INITS, default="copy", help="copy: start from the teacher's embeddings and "
                         "evenly chosen layers (its widths needed); random: from scratch (default copy)")  # fmt: skip
    corpus = parser.add_argument_group("the distilled corpus")
    corpus.add_argument("--selection_metric", choices=SELECTION_METRICS, default="chrf", help="the n-best "
                        "hypothesis kept is the one closest to the reference by this (default chrf)")  # fmt: skip
    corpus.add_argument("--drop_worst", type=float, default=0.05, help="share dropped by the teacher's score per "
                        "token (default 0.05)")  # fmt: skip
    corpus.add_argument("--max_length_ratio", type=float, default=3.0, help="drop pairs whose word counts differ by "
                        "more than this factor (default 3)")  # fmt: skip
    corpus.add_argument("--mix_references", action="store_true", help="train on the references too")
    more = parser.add_argument_group("comparison and shipping")
    more.add_argument("--baseline", action="store_true", help="also train the student on the references alone")
    more.add_argument("--export", default="", metavar="FORMATS", help="also onnx, transformers.js (comma-separated), "
                      "checked as verify-export checks; CTranslate2 int8 always")  # fmt: skip
    more.add_argument("--report_threads", type=int, help="threads of the report's engines (default: all cores)")
    ray = parser.add_argument_group("the teacher's translations on Ray")
    ray.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="a Ray cluster to join (default: "
                     "$RAY_ADDRESS, else a local Ray on this machine's cores)")  # fmt: skip
    ray.add_argument("--num_workers", type=int, help="actors with the teacher (default: one per GPU, else per 4 CPUs)")
    ray.add_argument("--verbose", action="store_true", help="show Ray's own log lines and its workers' output")
    ray.add_argument("--shard_rows", type=int, default=DEFAULT_SHARD_ROWS, help="lines per shard, the unit of resume")
    add_arguments(parser, exclude=NOT_TEACHER_OPTIONS, **TEACHER_DECODING)
    return parser


def parse(argv: list[str], prog: str):
    """distill's own options, the recipe's corpus options (its `DataArguments`), and the recipe options that go on to
    the training steps."""
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
    minimums = dict(
        num_workers=1, shard_rows=1, report_threads=1, student_d_model=2, student_ffn_dim=1, student_heads=1
    )
    check_minimums(minimums, args)
    if not 0 <= args.drop_worst < 1:
        raise InputError(f"--drop_worst must be a share in [0, 1), got {args.drop_worst}.")
    given = option_values(recipe)
    for name, decides in STUDENT_OWN.items():
        if f"--{name}" in given:
            raise InputError(f"--{name} is not an option of distill: {decides} decides it.")
    data_args, _ = HfArgumentParser(DataArguments).parse_args_into_dataclasses(recipe, return_remaining_strings=True)
    args.export = [name for name in args.export.split(",") if name]
    if any(name not in EXPORTS for name in args.export):
        raise InputError(f"--export {','.join(args.export)}: expected some of {', '.join(EXPORTS)}, comma-separated.")
    args.student_layers = parse_layers(args.student_layers)
    return args, data_args, without(recipe, CORPUS_STEP_OPTIONS)


def without(argv: list[str], names) -> list[str]:
    """`argv` without the options `names` and their values."""
    kept, dropping = [], False
    for word in argv:
        if word.startswith("--"):
            dropping = word[2:].partition("=")[0] in names
        if not dropping:
            kept.append(word)
    return kept


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


class Stopped(Exception):
    """A training step that Ctrl-C or SIGTERM stopped, with its exit status."""

    def __init__(self, step: str, status: int):
        super().__init__(step, status)
        self.step, self.status = step, status


class Distillation:
    """The steps of one run, from parsed options (see the module docstring)."""

    def __init__(self, args, data_args, recipe: list[str], prog: str, command: str = ""):
        self.args, self.data_args, self.prog = args, data_args, prog
        self.command = command  # as the user gave it, for the student's model card
        self.output_dir = check_output_dir(args.output_dir, overwrite=True).resolve()  # a rerun completes it
        # Under accelerate launch every process trains; the other steps are the first process's.
        self.main_process = int(os.environ.get("RANK", "0")) == 0
        self.languages = (data_args.source_lang, data_args.target_lang)
        self.teacher = check_teacher(args.teacher)
        self.recipe = recipe + teacher_length(self.teacher, recipe)
        if self.recipe != recipe and self.main_process:
            print(f"{prog}: the student trains {self.recipe[-1]} steps, as its teacher did.", file=sys.stderr)
        self.tokenizer = load_tokenizer(str(self.teacher), "--teacher")
        self.engine = EngineOptions.of(args).prepared(processes=None)
        decoding = DecodeOptions.of(args)
        if decoding.num_beams == 1:  # the teacher's greedy search: distill's default early stopping has no beams
            decoding = dataclasses.replace(decoding, early_stopping=None)
        self.decoding = dataclasses.replace(decoding, split_sentences=False, source_lang=data_args.source_lang)
        check_before_loading(str(self.teacher), self.engine, self.decoding)  # not in Ray's workers
        teacher_config = VanillaTransformerConfig.from_pretrained(self.teacher)
        self.length_penalty = self.decoding.length_penalty
        if self.length_penalty is None:
            self.length_penalty = GenerationConfig.from_pretrained(self.teacher).length_penalty or 1.0
        encoder_layers, decoder_layers = args.student_layers
        self.sizes = StudentSizes.of(
            teacher_config,
            args.student_preset,
            d_model=args.student_d_model,
            encoder_layers=encoder_layers,
            decoder_layers=decoder_layers,
            heads=args.student_heads,
            ffn_dim=args.student_ffn_dim,
        )
        self.student_config = student_config(teacher_config, self.sizes, args.student_dropout)
        if args.init == "copy":
            check_copy(self.student_config, teacher_config)
        self.training_args = self.check_recipe()
        self.corpus_inputs = corpus_inputs(data_args)
        self.monolingual = file_stamps(args.monolingual)

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

    def check_recipe(self):
        """The recipe's options, parsed now rather than after the teacher's translations; its training arguments."""
        return parse_args(self.recipe_argv("student", self.path("distilled", "train.jsonl")), self.prog)[3]

    def steps(self) -> list[Step]:
        args = self.args
        languages = dict(zip(("--source_lang", "--target_lang"), self.languages))
        corpus = {**self.corpus_inputs, **languages, "--columns": self.data_args.columns}
        corpus.update(
            {f"--{name}": getattr(self.data_args, name) for name in CORPUS_OPTIONS if name.startswith("clean")}
        )
        corpus["--max_train_samples"] = self.data_args.max_train_samples
        teacher = {"--teacher": teacher_stamps(self.teacher), "--monolingual": self.monolingual}
        for name, value in output_settings(None, self.engine, self.decoding).items():
            teacher.update({f"--{k}": v for k, v in value.items()} if name == "generation" else {f"--{name}": value})
        teacher.pop("--model")
        teacher["--shard_rows"] = args.shard_rows
        distilled = {
            name: getattr(args, name[2:]) for name in ("--drop_worst", "--max_length_ratio", "--mix_references")
        }
        if args.selection_metric != "chrf":  # (absent otherwise, as from the records of earlier releases)
            distilled["--selection_metric"] = args.selection_metric
        sizes = self.sizes
        student = {
            "--student_preset": args.student_preset,
            "--student_layers": f"{sizes.encoder_layers},{sizes.decoder_layers}",
            "--student_d_model": sizes.d_model,
            "--student_ffn_dim": sizes.ffn_dim,
            "--student_heads": sizes.heads,
            "--student_dropout": self.student_config.dropout,
            "--init": args.init,
        }
        if args.init == "copy":
            student["--teacher"] = teacher["--teacher"]
        training = option_values(self.recipe)
        steps = [
            Step("corpus", corpus, self.write_corpus),
            Step("teacher-translations", teacher, self.translate, resumes=True, kept=self.translated),
            Step("distilled", distilled, self.distill),
            Step("student-init", student, self.build_student),
            self.training_step("student", training, self.path("distilled", "train.jsonl")),
        ]
        if args.baseline:
            steps.append(self.training_step("baseline", training, self.path("corpus", "train.jsonl")))
        steps.append(Step("vocabulary-map", {}, self.write_vocabulary_map, outputs=(f"student/{VMAP_NAME}",)))
        steps.append(Step("student-ctranslate2-int8", {}, lambda: self.export_int8("student")))
        steps.append(
            Step("teacher-ctranslate2-int8", {"--teacher": teacher["--teacher"]}, lambda: self.export_int8("teacher"))
        )
        if args.export:
            steps.append(Step("student-onnx", {"--export": args.export}, self.export_browser))
        report = {"--baseline": args.baseline, "--export": args.export}
        steps.append(Step("report", report, self.report, outputs=("report.json", "report.md"), resumes=True))
        return steps

    # ------------------------------------------------------------------------------------------------ the steps

    def write_corpus(self) -> dict:
        with writes_folder(self.path("corpus")) as folder:
            return write_corpus(self.data_args, folder)

    def translate(self) -> dict:
        with RaySession(self.args.address, self.args.verbose) as session:
            summary = translate_corpus(
                [str(self.path("corpus", SOURCES)), *self.monolingual],
                str(self.path("teacher-translations")),
                str(self.teacher),
                self.engine,
                self.decoding,
                column="text",
                num_workers=self.args.num_workers,
                shard_rows=self.args.shard_rows,
                connect=session.connect,
            )
        print(f"{self.prog}: teacher-translations: {summary.line()}", file=sys.stderr)
        return dict(**dataclasses.asdict(summary), sentences_per_second=round(summary.rate, 2))

    def translated(self) -> bool:
        """Whether an earlier run left complete shards of the teacher's translations."""
        return any(self.path("teacher-translations").glob("*.parquet"))

    def distill(self) -> dict:
        shards = sorted(self.path("teacher-translations").glob("*.parquet"))
        references = self.path("corpus", "train.jsonl") if self.args.mix_references else None
        with writes_folder(self.path("distilled")) as folder:
            return distill_pairs(
                shards,
                folder,
                self.languages,
                self.length_penalty,
                self.args.selection_metric,
                self.args.max_length_ratio,
                self.args.drop_worst,
                references,
            )

    def build_student(self) -> dict:
        set_seed(self.training_args.seed)
        teacher = None
        if self.args.init == "copy":
            teacher = load_translation_model(
                str(self.teacher),
                "--teacher",
                model_class=VanillaTransformerForConditionalGeneration,
                dtype=torch.float32,
            )
        student, copied = build_student(self.student_config, teacher)
        with writes_folder(self.path("student-init")) as folder:
            student.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
        return dict(
            sizes=dataclasses.asdict(self.sizes),
            init=self.args.init,
            copied_layers=copied,
            parameters=sum(p.numel() for p in student.parameters()),
        )

    def train(self, name: str, train_file: Path) -> dict:
        folder, argv = self.path(name), self.recipe_argv(name, train_file)
        if name == "baseline":  # as many steps as the student trained
            argv += ["--max_steps", str(Steps(self.output_dir).read("student")["result"]["steps"])]
        if self.resumes(name):
            argv += ["--resume_from_checkpoint", "last"]
        level = logging.getLogger().level
        try:
            status = run_recipe(translation.train, argv, f"{self.prog} ({name})", ending=False)
        finally:  # the recipe logs at INFO, as its own command; the steps after it keep this command's level
            logging.getLogger().setLevel(level)
        if status:  # Ctrl-C or SIGTERM: the recipe stopped after a step, with its checkpoint ([`stopped`] says so)
            raise Stopped(name, status)
        if not self.main_process:  # the first process writes the run report and records the step
            return {}
        report = read_run_report(folder)
        if not report:
            raise InputError(
                f"{folder}: the training ended without saving its model (an earlier run was stopped after its last "
                "checkpoint): remove the folder to train again."
            )
        return dict(steps=report["training"]["steps"], epochs=report["training"]["epochs"], test=report["test"])

    def resumes(self, name: str) -> bool:
        """Whether the training of `name` resumes from a checkpoint of an interrupted run; refused where that run left
        files but no complete checkpoint."""
        folder = self.path(name)
        if not (folder.is_dir() and any(folder.iterdir())):
            return False
        problem = "none was saved"
        for checkpoint in reversed(checkpoint_folders(folder)):
            try:
                verify_checkpoint(checkpoint)
                return True
            except InputError as error:
                problem = str(error)
        raise InputError(
            f"{folder}: an interrupted training left no complete checkpoint to resume from ({problem}): remove the "
            "folder to train from the start."
        )

    def stopped(self, name: str) -> str:
        """How the same command goes on after Ctrl-C or SIGTERM stopped the training of `name`, in one sentence."""
        try:
            if not self.resumes(name):
                return f"stopped before the {name} step saved anything: the same command trains it from the start."
        except InputError:  # a second signal while its checkpoint was written
            return (
                f"stopped before the {name} step saved a complete checkpoint: remove {self.path(name)} and run the "
                "same command to train it from the start."
            )
        checkpoint = last_complete_checkpoint(self.path(name))
        return f"stopped; the same command continues the {name} step from {checkpoint}."

    def training_step(self, name: str, settings: dict, train_file: Path) -> Step:
        return Step(
            name, settings, lambda: self.train(name, train_file), resumes=True, check=lambda: self.resumes(name)
        )

    def write_vocabulary_map(self) -> dict:
        """The student's vocabulary map, from the pairs it was trained on (Firefox Translations makes its students'
        shortlists from the distilled corpus too)."""
        lines = self.path("distilled", "train.jsonl").read_text(encoding="utf-8").splitlines()
        pairs = [tuple(json.loads(line)["translation"][lang] for lang in self.languages) for line in lines]
        return write_vocabulary_map(self.path("student", VMAP_NAME), pairs, self.tokenizer)

    def export_int8(self, name: str) -> dict:
        """The CTranslate2 int8 folder of the student (with its vocabulary map) or the teacher (with the student's, so
        that the report compares them on the same decoding)."""
        from ..interop.ctranslate2 import export_ctranslate2

        model = self.teacher if name == "teacher" else self.path(name)
        try:
            folder = export_ctranslate2(model, self.path(f"{name}-ctranslate2-int8"), quantization="int8")
        except ValueError as error:  # a setting CTranslate2 cannot represent, named by the exporter
            raise InputError(str(error)) from None
        if name == "teacher":
            shutil.copyfile(self.path("student", VMAP_NAME), folder / VMAP_NAME)
        return dict(size_mb=round((folder / "model.bin").stat().st_size / 1e6, 1))

    def export_browser(self) -> dict:
        """The ONNX folder, after the checks of `verify-export` (which exports on its own): the folder last, so that
        a step that fails leaves none."""
        from ..interop.onnx import export_onnx

        result = {}
        try:
            rows = parity_table(
                self.path("student"),
                self.path("corpus", "test.jsonl"),
                *self.languages,
                limit=self.data_args.max_test_samples,
                engines=self.args.export,
                threads=self.report_threads(),
            )
            result = dict(rows=rows, missed=misses(rows))
        except InputError as error:  # a student whose outputs cannot tell (all the same): the report says so
            result = dict(rows=[], missed=[], not_verified=str(error))
        try:
            export_onnx(self.path("student"), self.path("student-onnx"), quantize=True)
        except ValueError as error:
            raise InputError(str(error)) from None
        if result["missed"] or "not_verified" in result:
            problem = result.get("not_verified") or f"{', '.join(result['missed'])} miss their bar"
            print(f"{self.prog}: student-onnx: {problem}", file=sys.stderr)
        return result

    def report_threads(self) -> int:
        return self.args.report_threads or default_threads()

    def report(self) -> dict:
        records = Steps(self.output_dir)
        names = ("student-init", "student", "distilled", "vocabulary-map")
        result = {name: (records.read(name) or {}).get("result") for name in names}
        int8 = "CTranslate2 int8"
        models = {
            "teacher": {"PyTorch float32": self.teacher, int8: self.path("teacher-ctranslate2-int8")},
            "student": {"PyTorch float32": self.path("student"), int8: self.path("student-ctranslate2-int8")},
        }
        if self.args.baseline:
            models["baseline"] = {"PyTorch float32": self.path("baseline")}
        evaluation = evaluate_models(
            models, self.path("corpus", "test.jsonl"), self.languages, self.report_threads(),
            self.path("student", VMAP_NAME), self.data_args.max_test_samples,
        )  # fmt: skip
        report = dict(
            teacher=str(self.teacher),
            student=dict(**result["student-init"], training=result["student"]),
            corpus=result["distilled"],
            vocabulary_map=result["vocabulary-map"],
            evaluation=evaluation,
            gap=gaps(evaluation["rows"]),
            distillation_gain=distillation_gain(evaluation["rows"]),
            exports=dict(formats=self.args.export, **records.read("student-onnx")["result"])
            if self.args.export
            else {},
            seconds=records.seconds(self.steps()),
        )
        write_model_card(self.path("student"), report, f"{self.output_dir.name}-student", self.command)
        for name, text in (("report.md", format_report(report)), ("report.json", json.dumps(report, indent=1))):
            write_whole(self.path(name), text + ("\n" if name.endswith("json") else ""))
        return dict(report=str(self.path("report.json")))


def main(argv: list[str], prog: str = "hf-vanilla-transformer distill") -> int:
    args, data_args, recipe = parse(argv, prog)
    import_extra("ray", "ray", "distill (the teacher's translations)")
    import_extra("ctranslate2", "export", "distill (the CTranslate2 int8 export)")
    for module in ("onnx", "onnxscript", "onnxruntime") if args.export else ():
        import_extra(module, "export", f"--export {','.join(args.export)}")
    run = Distillation(args, data_args, recipe, prog, shlex.join(["hf-vanilla-transformer", "distill", *argv]))
    steps, records = run.steps(), Steps(run.output_dir)
    records.check(steps)
    try:
        run_steps(run, steps, records)
    except Stopped as stop:
        if run.main_process:
            print(f"{prog}: {run.stopped(stop.step)}", file=sys.stderr)
        return stop.status
    except KeyboardInterrupt:  # outside training (the teacher's translations, the report): nothing half-kept
        if run.main_process:
            print(f"{prog}: interrupted; the same command continues where it stopped.", file=sys.stderr)
        return 130
    if run.main_process:
        print(run.path("report.md").read_text(encoding="utf-8"))
    return 0


def run_steps(run: Distillation, steps: list[Step], records: Steps) -> None:
    """The steps in order; under accelerate launch, the other processes wait for the first's and take part in the
    training steps."""
    last_trained = max(i for i, step in enumerate(steps) if step.name in TRAINED)
    for i, step in enumerate(steps):
        if run.main_process:
            records.run(step)
        elif i > last_trained:
            return
        elif step.name in TRAINED:
            records.wait(steps[i - 1])
            if not (records.read(step.name) or {}).get("complete"):
                step.run()
        else:
            records.wait(step)
