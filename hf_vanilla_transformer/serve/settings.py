"""Everything a server is started with: the command's options, and `create_app`'s keyword arguments."""

import json
import os
from dataclasses import asdict, dataclass, fields

from ..errors import InputError


ENVIRONMENT = "HF_VANILLA_TRANSFORMER_SERVE"  # the settings of `from_environment` (JSON), for worker processes


@dataclass
class Settings:
    model: str | None = None
    # The engine and decoding: translate's options of the same names.
    backend: str = "torch"
    device: str | None = None
    dtype: str = "float32"
    int8: bool = False
    compute_type: str = "default"
    trust_remote_code: bool = False
    num_beams: int | None = None
    length_penalty: float | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    split_sentences: bool = True
    source_lang: str | None = None  # default: what the model's folder records from training
    target_lang: str | None = None
    threads: int | None = None  # torch's intra-op threads (default: torch's choice)
    # Batching across requests.
    max_tokens: int | None = 3000  # padded source tokens per batch, as translate's default
    batch_size: int | None = None
    max_wait_ms: float = 10.0
    # Limits.
    max_queue: int = 256  # translation requests admitted at once; more get 503
    max_chars: int = 10_000  # characters per request; more get 413
    max_texts: int = 128  # texts per request
    max_alternatives: int = 3
    max_beams: int = 8
    timeout: float = 60.0  # seconds per request; then 504
    # Access.
    api_keys: str | None = None  # a file, one key per line (optionally with its requests per minute)
    rate_limit: int | None = None  # requests per minute per key (per client address without keys)
    cors_origins: list[str] | None = None

    def check(self) -> "Settings":
        for name in "max_queue max_chars max_texts max_beams timeout threads batch_size max_tokens".split():
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InputError(f"--{name} must be positive, got {value}.")
        for name in ("max_alternatives", "max_wait_ms", "rate_limit"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InputError(f"--{name} must be >= 0, got {value}.")
        if self.max_tokens is None and self.batch_size is None:
            raise InputError("--max_tokens or --batch_size must bound the batches.")
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
