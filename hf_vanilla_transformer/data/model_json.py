"""The JSON files of a saved model folder, checked before transformers reads them: it would fail on a damaged one with
a bare `JSONDecodeError` or `AttributeError` that names no file."""

import json
from pathlib import Path

from ..errors import InputError


# The JSON files transformers reads when it loads a model and its tokenizer.
MODEL_JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def check_json_files(folder: Path, option: str | None = "--model") -> None:
    """Refuse, naming the file, a model folder whose JSON files (`MODEL_JSON_FILES`) do not parse or do not hold a
    JSON object. The message begins with `option` where the folder was given by one."""
    named = f"{option} {folder}" if option else str(folder)
    for path in (Path(folder) / name for name in MODEL_JSON_FILES if (Path(folder) / name).is_file()):
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise InputError(
                f"{named}: {path.name} is not valid JSON ({error}): the file is cut short or damaged; copy "
                "or save the model again."
            ) from None
        if not isinstance(content, dict):
            raise InputError(
                f"{named}: {path.name} holds a JSON {type(content).__name__}, not an object of settings: the file "
                "is damaged or not a model's; copy or save the model again."
            )


__all__ = ["MODEL_JSON_FILES", "check_json_files"]
