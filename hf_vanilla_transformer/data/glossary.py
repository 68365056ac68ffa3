"""Glossaries: the target terms a translation must use for source terms (docs/translate.md, "Glossaries").

A glossary file is UTF-8 text, one term a line: `source term<TAB>target term` (a term that must stay as it is maps to
itself); a first line `source<TAB>target` is a header. Blank lines are skipped. A term applies to a sentence where its
source side occurs there as whole words, with the case the file gives (`ignore_case`: in any case). Where terms
overlap or nest, the longest match wins (then the leftmost), and the text it covers is not matched again:
"New York City" in a sentence leaves "New York" and "York" unmatched there.

    glossary = Glossary.read("terms.tsv")                  # refuses a bad line naming the file and the line
    glossary = Glossary.of_pairs([("Bahnhof", "station")])  # the same checks, from pairs (a request's field)
    glossary.targets("Wo ist der Bahnhof?")               # ["station"]
"""

import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError


HEADER = ("source", "target")


@dataclass(frozen=True)
class Glossary:
    """Source terms and their target terms, checked; equal glossaries (same terms, same case rule) are equal."""

    terms: tuple[tuple[str, str], ...]  # (source, target), in the order given
    ignore_case: bool = False
    name: str = field(default="glossary", compare=False)  # the file, or what gave the pairs, for messages
    _pattern: re.Pattern = field(init=False, repr=False, compare=False)
    _targets: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        key = str.casefold if self.ignore_case else str
        targets = {}
        for source, target in self.terms:
            targets.setdefault(key(source), target)
        # Longest first: at each position the regex's first alternative that matches is the longest term there.
        sources = sorted(targets, key=lambda s: (-len(s), s))
        flags = re.IGNORECASE if self.ignore_case else 0
        alternatives = "|".join(map(re.escape, sources))
        pattern = re.compile(rf"(?=(?<!\w)({alternatives})(?!\w))", flags) if sources else None
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_targets", targets)

    @classmethod
    def read(cls, path: str | os.PathLike, ignore_case: bool = False) -> "Glossary":
        """The glossary in the TSV file `path`; a line that is no term is refused, naming the file and the line."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"--glossary {path}: no such file.")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"--glossary {path}: not UTF-8 text ({error}): a glossary is a UTF-8 TSV file.") from None
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            columns = line.split("\t")
            if number == 1 and tuple(c.strip().lower() for c in columns) == HEADER:
                continue
            rows.append((f"{path}, line {number}", columns))
        return cls.checked(rows, ignore_case, str(path))

    @classmethod
    def of_pairs(cls, pairs, ignore_case: bool = False, name: str = "glossary") -> "Glossary":
        """A glossary of (source, target) pairs, checked as a file's lines; `name` says what gave them."""
        return cls.checked([(f"{name}[{i}]", list(pair)) for i, pair in enumerate(pairs)], ignore_case, name)

    @classmethod
    def checked(cls, rows, ignore_case: bool, name: str) -> "Glossary":
        """From (where, columns) rows: two non-empty columns each, and one target per source term."""
        key = str.casefold if ignore_case else str
        terms, seen = [], {}
        for where, columns in rows:
            if len(columns) != 2:
                raise InputError(
                    f"{where}: expected a source term, one tab and a target term; got {len(columns)} column(s)."
                )
            source, target = (column.strip() for column in columns)
            if not source or not target:
                raise InputError(f"{where}: an empty {'source' if not source else 'target'} term.")
            earlier = seen.get(key(source))
            if earlier is not None and earlier[1] != target:
                raise InputError(
                    f"{where}: {source!r} is given the target {target!r}, and {earlier[1]!r} at {earlier[0]}: one "
                    "target per source term."
                )
            if earlier is None:
                seen[key(source)] = (where, target)
                terms.append((source, target))
        if not terms:
            raise InputError(
                f"{name}: no terms in it: a glossary lists a source term, a tab and a target term a line."
            )
        return cls(tuple(terms), ignore_case, name)

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the terms and the case rule: what a resume record keeps of a glossary."""
        text = "\n".join(f"{s}\t{t}" for s, t in self.terms) + f"\nignore_case={self.ignore_case}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def matches(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, source term) of each term that applies to `text`, in text order: at each position the longest
        term there, then the longest of those that overlap, then the leftmost."""
        if self._pattern is None:
            return []
        found = [(m.start(), m.start() + len(m.group(1))) for m in self._pattern.finditer(text)]
        taken, chosen = [], []
        for start, end in sorted(found, key=lambda span: (span[0] - span[1], span[0])):
            if all(end <= s or start >= e for s, e in taken):
                taken.append((start, end))
                chosen.append((start, end, text[start:end]))
        return sorted(chosen)

    def targets(self, text: str) -> list[str]:
        """The target terms that `text` calls for, each once, in text order."""
        key = str.casefold if self.ignore_case else str
        return list(dict.fromkeys(self._targets[key(source)] for _, _, source in self.matches(text)))

    def __len__(self) -> int:
        return len(self.terms)
