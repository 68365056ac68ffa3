"""The language pair a server translates, as LibreTranslate's `/languages` lists languages."""

from dataclasses import dataclass

from ..errors import InputError


# English names of the ISO 639-1 codes LibreTranslate serves, for `/languages`; any other code is its own name.
NAMES = dict(
    ar="Arabic", az="Azerbaijani", bg="Bulgarian", bn="Bengali", ca="Catalan", cs="Czech", da="Danish", de="German",
    el="Greek", en="English", eo="Esperanto", es="Spanish", et="Estonian", eu="Basque", fa="Persian", fi="Finnish",
    fr="French", ga="Irish", gl="Galician", he="Hebrew", hi="Hindi", hu="Hungarian", id="Indonesian", it="Italian",
    ja="Japanese", ko="Korean", lt="Lithuanian", lv="Latvian", ms="Malay", nb="Norwegian", nl="Dutch", pl="Polish",
    pt="Portuguese", ro="Romanian", ru="Russian", sk="Slovak", sl="Slovenian", sq="Albanian", sv="Swedish",
    th="Thai", tl="Tagalog", tr="Turkish", uk="Ukrainian", ur="Urdu", vi="Vietnamese", zh="Chinese",
)  # fmt: skip


@dataclass(frozen=True)
class Pair:
    source: str
    target: str

    @classmethod
    def of(cls, translator, source: str | None = None, target: str | None = None) -> "Pair":
        """The pair given, else the one the model's folder records from training (`data.trained_on`)."""
        recorded = translator.trained_on
        source, target = source or recorded.source_lang, target or recorded.target_lang
        if not (source and target):
            raise InputError(
                "The model's folder does not record the languages it was trained on (a folder saved by another "
                "library, or before the record existed): give them with --source_lang and --target_lang."
            )
        return cls(source.lower(), target.lower())

    def languages(self) -> list[dict]:
        """LibreTranslate's `/languages`: each language with the targets it translates into."""
        return [
            {"code": self.source, "name": NAMES.get(self.source, self.source), "targets": [self.target]},
            {"code": self.target, "name": NAMES.get(self.target, self.target), "targets": []},
        ]
