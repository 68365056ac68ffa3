"""`hf-vanilla-transformer distill`: sequence-level knowledge distillation (Kim and Rush, 2016), from a trained teacher
to a small student shipped as CTranslate2 int8, with a report that measures one against the other.

    hf-vanilla-transformer distill --teacher outputs/demo-de-en --output_dir outputs/distill

Steps, each writing its result into --output_dir (records in steps/, see `records`), each a function beside the data
it makes, taking the run (`run.Run`):

    corpus                    the corpus read and cleaned as the translation recipe does, written as JSON Lines
    teacher-translations      the teacher's n best of every training source (and --monolingual line), on Ray Data
                              through translate-corpus's engine: resumable shards
    distilled                 per line the hypothesis closest to the reference (--selection_metric); filtered
    student-init              the student: the teacher's configuration at the student's sizes, layers copied or random
    student                   trained by the translation recipe on the distilled pairs (resumes from its checkpoints)
    baseline                  (--baseline) the same student trained on the references for as many steps
    vocabulary-map            student/vmap.txt, the lexical shortlist of `--use_vmap`, from the distilled pairs
    student-ctranslate2-int8, teacher-ctranslate2-int8, student-onnx (--export)
    report                    report.json, report.md and the student's model card

Options (`options`) other than distill's own are the translation recipe's (`hf-vanilla-transformer train translation
--help`): the corpus (--train_file, --dataset_name, --source_lang, ...; default: the bundled corpus) and the training
(--max_steps, --max_tokens, --torch_compile, ...). docs/distillation.md describes the steps and the choices.
"""

import shlex
import sys

from ..data.training_corpus import CORPUS_OPTIONS
from ..data.vocabulary_map import VMAP_NAME
from ..errors import import_extra
from ..translate.translator import output_settings
from .corpus import corpus_step, distilled_step, teacher_translations_step, translated
from .options import parse, recorded
from .records import Step, Steps, option_values
from .report import report_step
from .run import Run, teacher_stamps
from .student import (
    Stopped,
    export_browser_step,
    export_int8_step,
    resumes,
    stopped,
    student_init_step,
    train_step,
    vocabulary_map_step,
)


TRAINED = ("student", "baseline")  # the steps every process of `accelerate launch` takes part in


def steps(run: Run) -> list[Step]:
    """The steps of `run`, each with the settings its record keeps (a rerun with others is refused by name)."""
    args, data = run.args, run.data_args
    corpus = {**run.corpus_inputs, "--source_lang": run.languages[0], "--target_lang": run.languages[1]}
    corpus.update({f"--{name}": getattr(data, name) for name in CORPUS_OPTIONS if name.startswith("clean")})
    corpus.update({"--columns": data.columns, "--max_train_samples": data.max_train_samples})
    teacher = {"--teacher": teacher_stamps(run.teacher), "--monolingual": run.monolingual}
    for name, value in output_settings(None, run.engine, run.decoding).items():
        teacher.update({f"--{k}": v for k, v in value.items()} if name == "generation" else {f"--{name}": value})
    teacher.pop("--model")
    teacher.update(recorded(args, "teacher-translations"))
    distilled = recorded(args, "distilled")
    if args.selection_metric == "chrf":  # (absent, as from the records of earlier releases)
        distilled.pop("--selection_metric")
    sizes = run.sizes
    student = {**recorded(args, "student-init"), "--student_layers": f"{sizes.encoder_layers},{sizes.decoder_layers}"}
    student.update({f"--student_{name}": getattr(sizes, name) for name in ("d_model", "ffn_dim", "heads")})
    student["--student_dropout"] = run.student_config.dropout
    if args.init == "copy":
        student["--teacher"] = teacher["--teacher"]
    training = option_values(run.recipe)

    def trained(name, train_file, length=None):
        return Step(
            name,
            training,
            lambda: train_step(run, name, train_file, length and length()),
            resumes=True,
            check=lambda: resumes(run, name),
        )

    made = [
        Step("corpus", corpus, lambda: corpus_step(run)),
        Step(
            "teacher-translations",
            teacher,
            lambda: teacher_translations_step(run),
            resumes=True,
            kept=lambda: translated(run),
        ),
        Step("distilled", distilled, lambda: distilled_step(run)),
        Step("student-init", student, lambda: student_init_step(run)),
        trained("student", run.path("distilled", "train.jsonl")),
    ]
    if args.baseline:  # as many steps as the student trained
        student_steps = lambda: Steps(run.output_dir).read("student")["result"]["steps"]  # noqa: E731
        made.append(trained("baseline", run.path("corpus", "train.jsonl"), student_steps))
    made.append(Step("vocabulary-map", {}, lambda: vocabulary_map_step(run), outputs=(f"student/{VMAP_NAME}",)))
    made.append(Step("student-ctranslate2-int8", {}, lambda: export_int8_step(run, "student")))
    made.append(
        Step("teacher-ctranslate2-int8", {"--teacher": teacher["--teacher"]}, lambda: export_int8_step(run, "teacher"))
    )
    if args.export:
        made.append(Step("student-onnx", {"--export": args.export}, lambda: export_browser_step(run)))
    report = recorded(args, "report")
    made.append(
        Step("report", report, lambda: report_step(run, made), outputs=("report.json", "report.md"), resumes=True)
    )
    return made


def main(argv: list[str], prog: str = "hf-vanilla-transformer distill") -> int:
    args, data_args, recipe = parse(argv, prog)
    import_extra("ray", "ray", "distill (the teacher's translations)")
    import_extra("ctranslate2", "export", "distill (the CTranslate2 int8 export)")
    for module in ("onnx", "onnxscript", "onnxruntime") if args.export else ():
        import_extra(module, "export", f"--export {','.join(args.export)}")
    run = Run.of(args, data_args, recipe, prog, shlex.join(["hf-vanilla-transformer", "distill", *argv]))
    made, records = steps(run), Steps(run.output_dir)
    records.check(made)
    try:
        run_steps(run, made, records)
    except Stopped as stop:
        if run.main_process:
            print(f"{prog}: {stopped(run, stop.step)}", file=sys.stderr)
        return stop.status
    except KeyboardInterrupt:  # outside training (the teacher's translations, the report): nothing half-kept
        if run.main_process:
            print(f"{prog}: interrupted; the same command continues where it stopped.", file=sys.stderr)
        return 130
    if run.main_process:
        print(run.path("report.md").read_text(encoding="utf-8"))
    return 0


def run_steps(run: Run, made: list[Step], records: Steps) -> None:
    """The steps in order; under accelerate launch, the other processes wait for the first's and take part in the
    training steps."""
    last_trained = max(i for i, step in enumerate(made) if step.name in TRAINED)
    for i, step in enumerate(made):
        if run.main_process:
            records.run(step)
        elif i > last_trained:
            return
        elif step.name in TRAINED:
            records.wait(made[i - 1])
            if not (records.read(step.name) or {}).get("complete"):
                step.run()
        else:
            records.wait(step)
