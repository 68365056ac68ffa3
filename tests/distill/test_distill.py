"""`hf-vanilla-transformer distill`: the whole chain on a tiny teacher and a few hundred lines, from its corpus to a
shipped, measured student; a rerun that does nothing, completes an interrupted run (a kill during the teacher's
translations: every line once), or refuses, in one line, other options and half-written files, losing nothing; the
student's first weights; the choice of the teacher's hypotheses and the filters. One local Ray (2 CPUs, no dashboard)
serves the module's runs."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from hf_vanilla_transformer import VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.distill.run import teacher_length
from hf_vanilla_transformer.distill.student import StudentSizes, build_student, layers_to_copy, student_config
from hf_vanilla_transformer.errors import InputError
from tests.helpers import ROOT, free_port, short_pairs, tiny_config, tiny_translator_dir, write_jsonl


ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("ctranslate2")

HEADLINE = ("PyTorch float32", "beam 4")
# A run of seconds: a few steps of a tiny student, checkpoints on the way (resume), the report on 30 test sentences.
# One decoder layer, so that the student is smaller than this teacher of two.
TRAINING = [
    "--student_layers", "2,1", "--max_steps", "4", "--save_steps", "2", "--per_device_train_batch_size", "32",
    "--eval_strategy", "no", "--bf16", "False", "--use_cpu", "--report_threads", "1", "--threads", "1",
    "--device", "cpu", "--num_workers", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    with pytest.MonkeyPatch.context() as environment:  # the CTranslate2 conversions go to the test's cache
        environment.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path_factory.mktemp("cache")))
        context = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False)
        yield context.address_info["gcs_address"]
        ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    pairs = short_pairs(400)
    write_jsonl(folder / "train.jsonl", pairs[:300])
    write_jsonl(folder / "valid.jsonl", pairs[300:320])
    write_jsonl(folder / "test.jsonl", pairs[320:350])
    return folder


def distill_argv(output_dir, corpus: Path, *options) -> list[str]:
    """`hf-vanilla-transformer distill`'s arguments for the tiny teacher and the test corpus."""
    files = ["--train_file", corpus / "train.jsonl", "--validation_file", corpus / "valid.jsonl"]
    files += ["--test_file", corpus / "test.jsonl"]
    argv = ["distill", "--teacher", tiny_translator_dir(), "--output_dir", output_dir, *files, *TRAINING, *options]
    return [str(word) for word in argv]


def distill(output_dir, corpus: Path, *options) -> int:
    """`hf-vanilla-transformer distill` in this process."""
    return cli.main(distill_argv(output_dir, corpus, *options))


def stamps(folder: Path) -> dict[str, int]:
    """Every file under `folder` with its modification time."""
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


def refused(capsys, *expected: str) -> str:
    """The one line that ended the command, after any progress bar of the work before it."""
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if "distill: error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], lines
    assert all(text in errors[0] for text in expected), errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def finished(local_ray, corpus, tmp_path_factory) -> Path:
    output_dir = tmp_path_factory.mktemp("distill") / "run"
    assert distill(output_dir, corpus, "--baseline", "--shard_rows", "100") == 0
    return output_dir


def test_the_chain_ships_a_student_measured_against_its_teacher(finished, corpus, capsys):
    report = json.loads((finished / "report.json").read_text())
    rows = {(r["model"], r["engine"], r["decoding"]): r for r in report["evaluation"]["rows"]}
    engines, decodings = ("PyTorch float32", "CTranslate2 int8"), ("greedy", "beam 4", "greedy, vmap", "beam 4, vmap")
    expected = {(m, e, d) for m in ("teacher", "student") for e in engines for d in decodings}
    assert set(rows) == expected | {("baseline", "PyTorch float32", d) for d in decodings}
    for row in rows.values():
        assert row["sentences_per_second"] > 0 and row["tokens_per_second"] > 0 and row["size_mb"] > 0
        assert 0 <= row["bleu"] <= 100 and 0 <= row["chrf"] <= 100
    assert report["evaluation"]["test_sentences"] == 30 and report["evaluation"]["threads"] == 1
    student, teacher = rows[("student", *HEADLINE)], rows[("teacher", *HEADLINE)]
    assert student["parameters"] < teacher["parameters"]
    gap = report["gap"]["student, PyTorch float32, beam 4"]
    assert gap["bleu"] == pytest.approx(student["bleu"] - teacher["bleu"], abs=0.02)
    assert gap["speed"] == pytest.approx(student["sentences_per_second"] / teacher["sentences_per_second"], abs=0.01)
    assert set(report["distillation_gain"]) == set(decodings)
    assert list(report["seconds"])[:5] == ["corpus", "teacher-translations", "distilled", "student-init", "student"]
    assert "# Distillation report" in (finished / "report.md").read_text()

    # The corpus: every training line translated once, each kept or dropped by one rule, and those kept train.
    counts = report["corpus"]
    assert counts["translated"] == 300
    assert counts["kept"] + sum(counts["dropped"].values()) == 300
    dropped = counts["dropped"]
    assert dropped["score"] == int(0.05 * (300 - dropped["empty"] - dropped["length_ratio"] - dropped["duplicates"]))
    assert len((finished / "distilled" / "train.jsonl").read_text().splitlines()) == counts["kept"]
    sources = [json.loads(line)["text"] for line in (finished / "corpus" / "sources.jsonl").read_text().splitlines()]
    translated = [row["text"] for shard in (finished / "teacher-translations").glob("*.parquet")
                  for row in pq.read_table(shard).to_pylist()]  # fmt: skip
    assert sorted(translated) == sorted(sources)

    # The student: the teacher's width and encoder, one decoder layer; loadable by transformers and the engines.
    teacher = AutoModelForSeq2SeqLM.from_pretrained(tiny_translator_dir())
    student = AutoModelForSeq2SeqLM.from_pretrained(finished / "student")
    assert (student.config.d_model, student.config.encoder_layers) == (teacher.config.d_model, 2)
    assert student.config.decoder_layers == 1 and student.config.vocab_size == teacher.config.vocab_size
    assert report["student"]["copied_layers"] == {"encoder": [0, 1], "decoder": [0]}
    assert (finished / "student-ctranslate2-int8" / "model.bin").is_file()
    # Its vocabulary map, from the distilled pairs, goes with it and with the teacher's export.
    vmap = (finished / "student" / "vmap.txt").read_text()
    assert report["vocabulary_map"]["source_tokens"] == len(vmap.splitlines()) - 1
    for export in ("student-ctranslate2-int8", "teacher-ctranslate2-int8"):
        assert (finished / export / "vmap.txt").read_text() == vmap
    assert json.loads((finished / "student" / "metrics.json").read_text())["training"]["steps"] == 4
    assert json.loads((finished / "baseline" / "metrics.json").read_text())["training"]["steps"] == 4
    card = (finished / "student" / "README.md").read_text()
    assert "## Distillation" in card and tiny_translator_dir().name in card
    # Its origin, data and command are the distillation's, not those of the training inside it (nor its folders).
    assert f"distilled from `{tiny_translator_dir().name}` (its first weights copied from the teacher's" in card
    assert "trained from scratch" not in card and str(finished) not in card
    assert "hf-vanilla-transformer distill --teacher" in card and "'(student)'" not in card
    assert "Decode it with its vocabulary map, `vmap.txt`" in card


def test_a_rerun_of_a_finished_run_changes_nothing_and_prints_the_report(finished, corpus, capsys):
    before = stamps(finished)
    capsys.readouterr()
    assert distill(finished, corpus, "--baseline", "--shard_rows", "100") == 0
    out = capsys.readouterr().out
    assert "report: complete" in out and "# Distillation report" in out and "starting" not in out
    assert stamps(finished) == before


@pytest.mark.parametrize(
    "options, expected",
    [
        (["--num_beams", "5"], ("teacher-translations step was made with --num_beams 4", "this run gives 5")),
        (["--student_layers", "1,1"], ('student-init step was made with --student_layers "2,1"', '"1,1"')),
        (["--drop_worst", "0.1"], ("distilled step was made with --drop_worst 0.05", "0.1")),
        (["--learning_rate", "1e-3"], ("student step was made with --learning_rate (not given)", '"1e-3"')),
    ],
    ids=["teacher", "student-init", "distilled", "training"],
)
def test_a_rerun_with_other_options_is_refused_naming_the_option_and_both_values(
    finished, corpus, capsys, options, expected
):
    before = stamps(finished)
    capsys.readouterr()
    assert distill(finished, corpus, "--baseline", "--shard_rows", "100", *options) == 2
    refused(capsys, *expected)
    assert stamps(finished) == before


STEPS = ["corpus", "teacher-translations", "distilled", "student-init", "student", "baseline", "vocabulary-map"]
STEPS += ["student-ctranslate2-int8", "teacher-ctranslate2-int8", "report"]
OUTPUTS = {"vocabulary-map": ["student/vmap.txt"], "report": ["report.json", "report.md"]}  # else the step's name


def interrupted(finished: Path, run: Path, step: str) -> Path:
    """A copy of the finished run as a kill during `step` leaves it: `step` not recorded as complete, nothing after."""
    shutil.copytree(finished, run)
    record = json.loads((run / "steps" / f"{step}.json").read_text())
    (run / "steps" / f"{step}.json").write_text(json.dumps({**record, "complete": False}))
    for later in STEPS[STEPS.index(step) + 1 :]:
        (run / "steps" / f"{later}.json").unlink()
        for output in OUTPUTS.get(later, [later]):
            shutil.rmtree(run / output) if (run / output).is_dir() else (run / output).unlink(missing_ok=True)
    return run


def test_an_interrupted_steps_half_written_files_are_refused_and_nothing_finished_is_lost(
    finished, corpus, tmp_path, capsys
):
    # A folder written whole whose step did not record its end, and a training killed while writing its checkpoint.
    run = interrupted(finished, tmp_path / "distilled", "distilled")
    before = stamps(run)
    capsys.readouterr()
    assert distill(run, corpus, "--baseline", "--shard_rows", "100") == 2
    refused(capsys, f"{run / 'distilled'}: an interrupted run of the distilled step", "remove it")
    assert stamps(run) == before

    run = interrupted(finished, tmp_path / "student", "student")
    shutil.rmtree(run / "student")
    (run / "student" / "checkpoint-2").mkdir(parents=True)
    (run / "student" / "checkpoint-2" / "model.safetensors").write_bytes(b"")
    before = stamps(run)
    assert distill(run, corpus, "--baseline", "--shard_rows", "100") == 2
    refused(capsys, f"{run / 'student'}: an interrupted training left no complete checkpoint", "trainer_state.json")
    assert stamps(run) == before


def test_a_training_stopped_by_ctrl_c_ends_with_one_line_saying_how_the_same_command_goes_on(
    finished, corpus, tmp_path, capsys, monkeypatch
):
    from hf_vanilla_transformer.recipes import translation

    def stopped(argv, prog, stop):  # the recipe as Ctrl-C leaves it, its own line left to distill
        stop.signal = signal.SIGINT
        return 0

    def last_line(run: Path) -> str:
        capsys.readouterr()
        with monkeypatch.context() as stopping:
            stopping.setattr(translation, "train", stopped)
            assert distill(run, corpus, "--baseline", "--shard_rows", "100") == 130
        err = capsys.readouterr().err
        assert "--resume_from_checkpoint" not in err  # distill resumes by itself
        return err.strip().splitlines()[-1]

    with_checkpoints = interrupted(finished, tmp_path / "saved", "student")
    checkpoint = sorted((with_checkpoints / "student").glob("checkpoint-*"))[-1]
    assert last_line(with_checkpoints).endswith(
        f"distill: stopped; the same command continues the student step from {checkpoint}."
    )
    run = interrupted(finished, tmp_path / "run", "student")
    shutil.rmtree(run / "student")
    attempts = json.loads((run / "steps" / "student.json").read_text())["attempts"]
    assert last_line(run).endswith(
        "distill: stopped before the student step saved anything: the same command trains it from the start."
    )
    assert not json.loads((run / "steps" / "student.json").read_text())["complete"]
    assert distill(run, corpus, "--baseline", "--shard_rows", "100") == 0
    record = json.loads((run / "steps" / "student.json").read_text())
    assert record["complete"] and record["attempts"] == attempts + 2


def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(corpus, tmp_path, capsys):
    from hf_vanilla_transformer import VanillaTransformerForSequenceClassification

    classifier = tmp_path / "classifier"
    VanillaTransformerForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(classifier)
    french = write_jsonl(tmp_path / "fr.jsonl", [("Bonjour.", "Hello.")])  # keyed "de" and "en" by the helper
    Path(french).write_text(Path(french).read_text().replace('"de"', '"fr"'))
    tiny_translator_dir()
    capsys.readouterr()  # the models' saving
    cases = [
        (["--teacher", classifier], "holds a sequence classifier"),
        (["--teacher", tmp_path], "holds no model"),
        (["--student_d_model", "32"], "--init copy: the student's d_model 32 is not the teacher's 64"),
        (["--student_layers", "3,1"], "the student's 3 encoder layers are more than the teacher's 2"),
        (["--student_heads", "3"], "--student_heads must be a divisor of --student_d_model 64, got 3."),
        (["--d_model", "32"], "--d_model is not an option of distill: --student_d_model decides it"),
        (["--drop_worst", "1"], "--drop_worst must be a share in [0, 1)"),
        (["--export", "tflite"], "--export tflite: expected some of onnx, transformers.js"),
    ]
    for options, message in cases:
        output_dir = tmp_path / "out"
        argv = ["distill", "--teacher", tiny_translator_dir(), "--output_dir", output_dir, *options]
        assert cli.main([str(word) for word in argv]) == 2, options
        refused(capsys, message)
        assert not output_dir.exists()
    # A corpus without the languages' columns: refused by the corpus step, which leaves no result behind.
    output_dir = tmp_path / "out"
    argv = ["distill", "--teacher", tiny_translator_dir(), "--output_dir", output_dir, "--train_file", french]
    argv += ["--test_file", french]
    assert cli.main([str(word) for word in argv]) == 2
    refused(capsys, "language column(s) ['de'] not found")
    assert sorted(path.name for path in output_dir.iterdir()) == ["steps"]
    with pytest.raises(SystemExit) as exit_:  # the recipe's options are checked before any step
        cli.main([str(word) for word in [*argv, "--max_stepz", "3"]])
    assert exit_.value.code == 2
    refused(capsys, "unrecognized arguments: --max_stepz 3")
    with pytest.raises(SystemExit):  # distill's own option misspelt: named as distill's, not as a recipe's
        cli.main([str(word) for word in [*argv, "--student-layers", "2,1"]])
    refused(capsys, "unrecognized arguments: --student-layers 2,1; did you mean --student_layers?")


@pytest.mark.slow
def test_a_kill_during_the_teachers_translations_then_a_rerun_translates_every_line_once(
    local_ray, corpus, tmp_path, capsys
):
    """The killed run joins this module's Ray (--address), whose actors outlive their driver only as long as Ray
    takes to clean them up; the rerun completes the shards that the kill left missing or half-written."""
    monolingual = tmp_path / "mono.de"
    monolingual.write_text("".join(f"{de}\n" for de, _ in short_pairs(2000)[350:1500]))
    output_dir = tmp_path / "run"
    options = ["--monolingual", monolingual, "--shard_rows", "50", "--address", local_ray]
    process = subprocess.Popen(
        [sys.executable, "-m", "hf_vanilla_transformer", *distill_argv(output_dir, corpus, *options)],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    shards = output_dir / "teacher-translations"
    deadline = time.monotonic() + 300
    while process.poll() is None and len(list(shards.glob("mono-*.parquet"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = {path: path.stat().st_mtime_ns for path in shards.glob("*.parquet")}
    total = 300 // 50 + 1150 // 50
    assert 2 <= len(written) < total, "the kill came after the teacher's translations"
    assert not json.loads((output_dir / "steps" / "teacher-translations.json").read_text())["complete"]

    assert distill(output_dir, corpus, *options) == 0
    record = json.loads((output_dir / "steps" / "teacher-translations.json").read_text())
    assert record["complete"] and record["attempts"] == 2 and record["result"]["skipped"] >= len(written)
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in written.items())
    rows = [row for shard in shards.glob("*.parquet") for row in pq.read_table(shard).to_pylist()]
    sources = [row["text"] for row in rows if "reference" in row]
    assert sorted(row["row"] for row in rows if "row" in row) == list(range(300)) and len(sources) == 300
    assert sorted(row["text"] for row in rows if "row" not in row) == sorted(monolingual.read_text().splitlines())
    assert not list(shards.glob(".*"))
    report = json.loads((output_dir / "report.json").read_text())
    assert report["corpus"]["translated"] == 300 + 1150


@pytest.mark.slow
def test_a_ctranslate2_teacher_a_random_student_of_its_own_sizes_references_mixed_in_and_the_onnx_export(
    local_ray, corpus, tmp_path
):
    pytest.importorskip("onnxruntime")
    output_dir = tmp_path / "run"
    student = ["--init", "random", "--student_layers", "2,1", "--student_d_model", "32", "--student_ffn_dim", "64"]
    options = ["--backend", "ctranslate2", "--compute_type", "int8", *student, "--mix_references", "--export", "onnx"]
    assert distill(output_dir, corpus, *options) == 0
    report = json.loads((output_dir / "report.json").read_text())
    translations = json.loads((output_dir / "steps" / "teacher-translations.json").read_text())
    assert translations["settings"]["--backend"] == "ctranslate2" and translations["result"]["rows"] == 300
    assert report["corpus"]["references_added"] == 300
    assert report["corpus"]["training_pairs"] == report["corpus"]["kept"] + 300
    assert (
        len((output_dir / "distilled" / "train.jsonl").read_text().splitlines()) == report["corpus"]["training_pairs"]
    )
    config = json.loads((output_dir / "student" / "config.json").read_text())
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"], config["encoder_ffn_dim"]) == (
        32, 2, 1, 64
    )  # fmt: skip
    assert report["student"]["init"] == "random" and report["student"]["copied_layers"] == {}
    assert sorted(path.name for path in (output_dir / "student-onnx" / "onnx").glob("*.onnx"))
    exports = report["exports"]
    assert exports["formats"] == ["onnx"] and (exports["rows"] or exports["not_verified"])
    assert "Exports (onnx, in student-onnx/)" in (output_dir / "report.md").read_text()


@pytest.mark.slow
def test_under_two_processes_both_train_and_the_first_does_the_other_steps(local_ray, corpus, tmp_path):
    """`accelerate launch` (here torch.distributed.run, as the recipe's own two-process tests): the first process
    translates, filters, exports and reports; both train each model."""
    output_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
    ]
    command += [
        "-m",
        "hf_vanilla_transformer",
        *distill_argv(output_dir, corpus, "--baseline", "--address", local_ray),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("# Distillation report") == 1
    for ray_says in ("core_worker", "logging_progress", "(MapWorker"):  # Ray is quiet unless --verbose
        assert ray_says not in result.stderr
    for model in ("student", "baseline"):
        training = json.loads((output_dir / model / "metrics.json").read_text())["training"]
        assert training["world_size"] == 2 and training["steps"] == 4
    assert json.loads((output_dir / "steps" / "report.json").read_text())["complete"]


# ------------------------------------------------------------------------------------------------------ the parts


@pytest.mark.parametrize("teacher, student", [((6, 6), (6, 2)), ((3, 3), (3, 2)), ((4, 1), (4, 1))])
def test_the_shallow_student_keeps_the_encoder_and_decodes_with_two_layers_at_most_the_teachers(teacher, student):
    config = tiny_config(encoder_layers=teacher[0], decoder_layers=teacher[1])
    sizes = StudentSizes.of(config, "shallow")
    assert (sizes.encoder_layers, sizes.decoder_layers) == student and sizes.d_model == config.d_model
    assert StudentSizes.of(config, "shallow", decoder_layers=1).decoder_layers == 1


def test_copy_init_starts_from_the_teachers_embeddings_and_evenly_chosen_layers():
    assert layers_to_copy(1, 6) == [0] and layers_to_copy(2, 6) == [0, 5] and layers_to_copy(3, 12) == [0, 6, 11]
    teacher = VanillaTransformerForConditionalGeneration(tiny_config(encoder_layers=4, decoder_layers=3))
    config = student_config(teacher.config, StudentSizes.of(teacher.config, "shallow", decoder_layers=2), None)
    student, picks = build_student(config, teacher)
    assert picks == {"encoder": [0, 1, 2, 3], "decoder": [0, 2]}
    assert torch.equal(student.model.shared.weight, teacher.model.shared.weight)
    assert student.lm_head.weight.data_ptr() == student.model.shared.weight.data_ptr()
    for own, teachers in ((0, 0), (1, 2)):
        for name, tensor in student.model.decoder.layers[own].state_dict().items():
            assert torch.equal(tensor, teacher.model.decoder.layers[teachers].state_dict()[name]), name
    random, copied = build_student(config)
    assert copied == {} and not torch.equal(random.model.shared.weight, teacher.model.shared.weight)


def test_without_a_length_the_student_trains_as_many_steps_as_its_teacher(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"training": {"steps": 2300, "epochs": 5.2}}))
    assert teacher_length(tmp_path, ["--learning_rate", "1e-3"]) == ["--max_steps", "2300"]
    for length in (["--max_steps", "10"], ["--num_train_epochs=2"], ["--max_train_minutes", "5"]):
        assert teacher_length(tmp_path, length) == []
    (tmp_path / "metrics.json").unlink()  # a teacher without its run report: the recipe's own default
    assert teacher_length(tmp_path, []) == []


def test_the_hypothesis_closest_to_the_reference_is_kept_and_each_filter_counts_its_pairs(tmp_path):
    """Parallel lines keep the n-best entry with the best chrF against their reference, monolingual lines their first;
    then empty sides, absurd length ratios, duplicates and the worst share by score per token go."""
    import pyarrow as pa

    from hf_vanilla_transformer.distill.corpus import distill_pairs

    def nbest(*entries):
        return [{"text": text, "score": score, "length": len(text.split()) + 1} for text, score in entries]

    parallel = [
        ("Ich bin müde.", "I am tired.", nbest(("I'm weary.", -0.1), ("I am tired.", -0.3))),
        ("Er schläft.", "He sleeps.", nbest(("He is sleeping.", -0.2), ("He sleeps.", -0.4))),
        ("Ja.", "Yes.", nbest(("Yes, yes, yes, yes, yes, yes, yes.", -0.1), ("No.", -0.2))),
        ("Er schläft.", "He sleeps.", nbest(("He sleeps.", -0.4), ("He's asleep.", -0.1))),  # a duplicate pair
        ("Wo?", "Where?", nbest(("", -0.1), ("", -0.5))),
        ("Komm.", "Come.", nbest(("Come.", -2.5), ("Come on.", -3.0))),
    ]
    rows = [
        dict(
            row=i, text=de, reference=en, translation=n[0]["text"], score=n[0]["score"], translation_length=1, nbest=n
        )
        for i, (de, en, n) in enumerate(parallel)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "sources-00.parquet")
    mono = [
        dict(
            text="Gut.",
            translation="Good.",
            score=-0.2,
            translation_length=2,
            nbest=nbest(("Good.", -0.2), ("Fine.", -0.1)),
        )
    ]
    pq.write_table(pa.Table.from_pylist(mono), tmp_path / "mono-00.parquet")
    references = write_jsonl(tmp_path / "references.jsonl", [("Hallo.", "Hello.")])
    folder = tmp_path / "distilled"
    folder.mkdir()
    shards = sorted(tmp_path.glob("*.parquet"))
    counts = distill_pairs(shards, folder, ("de", "en"), 1.0, "chrf", 3.0, 0.2, references)
    kept = [json.loads(line)["translation"] for line in (folder / "train.jsonl").read_text().splitlines()]
    assert counts["dropped"] == {"empty": 1, "length_ratio": 1, "duplicates": 1, "score": 0}
    assert counts["chosen_not_teachers_first"] == 2 and counts["translated"] == 7
    assert kept == [
        {"de": "Gut.", "en": "Good."},  # the monolingual shard's name comes first
        {"de": "Ich bin müde.", "en": "I am tired."},
        {"de": "Er schläft.", "en": "He sleeps."},
        {"de": "Komm.", "en": "Come."},
        {"de": "Hallo.", "en": "Hello."},
    ]
    assert counts == {**counts, "kept": 4, "references_added": 1, "training_pairs": 5}
    assert [path.name for path in folder.iterdir()] == ["train.jsonl"]  # the Arrow files it read through are gone
    folder = tmp_path / "without-the-worst"
    folder.mkdir()
    counts = distill_pairs(shards, folder, ("de", "en"), 1.0, "chrf", 3.0, 0.25, None)
    assert counts["dropped"]["score"] == 1 and "Komm." not in (folder / "train.jsonl").read_text()


def test_the_selection_metric_chooses_and_the_score_per_token_comes_from_the_recorded_length():
    from hf_vanilla_transformer.distill.corpus import select_best

    hypotheses = [
        {"text": "He sleeps.", "score": -0.5, "length": 4},
        {"text": "Hee sleepss now.", "score": -1.0, "length": 8},
    ]
    batch = dict(text=["Er schläft jetzt."], reference=["He sleeps now."], translation=["He sleeps."], score=[-0.5])
    batch.update(translation_length=[4], nbest=[hypotheses])
    chosen = {metric: select_best(batch, "de", "en", 0.6, metric) for metric in ("chrf", "bleu")}
    assert chosen["chrf"]["translation"][0]["en"] == "Hee sleepss now." and chosen["chrf"]["not_first"] == [True]
    assert chosen["bleu"]["translation"][0]["en"] == "He sleeps." and chosen["bleu"]["not_first"] == [False]
    assert chosen["bleu"]["score"] == [pytest.approx(-0.5 * 4**0.6 / 4)]  # the summed log-probability per token


def test_a_step_that_failed_before_keeping_any_work_may_be_rerun_with_other_settings(tmp_path):
    """A teacher step whose workers refused their options leaves a folder without shards: no dead end."""
    from hf_vanilla_transformer.distill.records import Step, Steps

    output = tmp_path / "run"
    records = Steps(output)

    def failing():
        (output / "shards").mkdir(parents=True)
        (output / "shards" / "_settings.json").write_text("{}")
        raise RuntimeError("the workers refused their options")

    def shards_kept():
        return any((output / "shards").glob("*.parquet"))

    first = Step("shards", {"--num_beams": 1, "--early_stopping": True}, failing, resumes=True, kept=shards_kept)
    with pytest.raises(RuntimeError):
        records.run(first)
    second = Step("shards", {"--num_beams": 1}, lambda: {"rows": 1}, resumes=True, kept=shards_kept)
    records.check([second])  # nothing of the first run is kept: its settings bind nothing
    assert records.run(second) == {"rows": 1}
    assert not (output / "shards").exists()  # the files without work are gone
    (output / "shards").mkdir()
    (output / "shards" / "000.parquet").write_text("kept")
    records.write("shards", dict(settings=second.settings, complete=False, attempts=1))
    with pytest.raises(InputError, match="its shards step was made with --num_beams 1; this run gives 4"):
        records.check([Step("shards", {"--num_beams": 4}, lambda: {}, resumes=True, kept=shards_kept)])


def test_a_greedy_teacher_is_taken_without_the_beam_searchs_early_stopping(tmp_path):
    from hf_vanilla_transformer.distill.options import parse
    from hf_vanilla_transformer.distill.run import Run

    argv = ["--teacher", str(tiny_translator_dir()), "--output_dir", str(tmp_path / "run"), "--num_beams", "1"]
    run = Run.of(*parse([*argv, "--nbest", "1"], "distill"), "distill")
    assert (run.decoding.num_beams, run.decoding.nbest, run.decoding.early_stopping) == (1, 1, None)
    with pytest.raises(InputError, match="--nbest 4 needs --num_beams 4 or more"):
        Run.of(*parse(argv, "distill"), "distill")
