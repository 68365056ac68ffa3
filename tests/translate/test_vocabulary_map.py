"""Vocabulary maps (`--use_vmap`): the file as CTranslate2 reads it, refused line by line where it is wrong; IBM
Model 1's shortlist of a corpus; the search restricted to a batch's candidates chooses what the whole-vocabulary
search chooses once the other tokens are suppressed, and exactly what it chooses when every token is a candidate;
the PyTorch engine chooses the tokens CTranslate2 chooses with the same map; misuses are refused in one line."""

import dataclasses
import json
import shutil

import pytest

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.data.folders import load_tokenizer
from hf_vanilla_transformer.data.vocabulary_map import VMAP_NAME, VocabularyMap, write_vocabulary_map
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.translate.decoding import decode
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions
from hf_vanilla_transformer.translate.translator import load_translator
from tests.helpers import DEMO_SENTENCES, short_pairs, tiny_translator_dir, write_jsonl
from tests.translate.test_decoding import LIMITS, TEXTS, TOKENIZER, generation_config, model  # noqa: F401


def read(tmp_path, text: str, tokenizer=TOKENIZER) -> VocabularyMap:
    path = tmp_path / VMAP_NAME
    path.write_text(text, encoding="utf-8")
    return VocabularyMap.read(path, tokenizer)


def test_the_file_is_ctranslate2s_n_grams_and_common_tokens(tmp_path):
    ids = TOKENIZER.convert_tokens_to_ids
    hung, er, tom = TOKENIZER.tokenize("Tom Hunger")[1:] + TOKENIZER.tokenize("Tom")
    vmap = read(tmp_path, f"\t▁I\n{hung}\t▁hung ry ▁am\n{tom} {hung}\t▁Tom\n")
    specials = {TOKENIZER.unk_token_id, TOKENIZER.bos_token_id, TOKENIZER.eos_token_id}
    assert vmap.candidates([]) == sorted(specials | {ids("▁I")})
    hungry = sorted(specials | set(ids(["▁I", "▁hung", "ry", "▁am"])))
    assert vmap.candidates([[hung, er]]) == hungry
    assert vmap.candidates([[tom], [hung, tom]]) == hungry  # "Tom Hung" is in neither
    assert vmap.candidates([[tom, hung, er]]) == sorted(hungry + [ids("▁Tom")])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("▁Tom\t▁Tom\n▁Hung ry\n", "line 2: expected a source n-gram, one tab and target tokens"),
        ("▁Tom\t▁Tom\t▁Tom\n", "line 1: expected a source n-gram, one tab and target tokens"),
        ("\t▁I\n▁Tom\t▁Tom Zebra\n", "line 2: the target token 'Zebra' is not in the vocabulary"),
        ("", "no target token in it: a vocabulary map lists each source token's targets"),
        ("Zzqxw\t▁I\n", "no source token in it is in the model's vocabulary: a map of another model"),
    ],
)
def test_a_wrong_line_is_named(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        read(tmp_path, text)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / VMAP_NAME).write_bytes("▁Tom\t▁Tom\n".encode("utf-16"))
    with pytest.raises(InputError, match=f"{tmp_path / VMAP_NAME}: not UTF-8 text"):
        VocabularyMap.read(tmp_path / VMAP_NAME, TOKENIZER)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match=f"--vmap {tmp_path / 'none.txt'}: no such file"):
        VocabularyMap.read(tmp_path / "none.txt", TOKENIZER)


def test_ibm_model_1_ranks_a_words_translation_first(tmp_path):
    folder = tiny_translator_dir()
    tokenizer = load_tokenizer(str(folder))
    counts = write_vocabulary_map(tmp_path / VMAP_NAME, short_pairs(), tokenizer, best=3, frequent=10)
    lines = dict(line.split("\t") for line in (tmp_path / VMAP_NAME).read_text().splitlines())
    assert (
        counts == dict(source_tokens=len(lines) - 1, best=3, frequent=10, pairs=2000) and len(lines[""].split()) == 10
    )
    assert all(1 <= len(targets.split()) <= 3 for source, targets in lines.items() if source)
    for german, english in (("▁Hunger", "▁hungry"), ("▁Bahnhof", "▁station")):
        if german in lines and english in tokenizer.get_vocab():
            assert english in lines[german].split(), (german, lines[german])
    assert lines["▁Tom"].split()[0] == "▁Tom"
    VocabularyMap.read(tmp_path / VMAP_NAME, tokenizer)  # what it writes reads back


def decoded(model, config, candidates=None):  # noqa: F811
    batch = TOKENIZER(TEXTS, return_tensors="pt", padding=True, return_token_type_ids=False)
    nbest = config.num_return_sequences or 1
    return decode(model, batch["input_ids"], batch["attention_mask"], LIMITS, config, nbest, candidates=candidates)


SEARCHES = [dict(num_beams=1), dict(num_beams=3, length_penalty=0.6, early_stopping=True, num_return_sequences=2)]


@pytest.mark.parametrize("search", SEARCHES, ids=["greedy", "beam"])
def test_every_token_a_candidate_decodes_as_the_whole_vocabulary(model, search):  # noqa: F811
    config = generation_config(model, **search, bad_words_ids=[[5, 6], [7]], max_new_tokens=max(LIMITS))
    everything = list(range(model.config.vocab_size))
    assert decoded(model, config, everything) == decoded(model, config)


@pytest.mark.parametrize("search", SEARCHES, ids=["greedy", "beam"])
def test_the_candidates_choose_as_suppressing_the_other_tokens(model, search):  # noqa: F811
    candidates = sorted({0, 1, 2, 3, *range(20, 70), *TOKENIZER(TEXTS[0])["input_ids"]})
    others = [i for i in range(model.config.vocab_size) if i not in candidates]
    config = generation_config(model, **search, max_new_tokens=max(LIMITS))
    suppressed = generation_config(
        model, **search, max_new_tokens=max(LIMITS), suppress_tokens=others, renormalize_logits=True
    )
    restricted, expected = decoded(model, config, candidates), decoded(model, suppressed)
    for hypotheses, expected_hypotheses in zip(restricted, expected):
        for (ids, scores), (expected_ids, expected_scores) in zip(hypotheses, expected_hypotheses):
            assert ids == expected_ids and set(ids) <= set(candidates)
            assert scores == pytest.approx(expected_scores, abs=1e-4)


@pytest.fixture(scope="module")
def mapped_model(tmp_path_factory):
    """The tiny translator's folder with a vocabulary map of its corpus."""
    folder = tmp_path_factory.mktemp("vmap") / "model"
    shutil.copytree(tiny_translator_dir(), folder)
    # A short map, which changes what this barely trained model says.
    write_vocabulary_map(folder / VMAP_NAME, short_pairs(), load_tokenizer(str(folder)), best=2, frequent=3)
    return folder


GREEDY, BEAM = (DecodeOptions(num_beams=n, split_sentences=False, use_vmap=True) for n in (1, 4))


@pytest.mark.parametrize("int8", [False, True])
def test_the_engine_chooses_among_the_maps_candidates(mapped_model, int8):
    translator = load_translator(str(mapped_model), EngineOptions(device="cpu", int8=int8))
    tokenizer = translator.tokenizer
    sources = [tokenizer.tokenize(line) + [tokenizer.eos_token] for line in DEMO_SENTENCES]
    translator.decoding(GREEDY)  # reads the map, as the first call with --use_vmap does
    candidates = set(translator.backend.vmap.candidates(sources))  # the lines' one batch's
    for options in (GREEDY, BEAM):
        for result in translator.translate(DEMO_SENTENCES, options):
            assert set(tokenizer.convert_tokens_to_ids(result.hypotheses[0].tokens)) <= candidates


def test_with_a_map_of_every_token_int8_decodes_as_without(mapped_model, tmp_path):
    tokenizer = load_tokenizer(str(mapped_model))
    (tmp_path / VMAP_NAME).write_text("\t" + " ".join(tokenizer.convert_ids_to_tokens(range(len(tokenizer)))) + "\n")
    translator = load_translator(str(mapped_model), EngineOptions(int8=True, vmap=str(tmp_path / VMAP_NAME)))
    for options in (GREEDY, BEAM):
        without = DecodeOptions(num_beams=options.num_beams, split_sentences=False)
        assert [r.hypotheses[0].tokens for r in translator.translate(DEMO_SENTENCES, options)] == [
            r.hypotheses[0].tokens for r in translator.translate(DEMO_SENTENCES, without)
        ]


def test_the_torch_engine_chooses_the_tokens_ctranslate2_chooses(mapped_model, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_vanilla_transformer.interop.ctranslate2 import export_ctranslate2

    exported = export_ctranslate2(mapped_model, tmp_path / "ct2")
    assert (exported / VMAP_NAME).read_text() == (mapped_model / VMAP_NAME).read_text()
    lines = [pair[0] for pair in short_pairs(200)[100:]]
    torch_engine = load_translator(str(mapped_model), EngineOptions(device="cpu"))
    ct2_engine = load_translator(str(exported), EngineOptions(backend="ctranslate2", device="cpu"))
    options = dataclasses.replace(GREEDY, batch_size=2)  # the candidates of two sentences at a time
    ours, theirs = (engine.translate(lines, options, scores=False) for engine in (torch_engine, ct2_engine))
    assert [r.hypotheses[0].tokens for r in ours] == [r.hypotheses[0].tokens for r in theirs]
    everything = DecodeOptions(num_beams=1, split_sentences=False, batch_size=2)
    assert [r.hypotheses[0].tokens for r in ours] != [
        r.hypotheses[0].tokens for r in torch_engine.translate(lines, everything, scores=False)
    ]  # the map changed some translations: the comparison above is of the maps' searches


@pytest.mark.parametrize("options", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_the_static_cache_decodes_with_a_map_as_the_dynamic_cache(mapped_model, options):
    dynamic, static = (
        load_translator(str(mapped_model), EngineOptions(device="cpu", compile=compile))
        for compile in ("never", "always")
    )
    assert static.backend.static_cache and not dynamic.backend.static_cache
    lines = [pair[0] for pair in short_pairs(60)[30:]]
    ours, theirs = (engine.translate(lines, options) for engine in (static, dynamic))
    assert [r.hypotheses[0].tokens for r in ours] == [r.hypotheses[0].tokens for r in theirs]
    assert [r.hypotheses[0].score for r in ours] == pytest.approx([r.hypotheses[0].score for r in theirs], abs=1e-4)


def test_misuses_are_refused_in_one_line(mapped_model, tmp_path):
    translator = load_translator(str(tiny_translator_dir()), EngineOptions(device="cpu"))
    with pytest.raises(InputError, match=f"--use_vmap: no vocabulary map .*has no {VMAP_NAME}"):
        translator.translate(["Hallo"], GREEDY)
    pytest.importorskip("ctranslate2")
    with pytest.raises(InputError, match="CTranslate2 reads the vmap.txt of its model folder"):
        load_translator(str(mapped_model), EngineOptions(backend="ctranslate2", vmap=str(mapped_model / VMAP_NAME)))


def test_the_command_writes_a_models_map_and_never_replaces_one_unasked(tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(tiny_translator_dir(), folder)
    corpus = write_jsonl(tmp_path / "train.jsonl", short_pairs(300))
    command = ["vocabulary-map", "--model", str(folder), "--train_file", corpus, "--best", "3"]
    assert cli.main(command) == 2  # the tiny model's folder does not record its languages
    assert (
        "does not say which languages it translates: give --source_lang and --target_lang" in capsys.readouterr().err
    )
    command += ["--source_lang", "de", "--target_lang", "en"]
    assert cli.main(command) == 0
    assert f"{folder / VMAP_NAME}: the 3 most probable target tokens" in capsys.readouterr().out
    written = (folder / VMAP_NAME).read_text()
    assert all(len(line.split("\t")[1].split()) <= 3 for line in written.splitlines()[1:])
    VocabularyMap.read(folder / VMAP_NAME, load_tokenizer(str(folder)))
    assert cli.main(command) == 2
    assert f"{folder / VMAP_NAME} exists: pass --overwrite to replace it." in capsys.readouterr().err
    assert (folder / VMAP_NAME).read_text() == written
    assert cli.main([*command, "--overwrite", "--best", "1"]) == 0
    assert (folder / VMAP_NAME).read_text() != written
    config = json.loads((folder / "generation_config.json").read_text())
    config.update(trained_on={"source_lang": "de", "target_lang": "en"}, _from_model_config=False)
    (folder / "generation_config.json").write_text(json.dumps(config))
    reversed_map = [*command[:7], "--source_lang", "en", "--target_lang", "de", "--overwrite"]
    assert cli.main(reversed_map) == 2
    assert "--source_lang en: --model" in capsys.readouterr().err


def test_a_large_corpus_is_read_evenly_spread_and_an_empty_one_is_refused(tmp_path, monkeypatch):
    from hf_vanilla_transformer.data import vocabulary_map

    tokenizer = load_tokenizer(str(tiny_translator_dir()))
    monkeypatch.setattr(vocabulary_map, "MAX_PAIRS", 300)
    pairs = short_pairs(1000)
    assert write_vocabulary_map(tmp_path / VMAP_NAME, pairs, tokenizer)["pairs"] == 250  # every 4th
    assert write_vocabulary_map(tmp_path / VMAP_NAME, pairs[:300], tokenizer)["pairs"] == 300
    with pytest.raises(InputError, match="A vocabulary map needs sentence pairs: the corpus has none."):
        write_vocabulary_map(tmp_path / VMAP_NAME, [], tokenizer)


def test_a_marianmt_model_decodes_with_a_map_as_without_when_every_token_is_a_candidate(mapped_model, tmp_path):
    from hf_vanilla_transformer.interop.marian import export_marian

    marian = export_marian(mapped_model, tmp_path / "marian")  # MarianMTModel: its final_logits_bias too
    tokenizer = load_tokenizer(str(marian))
    (marian / VMAP_NAME).write_text("\t" + " ".join(tokenizer.convert_ids_to_tokens(range(len(tokenizer)))) + "\n")
    translator = load_translator(str(marian), EngineOptions(device="cpu"))
    for options in (GREEDY, BEAM):
        without = DecodeOptions(num_beams=options.num_beams, split_sentences=False)
        assert [r.hypotheses[0].tokens for r in translator.translate(DEMO_SENTENCES, options)] == [
            r.hypotheses[0].tokens for r in translator.translate(DEMO_SENTENCES, without)
        ]


def test_a_model_object_without_a_folder_takes_no_map_from_the_working_directory(tmp_path, monkeypatch):
    from transformers import AutoModelForSeq2SeqLM

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tiny_translator_dir())
    loaded.name_or_path = ""
    (tmp_path / VMAP_NAME).write_text("\t▁Tom\n")
    monkeypatch.chdir(tmp_path)
    translator = load_translator(
        loaded, EngineOptions(device="cpu"), tokenizer=load_tokenizer(str(tiny_translator_dir()))
    )
    assert translator.backend.vmap_file is None


def test_a_folders_map_is_read_only_for_a_call_that_uses_it(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_translator_dir(), folder)
    (folder / VMAP_NAME).write_text(
        "\t▁Tom\n▁Tom\t▁Tom Zebra\n"
    )  # a map CTranslate2 would read, mapping Zebra to <unk>
    translator = load_translator(str(folder), EngineOptions(device="cpu"))
    assert translator.translate(["Tom ist hier."], DecodeOptions(num_beams=1))[0].hypotheses[0].text
    with pytest.raises(InputError, match="line 2: the target token 'Zebra' is not in the vocabulary"):
        translator.translate(["Tom ist hier."], GREEDY)
    with pytest.raises(InputError, match=f"--vmap {tmp_path / 'none.txt'}: no such file"):
        load_translator(str(folder), EngineOptions(device="cpu", vmap=str(tmp_path / "none.txt")))
