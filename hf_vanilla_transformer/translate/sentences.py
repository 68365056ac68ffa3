"""Sentences and pieces that a translation model can take: a line is split into sentences, and a sentence longer than
the model was trained on into clauses, then words, then characters.

Sentence rules (`RULES`, German and English at least; the no-server page runs the same rules from `translate.mjs`,
and a test checks that both split alike). A sentence ends after a run of `.`, `!`, `?` or `…` and any closing quotes
and brackets right after it, where whitespace follows (after `。！？` no whitespace is needed). Such an end is not one:
1. before a lowercase letter (after any opening quotes or brackets): "Birnen usw. sind Obst", "„Wirklich?“ fragte er";
2. after a single `.` with no closing quote or bracket, when the word before it is
   a. an abbreviation that does not end sentences (`ABBREVIATIONS`: "Dr.", "Prof.", "bzw.", "vgl.", "Mr.");
      abbreviations that often do ("usw.", "etc.", "v. Chr.") are left out and end a sentence before a capital;
   b. an abbreviation that stands before numbers (`NUMBER_ABBREVIATIONS`: "Nr.", "Art.", "No.", "Jan.") and a digit
      follows;
   c. a single letter: initials and spaced abbreviations ("J. R. R. Tolkien", "z. B.", "d. h.", "S. 5"), so that
      "Vitamin C. Das" stays one sentence;
   d. letters with periods inside ("z.B.", "U.S.", "e.g.", "Dipl.-Ing.");
   e. a number of 1 to 3 digits, in a language that writes ordinals with a period (`ORDINAL_LANGUAGES`, German among
      them), followed by a word that is not one of the pronouns, articles and adverbs that begin sentences
      (`SENTENCE_STARTERS`): "am 3. Oktober", "im 19. Jahrhundert", but "Tom ist 30. Er ..." (and, a misread, "Tom
      ist 30. Maria ...": one sentence); in English "It is 30. She is 25." is two sentences.
Decimal numbers ("3.50", "1.000"), times and addresses have no whitespace after their periods and are never split.
A misread stays inside one line: each input line is split on its own, and its translation is one output line.

A sentence longer than the model takes is cut at clause punctuation (after `,`, `;`, `:`, before a spaced dash), then
between words, then between characters, each piece the longest that fits (a line taken as one sentence is first cut
between sentences). Pieces are slices of the line: the
whitespace between two pieces goes between their translations.
"""

import re
import unicodedata

from ..errors import InputError


TERMINALS = ".!?…"
CJK_TERMINALS = "。！？"  # end a sentence without whitespace after them
CLOSERS = "\"'”’“‘»«›‹)]}」』）"  # German closes with “ and ‘; French quotes go both ways
OPENERS = "\"'“‘„‚«»‹›([{「『（¿¡"
# Spelled out, so that Python and JavaScript agree (their \\s differ on a few control characters).
WHITESPACE = " \t\n\r\f\v\u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
CLAUSE_MARKS = ",;:"
DASHES = "–—"
ORDINAL_LANGUAGES = "de da nb nn no fi is fo cs sk sl hr sr bs hu lv et".split()
ABBREVIATIONS = (
    # German (Dr, Prof, St below)
    "Abt Adr allg Anm Bhf bspw bzgl bzw ca dgl ebd eigtl einschl evtl Fa Fam Fr Frl geb gegr ggf Hbf Hr Hrn Hrsg "
    "inkl insb Ing jun kath Kfm lt Mio Mrd mtl od Pkt rd sen sog Str tägl Tel verh vgl zzgl zzt "
    "med phil jur rer nat theol habil "
    # English, and both
    "Mr Mrs Ms Messrs Mme Mlle Dr Prof Sr Jr St Mt Rev Col Capt Lt Sgt Gov Sen Rep Hon Ave Dept Univ Co approx cf vs"
).split()
# Months among them: "Jan." is also a name that ends sentences ("Ich heiße Jan. Und du?").
SENTENCE_STARTERS = (
    "Der Die Das Den Dem Des Ein Eine Einen Einem Einer Ich Du Er Sie Es Wir Ihr Man Mein Meine Dein Deine Sein "
    "Seine Ihre Unser Unsere Dies Diese Dieser Dieses Jeder Jede Alle Alles Kein Keine Nichts Niemand Und Aber Oder "
    "Doch Denn Also Dann Danach Deshalb Trotzdem Jetzt Heute Hier Dort Da So Auch Noch Nur Schon Nicht Ja Nein Bitte "
    "Danke Wie Was Wo Wer Warum Wann Wohin Woher Welche Welcher Im Am In An Auf Aus Mit Bei Nach Von Zu Zum Zur Für "
    "Über Unter Vor Seit Bis Ob Wenn Als Weil Dass Mehr"
).split()
NUMBER_ABBREVIATIONS = (
    "Nr Nrn No Nos Art Abs Bd Kap Ziff Abb Tab Fig fig p pp vol Vol ch "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Okt Nov Dec Dez"
).split()

# Everything the page needs to split as this module does (`translate.mjs` reads it from the page's demo.json).
RULES = dict(
    terminals=TERMINALS,
    cjk_terminals=CJK_TERMINALS,
    closers=CLOSERS,
    openers=OPENERS,
    whitespace=WHITESPACE,
    clause_marks=CLAUSE_MARKS,
    dashes=DASHES,
    ordinal_languages=ORDINAL_LANGUAGES,
    abbreviations=ABBREVIATIONS,
    number_abbreviations=NUMBER_ABBREVIATIONS,
    sentence_starters=SENTENCE_STARTERS,
)


def _class(characters: str) -> str:
    return "[" + "".join(re.escape(c) for c in characters) + "]"


_WS, _NOT_WS = _class(WHITESPACE), "[^" + _class(WHITESPACE)[1:]
_ENDS = re.compile(f"({_class(TERMINALS + CJK_TERMINALS)}+)({_class(CLOSERS)}*)({_WS}*)")
_CLAUSES = re.compile(f"{_class(CLAUSE_MARKS)}{_class(CLOSERS)}*{_WS}+|{_WS}+(?={_class(DASHES)}(?:{_WS}|\\Z))")
_WORDS = re.compile(f"{_WS}*{_NOT_WS}+{_WS}*")
_ABBREVIATIONS, _NUMBER_ABBREVIATIONS = frozenset(ABBREVIATIONS), frozenset(NUMBER_ABBREVIATIONS)
_STARTERS = frozenset(SENTENCE_STARTERS)
_NEXT_WORD = re.compile(f"{_NOT_WS}*?(?={_WS}|{_class(TERMINALS + CLAUSE_MARKS)}|\\Z)")


def _is_lower(character: str) -> bool:
    return unicodedata.category(character) == "Ll"


def _is_letter(character: str) -> bool:
    return unicodedata.category(character).startswith("L")


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """`start`, `end` moved inwards past whitespace."""
    while start < end and text[start] in WHITESPACE:
        start += 1
    while end > start and text[end - 1] in WHITESPACE:
        end -= 1
    return start, end


def _ends_sentence(text: str, end: re.Match, language: str | None) -> bool:
    run, closers, space = end.groups()
    following = end.end()
    while following < len(text) and text[following] in OPENERS:
        following += 1
    if following < len(text) and _is_lower(text[following]):
        return False  # rule 1
    if run != "." or closers:
        return True
    word_start = end.start()
    while word_start > 0 and text[word_start - 1] not in WHITESPACE:
        word_start -= 1
    while word_start < end.start() and text[word_start] in OPENERS:
        word_start += 1
    word, after = text[word_start : end.start()], text[end.end()]
    if word in _ABBREVIATIONS or (word in _NUMBER_ABBREVIATIONS and after in "0123456789"):
        return False  # rules 2a, 2b
    if (len(word) == 1 and _is_letter(word)) or ("." in word and not any(c in "0123456789" for c in word)):
        return False  # rules 2c, 2d
    if language not in ORDINAL_LANGUAGES or not re.fullmatch("[0-9]{1,3}", word) or not _is_letter(after):
        return True
    return _NEXT_WORD.match(text, end.end()).group() in _STARTERS  # rule 2e


def sentence_spans(text: str, language: str | None = None) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, without the whitespace around it (see the module's rules).

    `language`: an ISO 639-1 code such as "de" or "en" (or a tag such as "de-CH"); None applies the rules common to
    all languages (numbers before a period end sentences).
    """
    language = language.split("-")[0].split("_")[0].lower() if language else None
    spans, start = [], 0
    for end in _ENDS.finditer(text):
        if end.end() == len(text):
            break
        if not end.group(3) and end.group(1)[-1] not in CJK_TERMINALS:
            continue  # no whitespace after it: "3.50", "Hallo.Du", "www.example.com"
        if _ends_sentence(text, end, language):
            spans.append((start, end.end() - len(end.group(3))))
            start = end.end()
    spans.append((start, len(text)))
    return [span for span in (_strip(text, *span) for span in spans) if span[0] < span[1]]


def split_sentences(text: str, language: str | None = None) -> list[str]:
    """The sentences of `text` (see `sentence_spans`)."""
    return [text[start:end] for start, end in sentence_spans(text, language)]


# Each level cuts a text into slices that concatenate to it: sentences, clauses, words, characters.
LEVELS = (
    lambda text, language: _cut(text, [start for start, _ in sentence_spans(text, language)[1:]]),
    lambda text, language: _cut(text, [match.end() for match in _CLAUSES.finditer(text)]),
    lambda text, language: _WORDS.findall(text),
    lambda text, language: list(text),
)


def _cut(text: str, ends: list[int]) -> list[str]:
    return [text[i:j] for i, j in zip([0, *ends], [*ends, len(text)]) if i < j]


def split_to_fit(text: str, fits, language: str | None = None, level: int = 0) -> list[tuple[int, int]]:
    """(start, end) of the pieces of `text` that each `fits` (a test on the piece's text), without whitespace around
    them: the whole text if it fits, else as many sentences as fit, then clauses, then words, then characters for a
    word too long by itself. Each piece is the longest that fits, found by bisection (a few `fits` calls per
    piece)."""
    start, end = _strip(text, 0, len(text))
    if start == end:
        return []
    if fits(text[start:end]):
        return [(start, end)]
    if level == len(LEVELS):
        raise InputError(f"Cannot split {text!r} into pieces that the model accepts.")
    units = LEVELS[level](text, language)
    if len(units) <= 1:
        return split_to_fit(text, fits, language, level + 1)
    spans, first, offset = [], 0, 0
    while first < len(units):
        low, high = first + 1, len(units)  # the largest last with fits(units[first:last]); at least one unit
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits("".join(units[first:middle]).strip(WHITESPACE)) else (low, middle - 1)
        group = "".join(units[first:low])
        spans += [(offset + i, offset + j) for i, j in split_to_fit(group, fits, language, level + 1)]
        offset += len(group)
        first = low
    return spans


def segments(line: str, fits, language: str | None = None, split: bool = True) -> tuple[list[tuple[str, str]], int]:
    """The pieces of `line` to translate, each with the whitespace before it in the line ("" for the first), and how
    many of its sentences did not fit and were split: `line` is split into sentences, and each that does not `fit`
    by `split_to_fit`. `split=False` takes the line for one sentence (split like one that does not fit, if it does
    not)."""
    spans = sentence_spans(line, language) if split else [_strip(line, 0, len(line))]
    pieces, too_long, previous = [], 0, None
    for start, end in spans:
        parts = split_to_fit(line[start:end], fits, language)
        too_long += len(parts) > 1
        for i, j in parts:
            pieces.append(("" if previous is None else line[previous : start + i], line[start + i : start + j]))
            previous = start + j
    return pieces, too_long


def join(separators: list[str], texts: list[str]) -> str:
    """Translations joined with the whitespace that separated their sources; where none did (CJK, or a word cut
    between characters), with a space."""
    return "".join(
        (separator or " ") + text if k else text for k, (separator, text) in enumerate(zip(separators, texts))
    )


__all__ = ["RULES", "join", "segments", "sentence_spans", "split_sentences", "split_to_fit"]
