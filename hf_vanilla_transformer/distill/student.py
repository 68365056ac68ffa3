"""The student of `hf-vanilla-transformer distill`: its sizes (a preset, then the sizes given), its configuration
(the teacher's, with those sizes: same architecture, vocabulary and positions, so that it keeps the teacher's
tokenizer), and its first weights: copied from the teacher's layers, or random.

`--init copy` is the shrink-and-fine-tune start of DistilBART (Shleifer and Rush, 2020): the embeddings and the output
projection, and from each stack evenly chosen layers, the first and the last among them (one decoder layer: the
first). It needs the teacher's widths; the depth may only shrink.
"""

import dataclasses
import json
import logging
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import set_seed

from ..data.folders import load_translation_model, writes_folder
from ..data.vocabulary_map import VMAP_NAME, write_vocabulary_map
from ..errors import InputError
from ..interop.parity import misses, parity_table
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..recipes import translation
from ..recipes.common import expand_sizes, model_config_for, run_recipe
from ..training.checkpoints import checkpoint_folders, last_complete_checkpoint, verify_checkpoint
from ..training.report import read_run_report
from .options import OPTIONS, PRESETS


# The configuration's fields that the student's options set (through the recipe's options they stand for), for
# messages that name what the user typed.
CONFIG_FIELDS = {"attention_heads": ("encoder_attention_heads", "decoder_attention_heads")}
CONFIG_FIELDS["ffn_dim"] = ("encoder_ffn_dim", "decoder_ffn_dim")
NAMES = {field: f"--{o.name}" for o in OPTIONS for name in o.stands_for for field in CONFIG_FIELDS.get(name, (name,))}


@dataclass(frozen=True)
class StudentSizes:
    d_model: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    ffn_dim: int

    @classmethod
    def of(cls, teacher: VanillaTransformerConfig, preset: str, **given) -> "StudentSizes":
        """The preset's sizes with those `given` (not None) on top; what neither sets is the teacher's."""
        sizes = dict(
            d_model=teacher.d_model,
            encoder_layers=teacher.encoder_layers,
            decoder_layers=teacher.decoder_layers,
            heads=teacher.encoder_attention_heads,
            ffn_dim=teacher.encoder_ffn_dim,
        )
        sizes.update(PRESETS[preset])
        if preset == "shallow":  # never deeper than the teacher, whose layers it copies
            sizes["decoder_layers"] = min(sizes["decoder_layers"], teacher.decoder_layers)
        sizes.update({name: value for name, value in given.items() if value is not None})
        return cls(**sizes)


def student_config(teacher: VanillaTransformerConfig, sizes: StudentSizes, dropout: float | None):
    """The teacher's configuration with the student's sizes (and `dropout` when given)."""
    fields = teacher.to_dict()
    for name in ("architectures", "auto_map", "transformers_version", "model_type", "custom_pipelines"):
        fields.pop(name, None)
    layers = (sizes.encoder_layers, sizes.decoder_layers)
    fields.update(expand_sizes(sizes.d_model, layers, sizes.heads, sizes.ffn_dim))
    if dropout is not None:
        fields["dropout"] = dropout
    return model_config_for("vanilla", NAMES, **fields)


def layers_to_copy(student_layers: int, teacher_layers: int) -> list[int]:
    """Evenly spaced teacher layers for a stack of `student_layers`, the first and the last among them."""
    if student_layers == 1:
        return [0]
    return [round(i * (teacher_layers - 1) / (student_layers - 1)) for i in range(student_layers)]


def check_copy(student: VanillaTransformerConfig, teacher: VanillaTransformerConfig) -> None:
    """Refuse, naming the option, a student that the teacher's layers cannot be copied into."""
    widths = [
        ("--student_d_model", student.d_model, teacher.d_model),
        ("--student_ffn_dim", student.encoder_ffn_dim, teacher.encoder_ffn_dim),
        ("--student_heads", student.encoder_attention_heads, teacher.encoder_attention_heads),
    ]
    for option, own, teachers in widths:
        if own != teachers:
            raise InputError(
                f"--init copy: the student's {option[10:]} {own} is not the teacher's {teachers}; layers copy only at "
                f"the teacher's widths: give {option} {teachers}, or --init random."
            )
    for stack in ("encoder", "decoder"):
        own, teachers = getattr(student, f"{stack}_layers"), getattr(teacher, f"{stack}_layers")
        if own > teachers:
            raise InputError(
                f"--init copy: the student's {own} {stack} layers are more than the teacher's {teachers}: "
                "--student_layers at most the teacher's, or --init random."
            )


def build_student(config, teacher=None) -> tuple[VanillaTransformerForConditionalGeneration, dict]:
    """The student, with the teacher's layers copied where `teacher` is given (`check_copy` first), and which teacher
    layer each of its layers starts from."""
    student = VanillaTransformerForConditionalGeneration(config)
    if teacher is None:
        return student, {}
    check_copy(config, teacher.config)
    picks = {
        stack: layers_to_copy(getattr(config, f"{stack}_layers"), getattr(teacher.config, f"{stack}_layers"))
        for stack in ("encoder", "decoder")
    }
    teachers = teacher.state_dict()

    def source(name: str) -> str:
        return re.sub(
            r"^model\.(encoder|decoder)\.layers\.(\d+)\.",
            lambda m: f"model.{m[1]}.layers.{picks[m[1]][int(m[2])]}.",
            name,
        )

    student.load_state_dict({name: teachers[source(name)] for name in student.state_dict()})
    return student, picks


# ------------------------------------------------------------------------------------------------------- the steps


class Stopped(Exception):
    """A training step that Ctrl-C or SIGTERM stopped, with its exit status."""

    def __init__(self, step: str, status: int):
        super().__init__(step, status)
        self.step, self.status = step, status


def student_init_step(run) -> dict:
    """The student's first weights and its tokenizer (the teacher's), in `student-init`."""
    set_seed(run.training_args.seed)
    teacher = None
    if run.args.init == "copy":
        teacher = load_translation_model(
            str(run.teacher), "--teacher", model_class=VanillaTransformerForConditionalGeneration, dtype=torch.float32
        )
    student, copied = build_student(run.student_config, teacher)
    with writes_folder(run.path("student-init")) as folder:
        student.save_pretrained(folder)
        run.tokenizer.save_pretrained(folder)
    return dict(
        sizes=dataclasses.asdict(run.sizes),
        init=run.args.init,
        copied_layers=copied,
        parameters=sum(p.numel() for p in student.parameters()),
    )


def train_step(run, name: str, train_file: Path, steps: int | None = None) -> dict:
    """The translation recipe's training of `name` (`student`, `baseline`) on `train_file`, for `steps` where given;
    resumed from the last checkpoint of an interrupted run."""
    folder, argv = run.path(name), run.recipe_argv(name, train_file)
    if steps is not None:
        argv += ["--max_steps", str(steps)]
    if resumes(run, name):
        argv += ["--resume_from_checkpoint", "last"]
    level = logging.getLogger().level
    try:
        status = run_recipe(translation.train, argv, f"{run.prog} ({name})", ending=False)
    finally:  # the recipe logs at INFO, as its own command; the steps after it keep this command's level
        logging.getLogger().setLevel(level)
    if status:  # Ctrl-C or SIGTERM: the recipe stopped after a step, with its checkpoint (`stopped` says so)
        raise Stopped(name, status)
    if not run.main_process:  # the first process writes the run report and records the step
        return {}
    report = read_run_report(folder)
    if not report:
        raise InputError(
            f"{folder}: the training ended without saving its model (an earlier run was stopped after its last "
            "checkpoint): remove the folder to train again."
        )
    return dict(steps=report["training"]["steps"], epochs=report["training"]["epochs"], test=report["test"])


def resumes(run, name: str) -> bool:
    """Whether the training of `name` resumes from a checkpoint of an interrupted run; refused where that run left
    files but no complete checkpoint."""
    folder = run.path(name)
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


def stopped(run, name: str) -> str:
    """How the same command goes on after Ctrl-C or SIGTERM stopped the training of `name`, in one sentence."""
    try:
        if not resumes(run, name):
            return f"stopped before the {name} step saved anything: the same command trains it from the start."
    except InputError:  # a second signal while its checkpoint was written
        return (
            f"stopped before the {name} step saved a complete checkpoint: remove {run.path(name)} and run the same "
            "command to train it from the start."
        )
    return f"stopped; the same command continues the {name} step from {last_complete_checkpoint(run.path(name))}."


def vocabulary_map_step(run) -> dict:
    """The student's vocabulary map, from the pairs it was trained on (Firefox Translations makes its students'
    shortlists from the distilled corpus too)."""
    lines = run.path("distilled", "train.jsonl").read_text(encoding="utf-8").splitlines()
    pairs = [tuple(json.loads(line)["translation"][lang] for lang in run.languages) for line in lines]
    return write_vocabulary_map(run.path("student", VMAP_NAME), pairs, run.tokenizer)


def export_int8_step(run, name: str) -> dict:
    """The CTranslate2 int8 folder of the student (with its vocabulary map) or the teacher (with the student's, so
    that the report compares them on the same decoding)."""
    from ..interop.ctranslate2 import export_ctranslate2  # the export extra's

    model = run.teacher if name == "teacher" else run.path(name)
    try:
        folder = export_ctranslate2(model, run.path(f"{name}-ctranslate2-int8"), quantization="int8")
    except ValueError as error:  # a setting CTranslate2 cannot represent, named by the exporter
        raise InputError(str(error)) from None
    if name == "teacher":
        shutil.copyfile(run.path("student", VMAP_NAME), folder / VMAP_NAME)
    return dict(size_mb=round((folder / "model.bin").stat().st_size / 1e6, 1))


def export_browser_step(run) -> dict:
    """The ONNX folder, after the checks of `verify-export` (which exports on its own): the folder last, so that a
    step that fails leaves none."""
    from ..interop.onnx import export_onnx  # the export extra's

    result = {}
    try:
        rows = parity_table(
            run.path("student"),
            run.path("corpus", "test.jsonl"),
            *run.languages,
            limit=run.data_args.max_test_samples,
            engines=run.args.export,
            threads=run.report_threads,
        )
        result = dict(rows=rows, missed=misses(rows))
    except InputError as error:  # a student whose outputs cannot tell (all the same): the report says so
        result = dict(rows=[], missed=[], not_verified=str(error))
    try:
        export_onnx(run.path("student"), run.path("student-onnx"), quantize=True)
    except ValueError as error:
        raise InputError(str(error)) from None
    if result["missed"] or "not_verified" in result:
        problem = result.get("not_verified") or f"{', '.join(result['missed'])} miss their bar"
        print(f"{run.prog}: student-onnx: {problem}", file=sys.stderr)
    return result
