"""Glossaries: the file format and its refusals, which terms apply to a sentence, and the search's guarantee: every
applicable target term in every hypothesis (greedy, beam, n-best, vocabulary map), lines without a term decoded exactly
as without a glossary, a term that cannot fit said so in the result."""

import dataclasses
import json
import shutil

import pytest

from hf_vanilla_transformer.data.glossary import Glossary
from hf_vanilla_transformer.data.vocabulary_map import VMAP_NAME, write_vocabulary_map
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.translate.options import DecodeOptions, EngineOptions
from hf_vanilla_transformer.translate.translator import load_translator
from tests.helpers import short_pairs, tiny_translator_dir


# ------------------------------------------------------------------------------------------------ the file format


def test_a_file_with_or_without_header_gives_its_terms_and_identical_repeats_are_one(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("source\ttarget\nBahnhof\tstation\n\nC++\tC++\nBahnhof\tstation\n", encoding="utf-8")
    assert Glossary.read(path).terms == (("Bahnhof", "station"), ("C++", "C++"))
    path.write_text("Bahnhof\tstation\n", encoding="utf-8")
    assert Glossary.read(path) == Glossary.of_pairs([("Bahnhof", "station")])
    assert Glossary.read(path) != Glossary.read(path, ignore_case=True)


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"Bahnhof station\n", "terms.tsv, line 1: expected a source term, one tab and a target term; got 1 column"),
        (b"Bahnhof\tstation\tgare\n", "line 1: expected a source term, one tab and a target term; got 3 column"),
        (b"Haus\thouse\n\t station\n", "terms.tsv, line 2: an empty source term"),
        (b"Haus\t  \n", "terms.tsv, line 1: an empty target term"),
        (b"Haus\thouse\nHaus\thome\n", "line 2: 'Haus' is given the target 'home', and 'house' at "),
        ("Grüße\tregards\n".encode("latin-1"), "terms.tsv: not UTF-8 text"),
        (b"source\ttarget\n\n", "terms.tsv: no terms in it"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_line(tmp_path, content, expected):
    path = tmp_path / "terms.tsv"
    path.write_bytes(content)
    with pytest.raises(InputError, match="^.*" + expected.replace("+", r"\+").replace("(", r"\(")):
        Glossary.read(path)


def test_duplicates_that_differ_in_case_disagree_only_when_case_is_ignored(tmp_path):
    pairs = [("Bank", "bank"), ("bank", "bench")]
    assert len(Glossary.of_pairs(pairs)) == 2
    with pytest.raises(
        InputError, match=r"request\[1\]: 'bank' is given the target 'bench', and 'bank' at request\[0\]"
    ):
        Glossary.of_pairs(pairs, ignore_case=True, name="request")


# ------------------------------------------------------------------------------------------------- the matching


def test_terms_apply_as_whole_words_in_the_files_case_or_in_any():
    glossary = Glossary.of_pairs([("Bahn", "railway"), ("Tom", "Tom")])
    assert glossary.targets("Tom fährt mit der Bahn.") == ["Tom", "railway"]
    assert glossary.targets("Der Bahnhof, tomorrow, Atom.") == []  # parts of words
    assert glossary.targets("die bahn") == []
    assert Glossary.of_pairs([("Bahn", "railway")], ignore_case=True).targets("DIE BAHN") == ["railway"]


def test_the_longest_of_overlapping_or_nested_terms_wins():
    glossary = Glossary.of_pairs(
        [("New York", "Nueva York"), ("York", "Yorck"), ("York City Hall", "el ayuntamiento"), ("City", "ciudad")]
    )
    assert glossary.targets("in New York today") == ["Nueva York"]  # nested: York inside New York
    assert glossary.targets("New York City Hall") == ["el ayuntamiento"]  # overlapping: the longer one
    assert glossary.targets("York and New York, City") == ["Yorck", "Nueva York", "ciudad"]


# ------------------------------------------------------------------------------------------------ the guarantee


@pytest.fixture(scope="module")
def translator():
    return load_translator(str(tiny_translator_dir()), EngineOptions(device="cpu"))


LINES = [pair[0] for pair in short_pairs(200)[120:160]]


def glossary_for(translator) -> Glossary:
    """Terms for some source words of LINES, whose targets the model's vocabulary writes (some of several tokens)."""
    words = sorted({w.strip(".,?!") for line in LINES[::2] for w in line.split() if len(w) > 3})[:12]
    targets = ["house", "railway station", "Tom", "blue", "always here", "yes", "music", "tree", "door", "red", "go"]
    targets.append("at the end")
    return Glossary.of_pairs(list(zip(words, targets)), name="test glossary")


@pytest.mark.parametrize("beams, nbest", [(1, 1), (4, 1), (4, 3)], ids=["greedy", "beam", "nbest"])
def test_every_hypothesis_holds_every_applicable_term(translator, beams, nbest):
    glossary = glossary_for(translator)
    options = DecodeOptions(num_beams=beams, nbest=nbest, split_sentences=False, glossary=glossary)
    results = translator.translate(LINES, options)
    with_terms = [(line, r) for line, r in zip(LINES, results) if glossary.targets(line)]
    assert len(with_terms) >= 10
    for line, result in with_terms:
        assert len(result.hypotheses) == nbest
        for hypothesis in result.hypotheses:
            for target in glossary.targets(line):
                assert target in hypothesis.text, (line, target, hypothesis.text)
            assert hypothesis.missing_terms == []


@pytest.mark.parametrize("beams", [1, 4])
def test_lines_without_a_term_decode_exactly_as_without_a_glossary(translator, beams):
    glossary = glossary_for(translator)
    plain = DecodeOptions(num_beams=beams, split_sentences=False, max_tokens=200)  # term lines share their batches
    without, with_ = (
        translator.translate(LINES, options) for options in (plain, dataclasses.replace(plain, glossary=glossary))
    )
    untouched = [i for i, line in enumerate(LINES) if not glossary.targets(line)]
    assert len(untouched) >= 10
    for i in untouched:
        assert with_[i].hypotheses[0].tokens == without[i].hypotheses[0].tokens
        assert with_[i].hypotheses[0].token_scores == without[i].hypotheses[0].token_scores


@pytest.mark.slow
def test_with_a_vocabulary_map_the_terms_tokens_are_candidates(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_translator_dir(), folder)
    engine = load_translator(str(folder), EngineOptions(device="cpu"))
    write_vocabulary_map(folder / VMAP_NAME, short_pairs(), engine.tokenizer, best=2, frequent=3)
    mapped = load_translator(str(folder), EngineOptions(device="cpu"))
    glossary = glossary_for(mapped)
    results = mapped.translate(
        LINES, DecodeOptions(num_beams=4, split_sentences=False, use_vmap=True, glossary=glossary)
    )
    for line, result in zip(LINES, results):
        assert all(target in result.hypotheses[0].text for target in glossary.targets(line))


def test_a_term_that_cannot_fit_is_said_in_the_result_and_the_batch_goes_on(translator):
    glossary = Glossary.of_pairs([(LINES[0].split()[0], "railway station and always here")])
    options = DecodeOptions(num_beams=4, split_sentences=False, glossary=glossary, max_len_a=0, max_len_b=3)
    first, second = translator.translate(LINES[:2], options)
    assert first.hypotheses[0].missing_terms == ["railway station and always here"]
    assert second.hypotheses[0].missing_terms == []


def test_misuses_are_refused_in_one_line(translator, tmp_path):
    with pytest.raises(InputError, match="--glossary places its terms by beam search: drop --do_sample"):
        DecodeOptions(glossary=Glossary.of_pairs([("a", "b")]), do_sample=True).check()
    with pytest.raises(InputError, match=f"--glossary {tmp_path / 'none.tsv'}: no such file"):
        DecodeOptions(glossary=str(tmp_path / "none.tsv")).check()
    long = Glossary.of_pairs([("Haus", " ".join(["house"] * 600))], name="long.tsv")
    with pytest.raises(
        InputError,
        match=r"long.tsv: the target term 'house house [house ]*\.\.\.' is \d+ tokens, as long as or longer",
    ):
        translator.translate(["Haus"], DecodeOptions(glossary=long))
    unknown = Glossary.of_pairs([("Haus", "Ωμέγα")], name="greek.tsv")
    with pytest.raises(InputError, match="greek.tsv: the target term 'Ωμέγα' has characters that the model's vocab"):
        translator.translate(["Haus"], DecodeOptions(glossary=unknown))


def test_the_ctranslate2_engine_refuses_a_glossary_naming_the_pytorch_engine(tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_vanilla_transformer.interop.ctranslate2 import export_ctranslate2

    folder = export_ctranslate2(tiny_translator_dir(), tmp_path / "ct2")
    engine = load_translator(str(folder), EngineOptions(backend="ctranslate2", device="cpu"))
    with pytest.raises(InputError, match="--glossary needs the PyTorch engine"):
        engine.translate(["Haus"], DecodeOptions(glossary=Glossary.of_pairs([("Haus", "house")])))


def test_the_command_writes_missing_terms_in_jsonl_and_refuses_a_bad_file_in_one_line(tmp_path, capsys, caplog):
    from hf_vanilla_transformer import cli

    line = LINES[0]
    (tmp_path / "in.de").write_text(f"{line}\n{LINES[1]}\n", encoding="utf-8")
    (tmp_path / "terms.tsv").write_text(f"source\ttarget\n{line.split()[0]}\trailway station\n", encoding="utf-8")
    command = ["translate", "--model", str(tiny_translator_dir()), str(tmp_path / "in.de"), "--format", "jsonl"]
    command += ["--glossary", str(tmp_path / "terms.tsv"), "--no-split_sentences"]
    assert cli.main([*command, "--max_len_a", "0", "--max_len_b", "3", "--quiet"]) == 0
    records = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert (
        "1 line(s) lack glossary terms that did not fit within the length limit (jsonl: missing_terms)" in caplog.text
    )
    assert records[0]["hypotheses"][0]["missing_terms"] == ["railway station"]
    assert "missing_terms" not in records[1]["hypotheses"][0]
    assert cli.main([*command, "--quiet"]) == 0
    records = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert "railway station" in records[0]["hypotheses"][0]["text"]
    (tmp_path / "terms.tsv").write_text("Haus\thouse\tHaus\n", encoding="utf-8")
    assert cli.main(command) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("terms.tsv, line 1: expected a source term, one tab and a target term; got 3 column(s).")


def test_a_term_that_another_holds_is_placed_once(translator):
    line = next(line for line in LINES if len(line.split()) > 3)
    first, second = line.split()[:2]
    glossary = Glossary.of_pairs([(first, "railway station"), (second, "station")])
    hypothesis = translator.translate([line], DecodeOptions(num_beams=4, split_sentences=False, glossary=glossary))[0]
    text = hypothesis.hypotheses[0].text
    assert "railway station" in text and text.count("station") == 1, text
