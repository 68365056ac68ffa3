"""What a folder tells the translate command: the length and language it was trained on (recorded by training, read by
translate, absent from older folders), and what it is when it is not a translation model (refused by name, never
translated with freshly initialised weights)."""

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, GenerationConfig

from hf_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    cli,
)
from hf_vanilla_transformer.data.trained_on import TrainedOn, record_trained_on, trained_on
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.model.pipeline_translation import max_source_length
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import load_translator, translate_file, translate_lines
from tests.helpers import PAIRS, ROOT, TINY_MODEL, run_training, tiny_config, tiny_tokenizer, write_jsonl


FIXTURE = ROOT / "tests" / "fixtures" / "saved-0.1.0"  # saved by the code before the record existed


def save(folder: Path, model, tokenizer=None) -> Path:
    model.save_pretrained(folder)
    (tokenizer or tiny_tokenizer()).save_pretrained(folder)
    return folder


def test_the_record_round_trips_through_the_generation_config(tmp_path):
    class DataArguments:  # the translation recipe's names
        source_lang, target_lang, max_source_length, max_target_length, dataset_name = "de", "en", 64, 48, "x"

    config = GenerationConfig(num_beams=4)
    record_trained_on(config, DataArguments())
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())["trained_on"]
    assert saved == {"source_lang": "de", "target_lang": "en", "max_source_length": 64, "max_target_length": 48}
    assert trained_on(GenerationConfig.from_pretrained(tmp_path)) == TrainedOn("de", "en", 64, 48)
    assert trained_on(GenerationConfig()) == TrainedOn() and TrainedOn().source_limit(None) is None
    assert TrainedOn(max_source_length=64).source_limit(128) == 64 and TrainedOn().source_limit(128) == 128
    assert TrainedOn(max_source_length=64).source_limit(32) == 32  # never more than the model accepts


def test_translate_feeds_the_model_sentences_of_the_length_it_was_trained_on(tmp_path, caplog):
    tokenizer = tiny_tokenizer()
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).eval()
    model.generation_config.max_new_tokens = 4
    record_trained_on(model.generation_config, TrainedOn("de", "en", 8, 8))
    folder = save(tmp_path / "model", model, tokenizer)
    translator = load_translator(str(folder), device="cpu")
    assert translator.max_source_tokens == 8 and translator.decoding().source_lang == "de"  # it accepts 64
    assert translator.decoding(DecodeOptions(source_lang="en")).source_lang == "en"
    # German rules: "Am 3. Mai ..." is one sentence (of 12 tokens: cut between words); "Wer hat dir das gegeben?"
    # has 11 tokens and is cut too, "Ich habe Hunger." fits.
    lines = ["Am 3. Mai kommt Tom.", "Wer hat dir das gegeben? Ich habe Hunger."]
    encoded = translator.encode(lines)
    assert [line.texts for line in encoded] == [
        ["Am 3.", "Mai", "kommt Tom."],
        ["Wer hat dir das", "gegeben?", "Ich habe Hunger."],
    ]
    assert [line.split_sentences for line in encoded] == [1, 1]
    assert all(len(ids) <= 8 for line in encoded for ids in line.ids)
    source = tmp_path / "in.de"
    source.write_text("\n".join(lines) + "\n")
    stats = translate_file([str(source)], str(tmp_path / "out.en"), translator, quiet=True)
    assert stats.split_sentences == 2
    assert "2 sentence(s) were longer than the 8 tokens the model was trained on" in caplog.text


def test_a_folder_saved_before_the_record_translates_within_what_the_model_accepts(tmp_path):
    """tests/fixtures/saved-0.1.0 has no record: pieces up to what the model accepts, language-neutral rules, and each
    sentence of a line translated as the folder's own generate() translates it alone."""
    translator = load_translator(str(FIXTURE), device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE)
    model = VanillaTransformerForConditionalGeneration.from_pretrained(FIXTURE).eval()
    assert translator.decoding().source_lang is None and translator.trained_length is None
    assert translator.max_source_tokens == max_source_length(tokenizer, model.config)
    expected = json.loads((FIXTURE / "expected.json").read_text())
    (line,) = translate_lines([" ".join(expected["sources"])], translator)
    alone = [model.generate(**tokenizer(text, return_tensors="pt"))[0] for text in expected["sources"]]
    assert line.parts == 2
    assert line.hypotheses[0].text == " ".join(tokenizer.batch_decode(alone, skip_special_tokens=True))
    assert [a.tolist() for a in alone] == expected["beam_ids"]  # the fixture's own outputs


@pytest.mark.slow
def test_training_records_its_languages_and_limits_in_the_saved_folder(tmp_path):
    data = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    arguments = ["--train_file", data, *TINY_MODEL, "--max_steps", 2, "--eval_strategy", "no", "--save_strategy", "no"]
    run_training("--output_dir", tmp_path / "run", *arguments, "--max_source_length", 24, "--max_target_length", 20)
    record = json.loads((tmp_path / "run" / "generation_config.json").read_text())["trained_on"]
    assert record == {"source_lang": "de", "target_lang": "en", "max_source_length": 24, "max_target_length": 20}
    translator = load_translator(str(tmp_path / "run"), device="cpu")
    assert (translator.max_source_tokens, translator.decoding().source_lang) == (24, "de")


# ------------------------------------------------------------------------------------ folders that do not translate


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    tokenizer = tiny_tokenizer()
    size = dict(vocab_size=len(tokenizer))
    translation = save(
        root / "translation", VanillaTransformerForConditionalGeneration(tiny_config(**size)), tokenizer
    )
    save(root / "classifier", VanillaTransformerForSequenceClassification(tiny_config(**size, num_labels=2)))
    save(root / "decoder-only", VanillaTransformerForCausalLM(tiny_config(**size, is_encoder_decoder=False)))
    # A translation model whose weights file lost the decoder (as a classifier's would lack it).
    partial = Path(shutil.copytree(translation, root / "partial"))
    weights = load_file(partial / "model.safetensors")
    save_file({k: v for k, v in weights.items() if ".decoder." not in k}, partial / "model.safetensors")
    no_weights = Path(shutil.copytree(translation, root / "no-weights"))
    (no_weights / "model.safetensors").unlink()
    return root


def translate_command(capsys, *argv) -> tuple[int, str]:
    code = cli.main(["translate", "--quiet", *map(str, argv)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "name, message",
    [
        ("classifier", "holds a sequence classifier (VanillaTransformerForSequenceClassification), not a translation"),
        ("decoder-only", "holds a decoder-only language model (VanillaTransformerForCausalLM), not a translation"),
        ("partial", "its weights lack 52 of VanillaTransformerForConditionalGeneration's tensors (model.decoder."),
        ("no-weights", "no weights to load"),
    ],
)
def test_a_folder_that_is_not_a_translation_model_is_refused_by_name(folders, name, message, capsys):
    code, error = translate_command(capsys, "--model", folders / name)
    assert code == 2 and message in error and error.count("\n") == 1, error
    assert "the folder holds config.json" in error or "not a translation model" in error
    with pytest.raises(InputError, match="not a translation model|weights"):
        load_translator(str(folders / name), backend="ctranslate2" if name != "partial" else "torch")


def test_a_ctranslate2_export_points_to_the_option_that_reads_it(folders, capsys, tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    from hf_vanilla_transformer.interop.ctranslate2 import export_ctranslate2

    monkeypatch.setenv("HF_VANILLA_TRANSFORMER_CACHE", str(tmp_path))
    export = export_ctranslate2(folders / "translation", tmp_path / "ct2")
    code, error = translate_command(capsys, "--model", export)
    assert (
        code == 2 and "is a CTranslate2 model folder (model.bin): `translate --backend ctranslate2` reads it" in error
    )
    with pytest.raises(InputError, match="is a CTranslate2 model folder"):
        export_ctranslate2(export, tmp_path / "again")
    torch_output = [
        t.hypotheses[0].text
        for t in translate_lines(["Wo ist Tom?"], load_translator(str(folders / "translation"), device="cpu"))
    ]
    ct2_output = [
        t.hypotheses[0].text
        for t in translate_lines(["Wo ist Tom?"], load_translator(str(export), backend="ctranslate2", device="cpu"))
    ]
    assert ct2_output == torch_output
