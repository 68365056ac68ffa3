"""The routes: LibreTranslate's `/translate`, `/languages`, `/detect` and `/health`, the native `/v1/translate`, and
`/metrics`. Each handler takes the service (`app.Service`) and the request."""

import json
import math

import anyio
from starlette.responses import JSONResponse, Response

from ..translate.io import format_translation
from .bodies import (
    ApiError,
    fields,
    glossary_field,
    json_object,
    read_body,
    text_field,
    texts_field,
    whole_number,
)
from .texts import layout


FORMATS = ("text", "html")
NATIVE_FIELDS = ("texts", "num_beams", "length_penalty", "nbest", "split_sentences", "glossary", "api_key")


async def translate(service, request) -> Response:
    """LibreTranslate's `POST /translate`."""
    settings, pair = service.settings, service.pair
    values, _ = await fields(request, service.max_body)
    service.check_access(request, values)
    texts, is_list = texts_field(values, "q")
    source = text_field(values, "source")
    target = text_field(values, "target")
    alternatives = max(0, whole_number(values, "alternatives", 0))
    if alternatives > settings.max_alternatives:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {settings.max_alternatives}")
    if is_list and len(texts) > settings.max_texts:
        raise ApiError(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({settings.max_texts})")
    check_size(texts, settings.max_chars)
    if source.lower() not in ("auto", pair.source):
        raise ApiError(400, f"{source} is not supported")
    if target.lower() != pair.target:
        raise ApiError(400, f"{target} is not supported")
    text_format = text_field(values, "format", required=False) or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"{text_format} format is not supported")
    if source.lower() == "auto":
        detected = await anyio.to_thread.run_sync(lambda: [service.detector.source_of(t, pair.source) for t in texts])

    glossary = glossary_field(values, settings.max_glossary_terms, settings.glossary_ignore_case)
    lines = []
    layouts = [layout(text, text_format, lines) for text in texts]
    nbest = alternatives + 1
    beams = service.num_beams
    options = service.options(num_beams=max(beams, nbest), nbest=nbest, glossary=glossary)
    translations = await service.translate(lines, options)

    def kth(k: int) -> list[str]:
        return [t.hypotheses[min(k, len(t.hypotheses) - 1)].text for t in translations]

    ranked = [kth(k) for k in range(nbest)]
    best = [text_layout.fill(ranked[0]) for text_layout in layouts]
    answer = {"translatedText": best if is_list else best[0]}
    if source.lower() == "auto":
        answer["detectedLanguage"] = detected if is_list else detected[0]
    if alternatives:
        others = [
            unique([text_layout.fill(hypotheses) for hypotheses in ranked[1:]], main)
            for text_layout, main in zip(layouts, best)
        ]
        answer["alternatives"] = others if is_list else others[0]
    return JSONResponse(answer)


async def translate_native(service, request) -> Response:
    """`POST /v1/translate`: `{"texts": [...], options}` -> `{"translations": [translate's jsonl records]}`."""
    settings = service.settings
    values = json_object(await read_body(request, service.max_body))
    unknown = sorted(set(values) - set(NATIVE_FIELDS))
    if unknown:
        raise ApiError(
            400, f"Invalid request: unknown field {unknown[0]!r}; the fields are {', '.join(NATIVE_FIELDS)}"
        )
    service.check_access(request, values)
    texts = values.get("texts")
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, "Invalid request: texts must be a non-empty list of strings")
    if len(texts) > settings.max_texts:
        raise ApiError(
            400, f"Invalid request: texts has {len(texts)} items, more than the limit ({settings.max_texts})"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ApiError(400, f"Invalid request: texts[{i}] must be a string")
        if "\n" in text or "\r" in text:
            raise ApiError(400, f"Invalid request: texts[{i}] holds a line break; each text is one line")
    check_size(texts, settings.max_chars)
    beams = number(values, "num_beams", int, 1, settings.max_beams)
    effective = beams or service.num_beams
    nbest = number(values, "nbest", int, 1) or 1
    if nbest > effective:
        raise ApiError(400, f"Invalid request: nbest ({nbest}) must be at most num_beams ({effective})")
    length_penalty = number(values, "length_penalty", float)
    split = values.get("split_sentences")
    if split is not None and not isinstance(split, bool):
        raise ApiError(400, "Invalid request: split_sentences must be true or false")
    glossary = glossary_field(values, settings.max_glossary_terms, settings.glossary_ignore_case)
    options = service.options(
        num_beams=beams, length_penalty=length_penalty, nbest=nbest, split_sentences=split, glossary=glossary
    )
    translations = await service.translate(texts, options, scores=True)
    records = [json.loads(format_translation(i, t, "jsonl")) for i, t in enumerate(translations)]
    return JSONResponse({"translations": records})


async def detect(service, request) -> Response:
    """LibreTranslate's `POST /detect`: the likeliest languages of `q` (of all its texts together, for a list)."""
    values, _ = await fields(request, service.max_body)
    service.check_access(request, values)
    texts, _ = texts_field(values, "q")
    check_size(texts, service.settings.max_chars)
    return JSONResponse(await anyio.to_thread.run_sync(service.detector.candidates, "\n".join(texts)))


async def languages(service, request) -> Response:
    return JSONResponse(service.pair.languages())


async def health(service, request) -> Response:
    """200 once the model is loaded and the runner serves; 503 while loading or stopping."""
    return JSONResponse({"status": service.state}, 200 if service.state == "ok" else 503)


async def metrics(service, request) -> Response:
    body, content_type = service.metrics.exposition()
    return Response(body, headers={"Content-Type": content_type})


ROUTES = [
    ("/translate", "POST", translate),
    ("/languages", "GET", languages),
    ("/detect", "POST", detect),
    ("/health", "GET", health),
    ("/v1/translate", "POST", translate_native),
    ("/metrics", "GET", metrics),
]


# ----------------------------------------------------------------------------------------------------- helpers


def check_size(texts: list[str], limit: int) -> None:
    size = sum(map(len, texts))
    if size > limit:
        raise ApiError(413, f"Invalid request: request ({size}) exceeds text limit ({limit})")


def number(values: dict, name: str, kind: type, low: float | None = None, high: float | None = None):
    """The field `name` as `kind` (int, or float also from an int), within [low, high]; None when absent."""
    value = values.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ApiError(400, f"Invalid request: {name} must be {'a whole number' if kind is int else 'a number'}")
    if not math.isfinite(value):
        raise ApiError(400, f"Invalid request: {name} must be a finite number")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ApiError(400, f"Invalid request: {name} must be between {low} and {high}, got {value}")
    return kind(value)


def unique(texts: list[str], main: str) -> list[str]:
    """LibreTranslate's alternatives: distinct, and neither the translation itself nor empty."""
    seen = {main, ""}
    return [t for t in texts if not (t in seen or seen.add(t))]
