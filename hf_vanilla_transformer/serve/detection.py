"""Which language a text is in, for LibreTranslate's `/detect` and `source: "auto"`: py3langid (the `serve` extra), a
naive Bayes identifier whose model ships in its wheel (offline, CPU, about 100 MB of memory).

On the bundled test split it names German for 99.4 % of the German sentences and English for 99.1 % of the English
ones (docs/results/2026-11-28-language-detection.md). Short or ambiguous texts ("Hallo", "Tom?") get low confidences
spread over many languages: `source: "auto"` refuses a text only when another language than the model's own is named
with at least `SURE` confidence, and otherwise translates it from the model's source language (no German sentence of
the test split is refused, 93 % of the English ones are).
"""

import threading

from ..errors import InputError, import_extra
from .bodies import ApiError
from .languages import NAMES
from .texts import translatable


SURE = 50.0  # percent
CANDIDATES = 3  # the most `/detect` lists


class LanguageDetector:
    """py3langid's identifier over all its languages, loaded on first use (a second) and shared by the threads."""

    def __init__(self):
        self._identifier, self._lock = None, threading.Lock()

    def _load(self):
        with self._lock:
            if self._identifier is None:
                try:
                    langid = import_extra("py3langid.langid", "serve", "Language detection")
                except InputError as error:
                    raise ApiError(501, str(error)) from None
                path = langid.MODEL_DIR / langid.MODEL_FILE
                self._identifier = langid.LanguageIdentifier.from_modelpath(path, norm_probs=True)
        return self._identifier

    def candidates(self, text: str) -> list[dict]:
        """LibreTranslate's `/detect` answer: the likeliest languages, best first, with confidences 0-100; after the
        first only those of at least 1."""
        ranked = self._load().rank(text)[:CANDIDATES]
        found = [{"language": code, "confidence": round(100 * p, 2)} for code, p in ranked]
        return found[:1] + [candidate for candidate in found[1:] if candidate["confidence"] >= 1]

    def source_of(self, text: str, source: str) -> dict:
        """`source: "auto"`: the detected language of `text` as `detectedLanguage`, where it is `source` or the
        detector is unsure (then `source` with its own confidence); another language named with at least `SURE`
        confidence is refused with 400, naming it and `source`. Text with nothing to translate is `source` with
        confidence 0, as LibreTranslate answers."""
        if not translatable(text):
            return {"confidence": 0.0, "language": source}
        ranked = self._load().rank(text)
        best, confidence = ranked[0][0], 100 * ranked[0][1]
        if best == source or confidence < SURE:
            own = next((p for code, p in ranked if code == source), 0.0)
            return {"confidence": round(100 * own, 2), "language": source}
        raise ApiError(
            400,
            f"{best} is not supported: the text is detected as {NAMES.get(best, best)} ({best}, confidence "
            f"{confidence:.1f}), and this server translates from {NAMES.get(source, source)} ({source}) only",
        )
