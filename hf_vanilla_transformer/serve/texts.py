"""What of a request's text goes to the translator, and how its translations are put back.

The translator's unit is a line, as in the translate command's files: a text is split at its line breaks and each line
is translated as `translate` translates it (sentences, length rule, joining), so a text of one line gets exactly the
command's output for that line. A line with no letter or digit (an emoji, punctuation) comes back unchanged, as
LibreTranslate returns text with nothing to translate.

HTML (`format: "html"`) keeps its markup: the text between tags is translated, with the whitespace around it kept and
its character references decoded and encoded again; tags, comments and the content of `<script>` and `<style>` are
copied as they are. A sentence that runs across inline tags ("Hallo <b>Welt</b>.") is translated in its parts.
"""

import html
import re
import unicodedata
from dataclasses import dataclass


_MARKUP = re.compile(r"(<!--.*?-->|<![^>]*>|<\?.*?\?>|<[A-Za-z/][^>]*>)", re.S)
_RAW_TEXT = re.compile(r"<(script|style)\b", re.I)
_WHITESPACE = re.compile(r"^(\s*)(.*?)(\s*)$", re.S)


def translatable(line: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in line)


@dataclass
class Layout:
    """Where the translated lines go in the answer: `parts` are literal strings and line indices (into the lines
    sent to the translator), concatenated in order."""

    parts: list
    escape: bool = False  # HTML: the translations' <, > and & as character references

    def fill(self, translations: list[str]) -> str:
        def text(index: int) -> str:
            return html.escape(translations[index], quote=False) if self.escape else translations[index]

        return "".join(part if isinstance(part, str) else text(part) for part in self.parts)


def plain_text(text: str, lines: list[str]) -> Layout:
    """`text` split into lines; the translatable ones are appended to `lines`."""
    parts = []
    for k, line in enumerate(text.split("\n")):
        if k:
            parts.append("\n")
        if translatable(line):
            parts.append(len(lines))
            lines.append(line)
        else:
            parts.append(line)
    return Layout(parts)


def html_text(text: str, lines: list[str]) -> Layout:
    """The text nodes of `text` as lines (whitespace around them kept, character references decoded); the markup as
    it is."""
    parts, raw_until = [], None
    for k, piece in enumerate(_MARKUP.split(text)):
        if k % 2:  # markup
            parts.append(piece)
            if raw_until is None and (match := _RAW_TEXT.match(piece)) and not piece.endswith("/>"):
                raw_until = f"</{match.group(1).lower()}"
            elif raw_until is not None and piece.lower().startswith(raw_until):
                raw_until = None
            continue
        if raw_until is not None or not piece:
            parts.append(piece)
            continue
        for j, line in enumerate(piece.split("\n")):
            if j:
                parts.append("\n")
            before, content, after = _WHITESPACE.match(line).groups()
            content = html.unescape(content)
            if translatable(content):
                parts += [before, len(lines), after]
                lines.append(content)
            else:
                parts.append(line)
    return Layout(parts, escape=True)


def layout(text: str, text_format: str, lines: list[str]) -> Layout:
    return html_text(text, lines) if text_format == "html" else plain_text(text, lines)
