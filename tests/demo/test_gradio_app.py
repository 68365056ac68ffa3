"""The Gradio demo through its API (gradio_client): translations, n-best, heatmaps, bad input, queueing, Space folder.

The page itself, in a real browser, is tested in test_web_page.py.
"""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest
import yaml
from PIL import Image


gradio = pytest.importorskip("gradio", reason="gradio is in the `demo` and `dev` extras: pip install -e '.[dev]'")

from gradio_client import Client  # noqa: E402

from hf_vanilla_transformer import cli  # noqa: E402
from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS  # noqa: E402
from hf_vanilla_transformer.demo.attention import attention_maps  # noqa: E402
from hf_vanilla_transformer.demo.gradio_app import MAX_CHARACTERS, build_demo, heatmap_image, write_space  # noqa: E402
from hf_vanilla_transformer.translate.options import DecodeOptions  # noqa: E402
from hf_vanilla_transformer.translate.translator import load_translator, translate_lines  # noqa: E402
from tests.helpers import (  # noqa: E402
    DEMO_SENTENCES,
    free_port,  # noqa: E402
)


pytestmark = pytest.mark.slow  # servers, browsers, whole command runs


DEFAULTS = ("cross-attention", "average", "average")


@pytest.fixture(scope="module")
def client(model_dir):
    demo = build_demo(str(model_dir))
    demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def translate(client, text, num_beams=1, n_best=1, *selection, split_sentences=True, glossary=""):
    target, n_best_text, heatmap, _, message = client.predict(
        text, num_beams, n_best, split_sentences, glossary, *(selection or DEFAULTS), api_name="/translate"
    )
    return target, n_best_text, heatmap, message


def test_translation_n_best_and_heatmap_match_the_library(client, reference):
    model, tokenizer = reference
    for num_beams, n_best in ((1, 1), (4, 3)):
        target, n_best_text, heatmap, message = translate(client, DEMO_SENTENCES[0], num_beams, n_best)
        expected = attention_maps(
            model, tokenizer, DEMO_SENTENCES[0], num_beams=num_beams, num_return_sequences=n_best
        )
        assert target == expected.translation and message == ""
        assert n_best_text.splitlines() == [f"{rank}. {text}" for rank, text in enumerate(expected.n_best, 1)]
        width, height = Image.open(heatmap).size
        assert width > 100 and height > 100


def test_n_best_longer_than_the_beam_is_cut_with_a_note(client):
    target, n_best_text, _, message = translate(client, DEMO_SENTENCES[1], 2, 5)
    assert target and len(n_best_text.splitlines()) == 2
    assert message == "Showing 2 alternatives: the n-best list cannot be longer than the beam."


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "Please type a German sentence to translate."),
        ("   \n ", "Please type a German sentence to translate."),
        ("?!? ... !!", "The text has no letters or digits: please type a German sentence."),
        ("PK\x03\x04\x00binary", "The text contains control characters (binary data?): please send plain text."),
        ("Hallo " * 400, f"The text is too long (2400 characters; at most {MAX_CHARACTERS}): please shorten it."),
    ],
    ids=["empty", "blank", "no-letters", "binary", "too-many-characters"],
)
def test_bad_input_gets_a_message_not_an_error(client, text, expected):
    target, n_best_text, heatmap, message = translate(client, text)
    assert (target, n_best_text, heatmap) == ("", "", None)
    assert expected in message


def test_the_glossary_box_puts_its_terms_in_the_translation_and_names_a_bad_line(client):
    target, _, _, message = translate(client, DEMO_SENTENCES[0], 4, glossary="Bahnhof = railway station\n")
    assert "railway station" in target and message == ""
    target, _, heatmap, message = translate(client, DEMO_SENTENCES[0], 4, glossary="Bahnhof\nZug = train")
    assert (target, heatmap) == ("", None)
    assert message == "Glossary, line 1: write a German term, '=' and its English term."


def test_a_text_of_several_lines_and_sentences_is_translated_sentence_by_sentence(client, model_dir, reference):
    lines = [" ".join(DEMO_SENTENCES[:3]), "", f"{DEMO_SENTENCES[3]}  {DEMO_SENTENCES[0]}"]
    translator = load_translator(str(model_dir), device="cpu")
    alone = [t.hypotheses[0].text for t in translate_lines(DEMO_SENTENCES, translator, DecodeOptions(num_beams=2))]
    target, n_best_text, heatmap, message = translate(client, "\n".join(lines), 2)
    assert target == f"{alone[0]} {alone[1]} {alone[2]}\n\n{alone[3]}  {alone[0]}" and message == ""
    assert n_best_text == f"1. {alone[0]} {alone[1]} {alone[2]} {alone[3]}  {alone[0]}"
    assert Image.open(heatmap).size[0] > 100
    # Forty sentences in one line: forty translations (the model alone takes at most 128 tokens).
    target, *_, message = translate(client, " ".join([DEMO_SENTENCES[0]] * 40))
    greedy = DecodeOptions(num_beams=1)
    assert target == " ".join([next(translate_lines(DEMO_SENTENCES[:1], translator, greedy)).hypotheses[0].text] * 40)
    (whole, _, _, message) = translate(client, " ".join(DEMO_SENTENCES[:2]), split_sentences=False)
    assert whole == attention_maps(*reference, " ".join(DEMO_SENTENCES[:2]), num_beams=1).translation


def test_heatmap_selection_draws_one_layer_and_head_or_the_average(reference):
    model, tokenizer = reference
    maps = attention_maps(model, tokenizer, DEMO_SENTENCES[2])
    assert heatmap_image(None, *DEFAULTS) is None
    for kind, layer, head in (DEFAULTS, ("encoder self-attention", "2", "1"), ("decoder self-attention", "1", "4")):
        image = heatmap_image(maps, kind, layer, head)
        assert image.size[0] > 100 and image.size[1] > 100


def test_twenty_simultaneous_requests_all_come_back_correct(client, reference):
    model, tokenizer = reference
    texts = []
    with open(BUNDLED_CORPUS / "test.jsonl", encoding="utf-8") as f:
        for line in f:
            if len(texts) < 20 and len(line) < 120:
                texts.append(json.loads(line)["translation"]["de"])
    expected = [attention_maps(model, tokenizer, text, num_beams=2).translation for text in texts]
    jobs = [client.submit(text, 2, 1, True, "", *DEFAULTS, api_name="/translate") for text in texts]
    results = [job.result(timeout=300) for job in jobs]
    assert [result[0] for result in results] == expected
    assert all(result[-1] == "" for result in results)


def test_write_space_with_the_model_files_runs_from_its_own_folder(model_dir, tmp_path):
    space = write_space(str(model_dir), tmp_path / "space")
    names = {p.name for p in space.iterdir()}
    assert names == {"app.py", "requirements.txt", "README.md", "model", "hf_vanilla_transformer"}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (space / "model").iterdir()}
    package = space / "hf_vanilla_transformer"
    assert (package / "demo" / "gradio_app.py").is_file() and (package / "data" / "folders.py").is_file()
    assert not (package / "data" / BUNDLED_CORPUS.name).exists()  # the 3.4 MB training corpus stays out
    assert sum(p.stat().st_size for p in package.rglob("*") if p.is_file()) < 1_000_000
    metadata = yaml.safe_load((space / "README.md").read_text(encoding="utf-8").split("---")[1])
    assert metadata["sdk"] == "gradio" and metadata["app_file"] == "app.py"
    assert metadata["sdk_version"] == gradio.__version__
    requirements = (space / "requirements.txt").read_text().split()
    assert {line.split("=")[0].split(">")[0].split("<")[0] for line in requirements} >= {
        "torch",
        "transformers",
        "matplotlib",
    }
    # row 46: the versions this package declares and is tested with, not whatever this machine has installed
    declared = {r.replace(" ", "") for r in importlib.metadata.requires("hf-vanilla-transformer") if ";" not in r}
    assert set(requirements) <= declared and any(line.startswith("transformers<") for line in requirements)
    # The Space imports the package copied next to app.py (sys.path[0]), not an installed one.
    check = (
        "import app, hf_vanilla_transformer, pathlib; "
        "assert pathlib.Path(hf_vanilla_transformer.__file__).parent.parent == pathlib.Path.cwd(); "
        "print(type(app.demo).__name__)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=space, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Blocks"


def test_write_space_with_a_hub_id_and_the_command_line(model_dir, tmp_path, capsys):
    argv = ["demo", "--model", str(model_dir), "--write_space", "--output_dir", str(tmp_path / "s")]
    assert cli.main([*argv, "--hub_id", "org/name"]) == 0
    assert "Wrote a Gradio Space to" in capsys.readouterr().out
    assert not (tmp_path / "s" / "model").exists()
    assert "build_demo('org/name')" in (tmp_path / "s" / "app.py").read_text()
    assert cli.main([*argv, "--hub_id", "org/name"]) == 2  # the folder is not empty any more
    assert "is not empty: choose a new folder, or pass --overwrite" in capsys.readouterr().err
    assert cli.main(["demo", "--model", str(tmp_path), "--write_space", "--output_dir", str(tmp_path / "t")]) == 2
    assert f"--model {tmp_path}: the folder holds no model (no config.json" in capsys.readouterr().err
