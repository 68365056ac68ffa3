"""The report of `hf-vanilla-transformer distill` (`report.json`, `report.md`) and the student's model card: teacher
and student (and the baseline), each as a PyTorch model and as CTranslate2 int8, decoding greedily and with beam 4 on
the test split: BLEU, chrF, sentences/s and tokens/s on this machine, size on disk, parameters; the gap to the
teacher; the corpus counts and each step's wall time.

Each engine loads its model once and translates the test sources with each decoding, after a few lines of warm-up,
through the engine of `translate` (one line, one sentence); speeds are of this process alone, on `threads` threads,
the fastest of `TIMED_PASSES` passes that go round every engine in turn.
"""

import dataclasses
import json
import math
import time
from pathlib import Path

from safetensors import safe_open

from ..data.folders import write_whole
from ..data.vocabulary_map import VMAP_NAME
from ..hub.model_card import make_model_card
from ..interop.parity import format_table
from ..training.metrics import corpus_scores
from ..training.report import hardware, read_run_report
from ..translate.options import DecodeOptions, EngineOptions
from ..translate.translator import load_translator
from .records import Steps


ENGINES = {
    "PyTorch float32": dict(backend="torch"),
    "CTranslate2 int8": dict(backend="ctranslate2", compute_type="int8"),
}
# (beams, use_vmap): each decoding also with the student's vocabulary map, which the teacher decodes with too.
DECODINGS = {"greedy": (1, False), "beam 4": (4, False), "greedy, vmap": (1, True), "beam 4, vmap": (4, True)}
WARM_UP_LINES = 8
# A speed is the fastest of these passes over the test split, taken in turns with the other engines: the one least
# slowed by other work on the machine (on a shared 2-core machine, two identical networks timed one after the other
# differed by a fifth in one pass each, and by a tenth in three passes each).
TIMED_PASSES = 3
REPORTED_STEPS = ("student-init", "student", "distilled", "vocabulary-map")  # whose results the report shows
HEADLINE = ("PyTorch float32", "beam 4")  # the teacher's row the speed-ups are measured against


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("model.bin"))


def parameters(folder: Path) -> int:
    """The parameters of a model folder's safetensors weights (a tied matrix counts once, as it is stored once)."""
    count = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as weights:
            count += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return count


def scored(results, seconds: float, sources: list[str], references: list[str]) -> dict:
    """A pass's scores and speeds."""
    best = [result.hypotheses[0] if result.hypotheses else None for result in results]
    scores = corpus_scores([h.text.strip() if h else "" for h in best], references)
    return dict(
        bleu=round(scores["bleu"], 2),
        chrf=round(scores["chrf"], 2),
        sentences_per_second=round(len(sources) / seconds, 2),
        tokens_per_second=round(sum(len(h.tokens) for h in best if h) / seconds, 1),
        seconds=round(seconds, 2),
    )


def evaluate_models(
    models: dict[str, dict[str, Path]], test_file: Path, languages, threads: int, vmap: Path, limit=None
) -> dict:
    """`models`: name -> {engine name: folder}. The report's rows and the machine they ran on. Every engine is loaded
    once, and the passes go round all of them in turn, so that a slow spell of the machine falls on each alike. The
    PyTorch engines decode with the vocabulary map `vmap` where a decoding uses it; CTranslate2 folders hold theirs."""
    source_lang, target_lang = languages
    pairs = [json.loads(line)["translation"] for line in test_file.read_text(encoding="utf-8").splitlines()]
    pairs = pairs[:limit] if limit else pairs
    sources, references = [p[source_lang] for p in pairs], [p[target_lang] for p in pairs]
    runs = []
    for model, folders in models.items():
        for engine_name, folder in folders.items():
            engine = EngineOptions(threads=threads, **ENGINES[engine_name])
            if engine.backend == "torch":
                engine = dataclasses.replace(engine, vmap=str(vmap))
            translator = load_translator(str(folder), engine)
            for decoding, (num_beams, use_vmap) in DECODINGS.items():
                options = DecodeOptions(
                    num_beams=num_beams, early_stopping=num_beams > 1 or None, split_sentences=False,
                    source_lang=source_lang, use_vmap=use_vmap,
                )  # fmt: skip
                translator.translate(sources[:WARM_UP_LINES], options, scores=False)
                runs.append(dict(model=model, engine=engine_name, decoding=decoding, run=(translator, options)))
    seconds, results = [math.inf] * len(runs), [None] * len(runs)
    for _ in range(TIMED_PASSES):
        for i, run in enumerate(runs):
            translator, options = run["run"]
            started = time.perf_counter()
            results[i] = translator.translate(sources, options, scores=False)
            seconds[i] = min(seconds[i], time.perf_counter() - started)
    rows = []
    for run, result, fastest in zip(runs, results, seconds):
        model, engine_name = run["model"], run["engine"]
        files = weight_files(models[model][engine_name])
        rows.append(
            dict(
                model=model,
                engine=engine_name,
                decoding=run["decoding"],
                **scored(result, fastest, sources, references),
                size_mb=round(sum(path.stat().st_size for path in files) / 1e6, 1),
                parameters=parameters(models[model]["PyTorch float32"]),
            )
        )
    return dict(test_sentences=len(sources), threads=threads, hardware=hardware(), rows=rows)


def row(rows: list[dict], model: str, engine: str, decoding: str) -> dict | None:
    return next((r for r in rows if (r["model"], r["engine"], r["decoding"]) == (model, engine, decoding)), None)


def gaps(rows: list[dict]) -> dict:
    """The student (and baseline) against the teacher, engine by engine and decoding by decoding: BLEU and chrF
    differences and speed ratios; and against the teacher's PyTorch beam 4 (`HEADLINE`)."""
    headline = row(rows, "teacher", *HEADLINE)
    found = {}
    for r in rows:
        if r["model"] == "teacher":
            continue
        teacher = row(rows, "teacher", r["engine"], r["decoding"])
        found[f"{r['model']}, {r['engine']}, {r['decoding']}"] = dict(
            bleu=round(r["bleu"] - teacher["bleu"], 2),
            chrf=round(r["chrf"] - teacher["chrf"], 2),
            speed=round(r["sentences_per_second"] / teacher["sentences_per_second"], 2),
            speed_vs_teacher_pytorch_beam_4=round(r["sentences_per_second"] / headline["sentences_per_second"], 2),
        )
    return found


def distillation_gain(rows: list[dict]) -> dict:
    """The student's BLEU less the baseline's (PyTorch), by decoding; {} without a baseline."""
    found = {}
    for decoding in DECODINGS:
        student, baseline = (row(rows, model, "PyTorch float32", decoding) for model in ("student", "baseline"))
        if baseline is not None:
            found[decoding] = round(student["bleu"] - baseline["bleu"], 2)
    return found


def format_report(report: dict) -> str:
    """report.md: the tables of `report.json`."""
    evaluation, student, vmap = report["evaluation"], report["student"], report["vocabulary_map"]
    sizes, init = student["sizes"], {"copy": "layers copied from the teacher", "random": "random initialisation"}
    lines = [
        "# Distillation report",
        "",
        f"Teacher `{report['teacher']}`; student: d_model {sizes['d_model']}, {sizes['encoder_layers']} encoder and "
        f"{sizes['decoder_layers']} decoder layers, {sizes['heads']} heads, feed-forward {sizes['ffn_dim']} "
        f"({init[student['init']]}), trained {student['training']['steps']} steps on "
        f"{report['corpus']['training_pairs']:,} pairs. Test split: {evaluation['test_sentences']} sentences, one "
        f"line one sentence; {evaluation['hardware']}; speeds the fastest of {TIMED_PASSES} passes. Beam 4 uses "
        "each model's own length penalty. vmap: each batch chooses among the target tokens that the student's "
        f"vocabulary map (student/vmap.txt: {vmap['best']} per source token, for {vmap['source_tokens']:,} source "
        f"tokens, and the {vmap['frequent']} most frequent) gives its source tokens (--use_vmap); the teacher "
        "decodes with the same map.",
        "",
    ]
    if report["distillation_gain"]:
        gain = ", ".join(f"{bleu:+.2f} BLEU {decoding}" for decoding, bleu in report["distillation_gain"].items())
        lines += [f"What distillation bought, against the same student trained on the references as long: {gain}.", ""]
    lines += [
        "| model | engine | decoding | BLEU | chrF | sentences/s | tokens/s | BLEU vs teacher | speed vs teacher, "
        "same engine and decoding | speed vs teacher PyTorch beam 4 | size on disk (MB) | parameters |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    found = report["gap"]
    for r in evaluation["rows"]:
        gap = found.get(f"{r['model']}, {r['engine']}, {r['decoding']}")
        vs = (
            (f"{gap['bleu']:+.2f}", f"{gap['speed']:.2f}x", f"{gap['speed_vs_teacher_pytorch_beam_4']:.2f}x")
            if gap
            else ("", "", "")
        )
        lines.append(
            f"| {r['model']} | {r['engine']} | {r['decoding']} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
            f"{r['sentences_per_second']:.1f} | {r['tokens_per_second']:.0f} | {' | '.join(vs)} | {r['size_mb']} | "
            f"{r['parameters']:,} |"
        )
    corpus = report["corpus"]
    dropped = ", ".join(f"{count:,} {rule.replace('_', ' ')}" for rule, count in corpus["dropped"].items())
    lines += [
        "",
        f"Distilled corpus: {corpus['translated']:,} lines translated by the teacher "
        f"({corpus['chosen_not_teachers_first']:,} kept another hypothesis than its first, by chrF against the "
        f"reference); dropped: {dropped}; kept {corpus['kept']:,}"
        + (f", plus {corpus['references_added']:,} reference pairs" if corpus["references_added"] else "")
        + ".",
    ]
    exports = report["exports"]
    if exports:
        formats = ", ".join(exports["formats"])
        if exports.get("not_verified"):
            lines += ["", f"Exports ({formats}, in student-onnx/): not verified: {exports['not_verified']}"]
        else:
            verdict = f"{', '.join(exports['missed'])} miss their bar" if exports["missed"] else "each meets its bar"
            lines += ["", f"Exports ({formats}, in student-onnx/), checked as verify-export checks: {verdict}.", ""]
            lines.append(format_table(exports["rows"]))
    lines += ["", "| step | wall time (s) |", "|---|---|"]
    lines += [f"| {name} | {seconds} |" for name, seconds in report["seconds"].items()]
    return "\n".join(lines) + "\n"


def write_model_card(student_dir: Path, report: dict, repo_id: str, command: str) -> None:
    """The student's README.md: the package's model card, with its teacher and the gap. Its data and command are the
    distillation's (`command`, as the user gave it), not those of the student's training inside it."""
    teacher_name = Path(report["teacher"]).name
    metrics = read_run_report(student_dir)
    corpus = read_run_report(report["teacher"]).get("dataset") or {}
    metrics["dataset"] = {
        **{key: corpus.get(key) for key in ("license", "attribution")},
        "name": f"its teacher's translations of {corpus.get('name') or 'its training corpus'}",
    }
    metrics["command"] = command
    copied = report["student"]["init"] == "copy"
    first = "its first weights copied from the teacher's embeddings and layers" if copied else "from random weights"
    origin = f"distilled from `{teacher_name}` ({first}), trained"
    card = str(make_model_card(student_dir, repo_id, metrics=metrics, origin=origin))
    teacher = row(report["evaluation"]["rows"], "teacher", *HEADLINE)
    student = row(report["evaluation"]["rows"], "student", *HEADLINE)
    int8 = row(report["evaluation"]["rows"], "student", "CTranslate2 int8", "greedy")
    mapped = row(report["evaluation"]["rows"], "student", "PyTorch float32", "beam 4, vmap")
    speed = teacher["sentences_per_second"]
    card = card.rstrip("\n") + (
        "\n\n## Distillation\n\nA student distilled from the teacher `"
        f"{teacher_name}` (sequence-level knowledge distillation: trained on the teacher's "
        "translations of its training corpus, `hf-vanilla-transformer distill`). On the test split, beam 4: "
        f"teacher BLEU {teacher['bleu']:.2f}, student {student['bleu']:.2f} "
        f"({student['bleu'] - teacher['bleu']:+.2f}), at "
        f"{student['sentences_per_second'] / speed:.1f}x the teacher's sentences/s; its CTranslate2 int8 export "
        f"decoding greedily: BLEU {int8['bleu']:.2f} at {int8['sentences_per_second'] / speed:.1f}x "
        f"({report['evaluation']['hardware']}).\n\nDecode it with its vocabulary map, `vmap.txt` (a lexical "
        "shortlist: `hf-vanilla-transformer translate --use_vmap`, or CTranslate2's `use_vmap=True` on its export): "
        f"beam 4, BLEU {mapped['bleu']:.2f} at {mapped['sentences_per_second'] / speed:.1f}x the teacher's "
        "sentences/s.\n"
    )
    write_whole(student_dir / "README.md", card)


def report_step(run, steps) -> dict:
    """report.json, report.md and the student's model card, from the records of `steps` and the models they made."""
    records = Steps(run.output_dir)
    result = {name: (records.read(name) or {}).get("result") for name in REPORTED_STEPS}
    int8 = "CTranslate2 int8"
    models = {
        "teacher": {"PyTorch float32": run.teacher, int8: run.path("teacher-ctranslate2-int8")},
        "student": {"PyTorch float32": run.path("student"), int8: run.path("student-ctranslate2-int8")},
    }
    if run.args.baseline:
        models["baseline"] = {"PyTorch float32": run.path("baseline")}
    test, vmap = run.path("corpus", "test.jsonl"), run.path("student", VMAP_NAME)
    evaluation = evaluate_models(models, test, run.languages, run.report_threads, vmap, run.data_args.max_test_samples)
    exports = dict(formats=run.args.export, **records.read("student-onnx")["result"]) if run.args.export else {}
    report = dict(
        teacher=str(run.teacher),
        student=dict(**result["student-init"], training=result["student"]),
        corpus=result["distilled"],
        vocabulary_map=result["vocabulary-map"],
        evaluation=evaluation,
        gap=gaps(evaluation["rows"]),
        distillation_gain=distillation_gain(evaluation["rows"]),
        exports=exports,
        seconds=records.seconds(steps),
    )
    write_model_card(run.path("student"), report, f"{run.output_dir.name}-student", run.command)
    for name, text in (("report.md", format_report(report)), ("report.json", json.dumps(report, indent=1))):
        write_whole(run.path(name), text + ("\n" if name.endswith("json") else ""))
    return dict(report=str(run.path("report.json")))
