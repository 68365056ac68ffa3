"""Corpus translation on Ray Data (`translate-corpus`): the output is `translate`'s for the same lines and options,
with every input column and every row once; a rerun completes what an interruption (Ctrl-C, SIGTERM, a killed
worker) left; a small input's mistakes are one line, exit 2, before anything is written (or Ray started), a large
input's bad rows are listed by the workers that read them while the other shards complete; Ray says nothing unless
asked to. One local Ray (2 CPUs, no dashboard) serves the module's runs, the command's processes too (--address)."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.cuda import CUDA_DEFAULTS
from hf_vanilla_transformer.data.glossary import Glossary
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.translate.io import resume_point
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions
from hf_vanilla_transformer.translate.ray_session import start_ray
from hf_vanilla_transformer.translate.translator import load_translator, output_settings, translate_lines
from tests.helpers import ROOT, SENTENCES, default_sigint, serving_model_dir


ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hf_vanilla_transformer.translate import corpus as corpus_module  # noqa: E402
from hf_vanilla_transformer.translate.corpus import (  # noqa: E402
    MANIFEST,
    TranslateShards,
    check_manifest,
    input_files,
    translate_corpus,
    translate_dataset,
    worker_resources,
)


GERMAN = SENTENCES[0::2]
LINES = [*GERMAN, "", f"{GERMAN[0]} {GERMAN[1]}", *GERMAN[2:], GERMAN[0]]  # a blank line, two sentences on one


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    # Workers inherit the environment of ray.init: the CTranslate2 conversion cache is the test's.
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path_factory.mktemp("cache")))
        environment.setenv("RAY_BACKEND_LOG_LEVEL", "fatal")  # what the command sets, here undone after the module
        start_ray(num_cpus=2, object_store_memory=100 << 20)  # quiet, as the command starts it
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A text file, a JSON Lines file with ids and metadata, and a Parquet file of three row groups."""
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "a.txt").write_text("\n".join(LINES) + "\n")
    records = [{"id": f"j{i}", "text": line, "meta": {"n": i}} for i, line in enumerate(LINES)]
    (folder / "b.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    table = pa.table({"id": [f"p{i}" for i in range(len(LINES))], "text": LINES})
    pq.write_table(table, folder / "c.parquet", row_group_size=4)
    return folder


def outputs(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def expected(engine: EngineOptions, decoding: DecodeOptions | None = None) -> dict[str, str]:
    translator = load_translator(str(serving_model_dir()), engine)
    translations = translate_lines(LINES, translator, decoding)
    return {t.source: t.hypotheses[0].text if t.hypotheses else "" for t in translations}


def check(rows: list[dict], reference: dict[str, str]) -> None:
    """Every input row once, its columns kept, its translation `translate`'s."""
    ids = sorted(row.get("id") or row["text"] for row in rows)
    assert len(rows) == 3 * len(LINES)
    assert sorted(r["id"] for r in rows if "id" in r) == sorted(
        [f"j{i}" for i in range(len(LINES))] + [f"p{i}" for i in range(len(LINES))]
    ), ids
    assert sorted(r["text"] for r in rows if "id" not in r) == sorted(LINES)
    assert all(row["meta"] == {"n": int(row["id"][1:])} for row in rows if str(row.get("id")).startswith("j"))
    assert all(row["translation"] == reference[row["text"]] for row in rows)
    assert all((row["score"] is None) == (row["text"] == "") for row in rows)


@pytest.mark.slow
def test_output_is_translates_and_a_rerun_completes_only_what_is_missing(local_ray, corpus, tmp_path, capsys):
    options = EngineOptions(device="cpu", threads=1)
    reference = expected(options)
    capsys.readouterr()
    output = tmp_path / "out"
    args = ["translate-corpus", "--model", str(serving_model_dir()), "--input", str(corpus), "--output_dir"]
    assert cli.main([*args, str(output), "--shard_rows", "4", "--num_workers", "1", "--threads", "1"]) == 0
    assert "39 rows" in capsys.readouterr().err
    check(outputs(output), reference)
    # An interruption: two shards lost (one of them mid-write, its temporary file left), the rest complete.
    shards = sorted(output.glob("*.parquet"))
    kept = {path: path.stat().st_mtime_ns for path in shards[2:]}
    shards[0].unlink()
    shards[1].rename(output / f".{shards[1].stem}.tmp")
    summary = translate_corpus(
        input_files(str(corpus)), str(output), str(serving_model_dir()), options, DecodeOptions(), num_workers=1,
        shard_rows=4,
    )  # fmt: skip
    assert (summary.shards, summary.skipped, summary.retries) == (2, len(kept), 1)
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in kept.items())
    check(outputs(output), reference)
    assert not list(output.glob(".*"))


class DyingOnce(TranslateShards):
    """Ends its process in the middle of its first shard while the flag file exists (removing it)."""

    def __init__(self, *args):
        super().__init__(*args)
        translate = self.translator.translate

        def dying(lines, *args, **kwargs):
            flag = Path(os.environ["HF_VANILLA_TRANSFORMER_CACHE"]) / "die"  # set before ray.init
            try:
                flag.unlink()
            except FileNotFoundError:
                return translate(lines, *args, **kwargs)
            os._exit(1)

        self.translator.translate = dying


@pytest.mark.slow
@pytest.mark.parametrize("glossary", [None, Glossary.of_pairs([("Hunger", "hungry"), ("Tom", "Tom today")])])
def test_a_worker_that_dies_has_its_shard_retried_and_every_row_is_written_once(local_ray, corpus, tmp_path, glossary):
    """With a glossary, the restarted worker decodes under the same terms (they travel with the options)."""
    flag = Path(os.environ["HF_VANILLA_TRANSFORMER_CACHE"]) / "die"
    flag.write_text("")
    options, decoding = EngineOptions(device="cpu", threads=1), DecodeOptions(glossary=glossary)
    summary = translate_corpus(
        input_files(str(corpus)), str(tmp_path), str(serving_model_dir()), options, decoding, num_workers=1,
        shard_rows=5,
        output_format="jsonl", worker=DyingOnce,
    )  # fmt: skip
    assert not flag.exists() and summary.retries == 1 and summary.rows == 3 * len(LINES)
    rows = outputs(tmp_path)
    check(rows, expected(options, decoding))
    if glossary is not None:
        assert any("Tom today" in row["translation"] for row in rows) and all(not row["missing_terms"] for row in rows)


def test_a_rerun_with_another_glossary_is_refused_naming_it(tmp_path):
    (tmp_path / "a.tsv").write_text("Tom\tTom\n")
    (tmp_path / "b.tsv").write_text("Tom\tThomas\n")
    settings = {}
    for name in ("a", "b"):
        decoding = dataclasses.replace(DecodeOptions(), glossary=str(tmp_path / f"{name}.tsv"))
        settings[name] = output_settings("m", EngineOptions(), decoding)
    record = dict(inputs=["in.txt"], column="text", shard_rows=10, output_format="parquet", settings=settings["a"])
    check_manifest(str(tmp_path / "out"), record)
    with pytest.raises(
        InputError,
        match=r"--glossary differs .*it had --glossary .*a.tsv \(1 term, sha256 \w+\), this run --glossary .*b.tsv ",
    ):
        check_manifest(str(tmp_path / "out"), dict(record, settings=settings["b"]))


@pytest.mark.slow
def test_ctranslate2_output_is_translates_and_a_dataset_gets_its_columns(local_ray, corpus, tmp_path):
    pytest.importorskip("ctranslate2")
    engine, decoding = EngineOptions(backend="ctranslate2", device="cpu", threads=1), DecodeOptions(nbest=2)
    reference = expected(engine, decoding)
    summary = translate_corpus(
        input_files(str(corpus)), str(tmp_path), str(serving_model_dir()), engine, decoding, num_workers=2,
        shard_rows=6,
    )  # fmt: skip
    assert summary.rows == 3 * len(LINES)
    rows = outputs(tmp_path)
    check(rows, reference)
    assert all(len(row["nbest"]) == (0 if row["text"] == "" else 2) for row in rows)
    dataset = ray.data.from_items([{"id": i, "text": line} for i, line in enumerate(LINES)])
    translated = translate_dataset(dataset, str(serving_model_dir()), EngineOptions(device="cpu", threads=1))
    rows = sorted(translated.take_all(), key=lambda row: row["id"])
    assert [row["translation"] for row in rows] == [expected(EngineOptions(device="cpu"))[line] for line in LINES]


@pytest.mark.slow
def test_gpu_workers_get_this_processs_cuda_settings_which_a_clusters_nodes_do_not_inherit(local_ray, monkeypatch):
    """Ray's workers started before these settings were made, as a cluster's are: its runtime environment carries them
    (`CUDA_DEFAULTS`, the user's own value kept)."""
    for names in CUDA_DEFAULTS:
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0")
    with monkeypatch.context() as cluster:
        cluster.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0}}])
        options, workers, resources = worker_resources(EngineOptions(), num_workers=2)
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "0"}
    assert (options.threads, workers) == (1, 2)
    assert resources == dict(num_gpus=1, num_cpus=1, runtime_env={"env_vars": settings})
    worker = ray.remote(lambda: {name: os.environ.get(name) for name in settings})
    assert ray.get(worker.options(num_cpus=1, runtime_env=resources["runtime_env"]).remote()) == settings
    assert ray.get(worker.options(num_cpus=1).remote()) != settings


def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys):
    """A small input is read through before Ray starts."""
    serving_model_dir()
    capsys.readouterr()
    (tmp_path / "in").mkdir()
    cases = {
        "missing.jsonl": (b'{"text": "Hallo"}\n{"id": 2}\n', "missing.jsonl:2: no column 'text'"),
        "latin1.txt": ("Hallo\nGrüße\n".encode("latin-1"), "latin1.txt:2: invalid UTF-8"),
        "broken.parquet": (b"PAR1 not really", "broken.parquet: not a readable Parquet file"),
        "empty.txt": (b"", "no rows to translate"),
        "taken.jsonl": (b'{"text": "Hallo", "translation": "Hi"}\n', "'translation' is one the translation adds"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / "in" / name
        path.write_bytes(content)
        output = tmp_path / f"out-{name}"
        args = ["translate-corpus", "--model", str(serving_model_dir()), "--input", str(path)]
        assert cli.main([*args, "--output_dir", str(output)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not output.exists()
        path.unlink()
    assert cli.main([*args, "--output_dir", str(tmp_path / "x"), "--input", str(tmp_path / "none*.txt")]) == 2
    assert "no input files" in capsys.readouterr().err


@pytest.mark.slow
def test_workers_and_threads_beyond_what_the_cluster_holds_are_capped_with_a_warning(local_ray, monkeypatch):
    """This Ray has 2 CPUs: 8 workers would wait for room, each having loaded the model, and a worker asking for 64
    CPUs would wait forever."""
    said = []
    monkeypatch.setattr(corpus_module.logger, "warning", said.append)
    engine, workers, resources = worker_resources(EngineOptions(threads=64), num_workers=8)
    assert (engine.threads, workers, resources) == (2, 1, dict(num_cpus=2))
    assert said == [
        "--threads 64: a node of this Ray has at most 2 CPUs; workers run 2.",
        "--num_workers 8: this Ray's 2 CPU(s) hold 1 worker(s) of 2 thread(s); 1 run, each with its own copy of the "
        "model.",
    ]
    said.clear()
    engine, workers, _ = worker_resources(EngineOptions(), num_workers=8)
    assert (engine.threads, workers) == (1, 2)
    assert said == [
        "--num_workers 8: this Ray's 2 CPU(s) hold 2 worker(s); 2 run, each with its own copy of the model."
    ]
    said.clear()
    assert worker_resources(EngineOptions(), num_workers=None)[:2] == (EngineOptions(threads=2), 1) and not said


def command(*args) -> subprocess.Popen:
    """`hf-vanilla-transformer translate-corpus ARGS` in a new process, on this module's Ray (--address)."""
    address = ray.get_runtime_context().gcs_address
    argv = [sys.executable, "-m", "hf_vanilla_transformer", "translate-corpus", "--address", address, *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )  # fmt: skip


@pytest.mark.slow
def test_ctrl_c_or_sigterm_keeps_whole_shards_says_how_to_go_on_and_ray_says_nothing_unless_verbose(
    local_ray, tmp_path
):
    lines = [f"{GERMAN[i % len(GERMAN)]} {i}" for i in range(120)]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    output = tmp_path / "out"
    args = ["--model", serving_model_dir(), "--input", tmp_path / "in.txt", "--output_dir", output]
    args += ["--shard_rows", 1, "--num_workers", 1, "--threads", 1]
    for stop in (signal.SIGINT, signal.SIGTERM):
        run, before = command(*args), len(list(output.glob("*.parquet")))
        while len(list(output.glob("*.parquet"))) == before and run.poll() is None:  # working: a shard is written
            time.sleep(0.02)
        run.send_signal(stop)
        err = run.communicate(timeout=300)[1].decode()
        assert run.returncode == 128 + stop, err
        assert err.splitlines() == [  # no traceback, and not a line of Ray's
            f"hf-vanilla-transformer translate-corpus: interrupted; the shards written in {output} are complete: run "
            "the same command again to translate the rest."
        ]
        written = sorted(output.glob("*.parquet"))
        assert 0 < len(written) < len(lines) and all(pq.read_table(path).num_rows == 1 for path in written)
    run = command(*args, "--verbose")
    err = run.communicate(timeout=300)[1].decode()
    assert run.returncode == 0, err
    assert f"{len(written)} complete before" in err.splitlines()[-1] and "ray" in err.lower()  # Ray's own lines
    rows = outputs(output)
    assert sorted(row["text"] for row in rows) == sorted(lines)  # every row once


@pytest.mark.slow
def test_a_model_that_a_worker_cannot_load_is_one_line_and_exit_2(local_ray, tmp_path, capsys):
    """The folder passes the command's checks; its weights, cut short, fail in the worker that loads them."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(serving_model_dir(), model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (tmp_path / "in.txt").write_text("Hallo.\n")
    args = ["translate-corpus", "--model", model, "--input", tmp_path / "in.txt", "--output_dir", tmp_path / "out"]
    capsys.readouterr()
    assert cli.main([*map(str, args), "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--model {model}" in err[0] and "corrupt" in err[0], err
    assert not list((tmp_path / "out").glob("*.parquet"))


@pytest.mark.slow
def test_a_large_inputs_bad_rows_are_listed_by_the_workers_the_rest_is_written_and_a_rerun_completes_it(
    local_ray, tmp_path, monkeypatch, capsys
):
    """Past `CHECKED_UP_FRONT` no pass reads the input before the translation: the workers check the rows they read.
    A shard with bad rows is not written and each is listed (file and row); the other shards are written; once the
    rows are fixed, a rerun translates what is missing."""
    monkeypatch.setattr(corpus_module, "CHECKED_UP_FRONT", 0)
    folder = tmp_path / "in"
    folder.mkdir()
    records = [{"id": f"j{i}", "text": line, "meta": {"n": i}} for i, line in enumerate(LINES)]
    good = [json.dumps(record, ensure_ascii=False) for record in records]
    bad = list(good)
    bad[1], bad[2], bad[9] = '{"id": "j1", "text": 3}', "not json", '{"id": "j9"}'  # rows 2, 3 (shard 1) and 10
    (folder / "b.jsonl").write_text("\n".join(bad) + "\n")
    text = "\n".join(LINES).encode()
    (folder / "a.txt").write_bytes(text.replace(GERMAN[1].encode(), GERMAN[1].encode()[:-2] + b"\xfc.", 1))  # row 2
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(len(LINES))], "txt": LINES}), folder / "c.parquet")
    output = tmp_path / "out"
    args = ["translate-corpus", "--model", str(serving_model_dir()), "--input", str(folder), "--output_dir"]
    args += [str(output), "--shard_rows", "4", "--num_workers", "1", "--threads", "1"]
    capsys.readouterr()
    assert cli.main(args) == 2
    said = [
        line.removeprefix("hf-vanilla-transformer translate-corpus: ") for line in capsys.readouterr().err.splitlines()
    ]
    problems = {line.split(": ")[0] for line in said[:-1]}
    assert problems == {
        f"{folder / 'a.txt'}:2",
        *(f"{folder / 'b.jsonl'}:{row}" for row in (2, 3, 10)),
        str(folder / "c.parquet"),
    }
    assert said[-1].startswith("error: 5 problem(s) in the input, in 4 shard(s), which are not written (5 others are)")
    assert len(list(output.glob("*.parquet"))) == 5 and not list(output.glob(".*"))
    (folder / "b.jsonl").write_text("\n".join(good) + "\n")
    (folder / "a.txt").write_bytes(text)
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(len(LINES))], "text": LINES}), folder / "c.parquet")
    assert cli.main(args) == 0
    assert "5 complete before" in capsys.readouterr().err
    check(outputs(output), expected(EngineOptions(device="cpu", threads=1)))


def test_a_rerun_with_other_options_is_refused_naming_each_option_with_both_values(tmp_path):
    model = str(tmp_path / "model")
    settings = output_settings(model, EngineOptions(), DecodeOptions(num_beams=5))
    record = dict(inputs=["a.txt"], column="text", shard_rows=10, output_format="parquet", settings=settings)
    check_manifest(str(tmp_path / "out"), record)
    other = dict(record, shard_rows=20, settings=output_settings(model, EngineOptions(), DecodeOptions(num_beams=4)))
    with pytest.raises(InputError) as error:
        check_manifest(str(tmp_path / "out"), other)
    assert str(error.value) == (
        f"--output_dir {tmp_path / 'out'} holds a run whose --num_beams and --shard_rows differ ({MANIFEST}): it had "
        "--num_beams 5, --shard_rows 10, this run --num_beams 4, --shard_rows 20; use another folder, or the earlier "
        "run's input and options to complete it."
    )
    output, state = tmp_path / "out.txt", tmp_path / "out.txt.progress"
    output.write_text("")
    state.write_text(json.dumps({"lines": 0, "bytes": 0, "settings": settings}))
    with pytest.raises(InputError, match=r"--resume: --num_beams differs from .*: it had --num_beams 5, this run "):
        resume_point(output, state, output_settings(model, EngineOptions(), DecodeOptions()), resume=True)
