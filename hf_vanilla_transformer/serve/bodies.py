"""Request bodies as LibreTranslate reads them: a JSON object, or form fields (urlencoded or multipart, with the query
string's), each mistake an `ApiError` whose message names the field. The wording of LibreTranslate's own errors is
kept ("Invalid request: missing q parameter")."""

import json
from urllib.parse import parse_qsl

from starlette.requests import Request

from ..data.glossary import Glossary
from ..errors import InputError


class ApiError(Exception):
    """Answered as `{"error": message}` with `status` (and `headers`); `detail` goes to the server's log only."""

    def __init__(self, status: int, message: str, headers: dict | None = None, detail: str | None = None):
        super().__init__(message)
        self.status, self.message, self.headers, self.detail = status, message, headers, detail


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, refused with 413 beyond `max_bytes` before more of it is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(
            413, f"Invalid request: the body ({int(declared)} bytes) exceeds the size limit ({max_bytes} bytes)"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, f"Invalid request: the body exceeds the size limit ({max_bytes} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def json_object(body: bytes) -> dict:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"Invalid request: the body is not UTF-8 (byte {error.start + 1})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ApiError(400, f"Invalid JSON format: {error.msg} (line {error.lineno}, column {error.colno})") from None
    if not isinstance(value, dict):
        raise ApiError(400, "Invalid JSON format")  # LibreTranslate's words, which clients match
    return value


async def fields(request: Request, max_bytes: int) -> tuple[dict, bool]:
    """(name -> value, whether the body is JSON). A form field given several times is a list (`q=a&q=b`)."""
    if is_json(request):
        return json_object(await read_body(request, max_bytes)), True
    pairs = _query(request.url.query, "the query string")
    body = await read_body(request, max_bytes)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        pairs += await _multipart(request, body)
    else:
        check_not_json(request, body)
        pairs += _query(body, "the body")
    values: dict = {}
    for name, value in pairs:
        if name not in values:
            values[name] = value
        elif isinstance(values[name], list):
            values[name].append(value)
        else:
            values[name] = [values[name], value]
    return values, False


def check_not_json(request: Request, body: bytes) -> None:
    """Refuse a JSON object sent without a JSON content type (`curl -d '{...}'` sends it as a form), naming the header,
    rather than reading it as form fields and missing every one."""
    if not body.lstrip().startswith(b"{"):
        return
    try:
        json.loads(body)
    except ValueError:
        return
    sent = request.headers.get("content-type")
    header = f"its Content-Type is {sent.split(';')[0].strip()}" if sent else "it has no Content-Type header"
    raise ApiError(
        400, f"Invalid request: the body is JSON, but {header}: send the header Content-Type: application/json"
    )


async def _multipart(request: Request, body: bytes) -> list[tuple[str, str]]:
    """The text fields of a multipart body already read (files are not taken)."""

    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        async with Request(request.scope, replay).form(max_files=0) as form:
            return [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
    except Exception as error:  # python-multipart's and Starlette's parse errors
        raise ApiError(400, f"Invalid request: the multipart body cannot be read ({error})") from None


def _query(data: str | bytes, where: str) -> list[tuple[str, str]]:
    """Urlencoded fields, percent-encoded or raw UTF-8, refusing what is not UTF-8 (a browser's form in another
    encoding, binary data)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data  # curl -d sends UTF-8 as it is
        return parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, f"Invalid request: {where} is not UTF-8 form data") from None


# ------------------------------------------------------------------------------------------------------ fields


def text_field(values: dict, name: str, required: bool = True) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        if required:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string")
    return value


def whole_number(values: dict, name: str, default: int) -> int:
    """A number as LibreTranslate reads one, with `int()`: 3, 3.0 and "3" are 3."""
    value = values.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ApiError(400, f"Invalid request: {name} parameter is not a number")
    try:
        return int(value)
    except (ValueError, OverflowError):
        raise ApiError(400, f"Invalid request: {name} parameter is not a number") from None


def texts_field(values: dict, name: str) -> tuple[list[str], bool]:
    """(the texts of `name`, whether it was a list): a string or a non-empty list of strings."""
    value = values.get(name)
    if value is None or value == "" or value == []:
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    if isinstance(value, str):
        return [value], False
    if not isinstance(value, list):
        raise ApiError(400, f"Invalid request: {name} must be a string or a list of strings")
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise ApiError(400, f"Invalid request: {name}[{i}] must be a string, got {json_type(text)}")
    return value, True


MAX_TERM_CHARS = 200  # characters per term of a request's glossary


def glossary_field(values: dict, max_terms: int, ignore_case: bool):
    """A request's `glossary`: a list of {"source": ..., "target": ...} (in a form body, that list as JSON), at most
    `max_terms`; None where not given (the server's own applies)."""
    value = values.get("glossary")
    if value is None:
        return None
    if isinstance(value, str):  # a form's field
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ApiError(400, "Invalid request: glossary must be a list of {source, target} objects") from None
    if not isinstance(value, list) or not value:
        raise ApiError(400, "Invalid request: glossary must be a non-empty list of {source, target} objects")
    if len(value) > max_terms:
        raise ApiError(400, f"Invalid request: glossary has {len(value)} terms, more than the limit ({max_terms})")
    pairs = []
    for i, term in enumerate(value):
        if not isinstance(term, dict) or set(term) != {"source", "target"}:
            raise ApiError(400, f"Invalid request: glossary[{i}] must be an object with source and target only")
        for side in ("source", "target"):
            if not isinstance(term[side], str) or not 0 < len(term[side]) <= MAX_TERM_CHARS:
                raise ApiError(
                    400, f"Invalid request: glossary[{i}].{side} must be a string of 1 to {MAX_TERM_CHARS} characters"
                )
        pairs.append((term["source"], term["target"]))
    try:
        return Glossary.of_pairs(pairs, ignore_case, name="glossary")
    except InputError as error:
        raise ApiError(400, f"Invalid request: {error}") from None


def json_type(value) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
