"""Corpus translation on Ray Data (`translate-corpus`): the output is `translate`'s for the same lines and options,
with every input column and every row once; a rerun completes what an interruption left; a worker that dies has its
shard retried; bad input is one line, exit 2, before anything is written (or Ray started). One local Ray (2 CPUs, no
dashboard) serves the module's runs."""

import json
import os
from pathlib import Path

import pytest

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.cuda import CUDA_DEFAULTS
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions
from hf_vanilla_transformer.translate.translator import load_translator, translate_lines
from tests.helpers import SENTENCES, serving_model_dir


ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hf_vanilla_transformer.translate.corpus import (  # noqa: E402
    TranslateShards,
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
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False)
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
def test_a_worker_that_dies_has_its_shard_retried_and_every_row_is_written_once(local_ray, corpus, tmp_path):
    flag = Path(os.environ["HF_VANILLA_TRANSFORMER_CACHE"]) / "die"
    flag.write_text("")
    options = EngineOptions(device="cpu", threads=1)
    summary = translate_corpus(
        input_files(str(corpus)), str(tmp_path), str(serving_model_dir()), options, DecodeOptions(), num_workers=1,
        shard_rows=5,
        output_format="jsonl", worker=DyingOnce,
    )  # fmt: skip
    assert not flag.exists() and summary.retries == 1 and summary.rows == 3 * len(LINES)
    check(outputs(tmp_path), expected(options))


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
        cluster.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 2.0})
        options, resources = worker_resources(EngineOptions(), num_workers=2)
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "0"}
    assert options.threads == 1 and resources == dict(num_gpus=1, num_cpus=1, runtime_env={"env_vars": settings})
    worker = ray.remote(lambda: {name: os.environ.get(name) for name in settings})
    assert ray.get(worker.options(num_cpus=1, runtime_env=resources["runtime_env"]).remote()) == settings
    assert ray.get(worker.options(num_cpus=1).remote()) != settings


def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys):
    """The input is read through before Ray starts."""
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
