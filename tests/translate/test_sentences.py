"""Sentence splitting, rule by rule for German and English; pieces that fit, with their spacing; and the page's
JavaScript splitter (translate.mjs under Node) agreeing with this one."""

import json

import pytest

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.translate.sentences import RULES, join, segments, split_sentences, split_to_fit
from tests.helpers import run_translate_mjs, tiny_tokenizer


# (language, text, its sentences), grouped by the rule they show (see translate/sentences.py).
CASES = {
    "terminals": [
        ("de", "Wo ist Tom? Er ist zu Hause! Gut. Ich weiß nicht… Vielleicht.", 5),
        ("en", "Really?! Yes... I think so. OK.", 4),
        ("ja", "「一つ。」二つ。三つ！", ["「一つ。」", "二つ。", "三つ！"]),
    ],
    "quotes and brackets": [
        ("de", "Er sagte: „Ich komme morgen.“ Dann ging er.", ["Er sagte: „Ich komme morgen.“", "Dann ging er."]),
        ("de", "Sie rief »Halt!« Alle blieben stehen.", ["Sie rief »Halt!«", "Alle blieben stehen."]),
        ("en", '"Are you sure?" she asked. "Yes." He left.', ['"Are you sure?" she asked.', '"Yes."', "He left."]),
        ("de", "Das stimmt. (Ich war dabei.) Wirklich.", ["Das stimmt.", "(Ich war dabei.)", "Wirklich."]),
        ("en", "It rained (a lot). Then it stopped.", ["It rained (a lot).", "Then it stopped."]),
    ],
    "lowercase next": [
        ("de", "Äpfel, Birnen usw. sind Obst. Das weiß jeder.", ["Äpfel, Birnen usw. sind Obst.", "Das weiß jeder."]),
        ("de", "„Kommst du?“ fragte sie. „Ja.“", ["„Kommst du?“ fragte sie.", "„Ja.“"]),
        ("en", "Is it big? not really. Fine.", ["Is it big? not really.", "Fine."]),
    ],
    "abbreviations": [
        ("de", "Dr. Müller und Prof. Schmidt kommen. Fr. Meier bzw. Hr. Schulz auch.", 2),
        (
            "de",
            "Das kostet ca. 5 Euro, vgl. Seite 3. Mehr nicht.",
            ["Das kostet ca. 5 Euro, vgl. Seite 3.", "Mehr nicht."],
        ),
        ("de", "Prof. Dr. med. Meier kommt. Gut.", ["Prof. Dr. med. Meier kommt.", "Gut."]),
        ("en", "Mr. Smith met Mrs. Jones and Dr. Brown. They talked.", 2),
        ("en", "It works, cf. Smith vs. Jones. Done.", 2),
    ],
    "abbreviations that end sentences": [
        (
            "de",
            "Wir kauften Äpfel, Birnen usw. Dann gingen wir.",
            ["Wir kauften Äpfel, Birnen usw.", "Dann gingen wir."],
        ),
        ("en", "We bought apples, pears etc. Then we left.", ["We bought apples, pears etc.", "Then we left."]),
        ("de", "Ich heiße Jan. Und du?", ["Ich heiße Jan.", "Und du?"]),
    ],
    "abbreviations before numbers": [
        ("de", "Siehe Nr. 9 und Art. 3 GG. Gut.", ["Siehe Nr. 9 und Art. 3 GG.", "Gut."]),
        ("de", "Das ist eine neue Art. Sie lebt im Wald.", ["Das ist eine neue Art.", "Sie lebt im Wald."]),
        ("en", "See No. 7 and Fig. 2 on Jan. 5. Then go.", ["See No. 7 and Fig. 2 on Jan. 5.", "Then go."]),
    ],
    "single letters": [
        ("de", "Das ist z. B. ein Test. Gut.", ["Das ist z. B. ein Test.", "Gut."]),
        ("de", "Das gilt d. h. Tom auch. Siehe S. 5. Ende.", ["Das gilt d. h. Tom auch.", "Siehe S. 5. Ende."]),
        ("en", "J. R. R. Tolkien wrote it. Read it.", ["J. R. R. Tolkien wrote it.", "Read it."]),
    ],
    "periods inside": [
        (
            "de",
            "Das ist z.B. Tom. Er ist Dipl.-Ing. Meier sagt das.",
            ["Das ist z.B. Tom.", "Er ist Dipl.-Ing. Meier sagt das."],
        ),
        ("en", "The U.S. Army came, e.g. Tom. Then peace.", ["The U.S. Army came, e.g. Tom.", "Then peace."]),
    ],
    "ordinals": [
        ("de", "Er kommt am 3. Oktober. Im 19. Jahrhundert war das anders.", 2),
        ("de", "Das war der 2. Weltkrieg. Zum 1. Mal.", ["Das war der 2. Weltkrieg.", "Zum 1. Mal."]),
        ("de", "Er wurde 1990. Dann zog er um.", ["Er wurde 1990.", "Dann zog er um."]),  # years are not ordinals
        ("de", "Tom ist 30. (Das stimmt.) Ja.", ["Tom ist 30.", "(Das stimmt.)", "Ja."]),
        ("de", "Tom ist 30. Er ist alt. Traue niemandem über 20. Das ist klar.", 4),
        ("de", "Tom ist 30. Maria ist 25.", ["Tom ist 30. Maria ist 25."]),  # a misread: a name after a number
        ("en", "It is 30. She is 25. I was born in 1990. Then I moved.", 4),
        (None, "Er ist 3. Dann geht er.", ["Er ist 3.", "Dann geht er."]),
    ],
    "numbers": [
        ("de", "Das kostet 3.50 Euro. Es sind 1.000 Leute. Um 8.30 Uhr.", 3),
        ("en", "It cost $3.50, i.e. a lot. Visit www.example.com today. Fine.", 3),
    ],
}


def _cases():
    for rule, cases in CASES.items():
        for language, text, expected in cases:
            yield pytest.param(language, text, expected, id=f"{rule}-{language}-{text[:20]}")


@pytest.mark.parametrize("language, text, expected", list(_cases()))
def test_sentence_rules(language, text, expected):
    sentences = split_sentences(text, language)
    if isinstance(expected, int):
        assert len(sentences) == expected, sentences
    else:
        assert sentences == expected
    assert " ".join(sentences) == " ".join(text.split()) or language == "ja"


def test_language_tags_and_blank_text():
    assert (
        split_sentences("Am 3. Mai. Gut.", "de-CH")
        == split_sentences("Am 3. Mai. Gut.", "de")
        == ["Am 3. Mai.", "Gut."]
    )
    assert split_sentences("Am 3. Mai. Gut.", "en") == ["Am 3.", "Mai.", "Gut."]
    assert split_sentences("   ") == [] and split_sentences("") == []
    assert split_sentences("  Eins.   Zwei.  ") == ["Eins.", "Zwei."]


def test_pieces_that_do_not_fit_are_cut_at_clauses_then_words_then_characters():
    def fits(piece):
        return len(piece) <= 12

    def pieces(text, **kwargs):
        return [text[i:j] for i, j in split_to_fit(text, fits, **kwargs)]

    assert pieces("Ja, nein; gut: sehr gut – oder?") == ["Ja, nein;", "gut:", "sehr gut", "– oder?"]
    assert pieces("eins zwei drei vier fünf") == ["eins zwei", "drei vier", "fünf"]
    assert pieces("Donaudampfschifffahrt ok.") == ["Donaudampfsc", "hifffahrt", "ok."]
    assert pieces("Ja. Nein! Gut? Sehr gut.") == ["Ja. Nein!", "Gut?", "Sehr gut."]  # a line as one sentence
    cjk = "「一つ。」二つ。三つ！"
    assert [cjk[i:j] for i, j in split_to_fit(cjk, lambda piece: len(piece) <= 8)] == ["「一つ。」二つ。", "三つ！"]


def test_segments_keep_the_spacing_between_pieces_and_count_the_sentences_cut():
    line = "  Eins, zwei.\tDrei  vier fünf sechs sieben.  Acht. "
    pieces, too_long = segments(line, lambda piece: len(piece) <= 12, "de")
    assert pieces == [
        ("", "Eins, zwei."),
        ("\t", "Drei  vier"),
        (" ", "fünf sechs"),
        (" ", "sieben."),
        ("  ", "Acht."),
    ]
    assert too_long == 1
    assert join([s for s, _ in pieces], ["One, two.", "Three four", "five six", "seven.", "Eight."]) == (
        "One, two.\tThree four five six seven.  Eight."
    )
    assert join(["", ""], ["一", "二"]) == "一 二"  # nothing between them: a space
    whole, too_long = segments(line, lambda piece: True, "de", split=False)
    assert whole == [("", line.strip())] and too_long == 0
    assert segments("   ", lambda piece: True) == ([], 0)


def test_rules_are_plain_data_for_the_page():
    assert json.loads(json.dumps(RULES)) == RULES
    assert set(RULES["abbreviations"]).isdisjoint(RULES["number_abbreviations"])


def test_the_test_split_is_mostly_one_sentence_per_line():
    """The bundled corpus has one sentence per line, a few lines of two or three (Tatoeba): the splitter must find
    those and not cut the others."""
    lines = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "test.jsonl").open(encoding="utf-8")]
    german = [len(split_sentences(pair["de"], "de")) for pair in lines]
    english = [len(split_sentences(pair["en"], "en")) for pair in lines]
    assert sum(n == 1 for n in german) / len(lines) > 0.9
    agree = sum(g == e for g, e in zip(german, english)) / len(lines)
    assert agree > 0.97, agree


@pytest.mark.slow
def test_the_pages_javascript_splits_as_this_module(tmp_path):
    """translate.mjs (the no-server page) against this module, on every rule case and on paragraphs of the test
    split in both languages, whole and cut to pieces of at most 12 tokens."""
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    pairs = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "test.jsonl").open(encoding="utf-8")]
    texts = {
        language: [
            text for language_, text, _ in (c for cases in CASES.values() for c in cases) if language_ == language
        ]
        for language in ("de", "en", None, "ja")
    }
    for language in ("de", "en"):
        sentences = [pair[language] for pair in pairs]
        texts[language] += [" ".join(sentences[i : i + 25]) for i in range(0, len(sentences), 25)]
    texts[None] += [
        "  Eins,  zwei;\tdrei – vier — fünf: sechs.  ",
        "Donaudampfschifffahrtsgesellschaft!",
        "𝐀. 𝐁𝐜. Ünd.",
        "",
    ]
    for language, group in texts.items():
        for limit, split in ((None, True), (12, True), (12, False)):
            settings = dict(rules=RULES, source_lang=language, max_source_tokens=limit, split_sentences=split)
            answer = run_translate_mjs({"model": str(tmp_path / "tokenizer"), "texts": group, "segments": settings})

            def fits(piece, limit=limit):
                return limit is None or len(tokenizer(piece)["input_ids"]) <= limit

            expected = [segments(text, fits, language, split) for text in group]
            assert [[[list(p) for p in pieces], n] for pieces, n in expected] == answer["segments"], (language, limit)
