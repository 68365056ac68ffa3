"""Everything a server is started with: the command's options, and `create_app`'s keyword arguments."""

import json
import os
from dataclasses import asdict, dataclass, fields

from ..errors import InputError
from ..translate.options import DecodeOptions, EngineOptions


ENVIRONMENT = "HF_VANILLA_TRANSFORMER_SERVE"  # the settings of `from_environment` (JSON), for worker processes


@dataclass(frozen=True)
class Settings(EngineOptions, DecodeOptions):
    """translate's options (the engine, decoding, sentences, batching across requests) and the server's own."""

    model: str | None = None
    target_lang: str | None = None  # default: the folder's record
    max_wait_ms: float = 10.0
    # Limits.
    max_queue: int = 256  # translation requests admitted at once; more get 503
    max_chars: int = 10_000  # characters per request; more get 413
    max_texts: int = 128  # texts per request
    max_alternatives: int = 3
    max_beams: int = 8
    max_glossary_terms: int = 100  # terms of a request's glossary
    timeout: float = 60.0  # seconds per request; then 504
    # Access.
    api_keys: str | None = None  # a file, one key per line (optionally with its requests per minute)
    rate_limit: int | None = None  # requests per minute per key (per client address without keys)
    cors_origins: list[str] | None = None

    def check(self) -> "Settings":
        super().check()
        for name in "max_queue max_chars max_texts max_beams max_glossary_terms timeout".split():
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InputError(f"--{name} must be positive, got {value}.")
        for name in ("max_alternatives", "max_wait_ms", "rate_limit"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InputError(f"--{name} must be >= 0, got {value}.")
        return self

    def to_environment(self) -> None:
        os.environ[ENVIRONMENT] = json.dumps(asdict(self))

    @classmethod
    def from_environment(cls) -> "Settings":
        if ENVIRONMENT not in os.environ:
            raise InputError(f"{ENVIRONMENT} is not set: it holds the server's settings as JSON.")
        values = json.loads(os.environ[ENVIRONMENT])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known}).check()
