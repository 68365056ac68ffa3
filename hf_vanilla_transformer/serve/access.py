"""Who may translate: API keys from a file and requests per minute per key (or per client address without keys)."""

import threading
import time
from pathlib import Path

from ..errors import InputError


def read_api_keys(path: str) -> dict[str, int | None]:
    """Key -> its own requests per minute (None: the server's `--rate_limit`), from a file of lines `KEY` or
    `KEY REQUESTS_PER_MINUTE`; blank lines and lines starting with # are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"--api_keys {path}: cannot be read ({getattr(error, 'strerror', None) or error}).") from None
    keys = {}
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2 or (len(fields) == 2 and not (fields[1].isdigit() and int(fields[1]) > 0)):
            raise InputError(
                f"--api_keys {path}:{number}: expected `KEY` or `KEY REQUESTS_PER_MINUTE` (a positive whole number)."
            )
        keys[fields[0]] = int(fields[1]) if len(fields) == 2 else None
    if not keys:
        raise InputError(f"--api_keys {path}: no key in the file (one key per line).")
    return keys


class RateLimits:
    """A token bucket per caller: up to `per_minute` requests in a burst, refilled at `per_minute` a minute."""

    def __init__(self, per_minute: int | None, per_key: dict[str, int | None] | None = None):
        self.per_minute, self.per_key = per_minute, per_key or {}
        self.buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, time)
        self.lock = threading.Lock()

    def limit(self, caller: str) -> int | None:
        return self.per_key.get(caller) or self.per_minute

    def allow(self, caller: str) -> bool:
        limit = self.limit(caller)
        if not limit:
            return True
        now = time.monotonic()
        with self.lock:
            tokens, then = self.buckets.get(caller, (limit, now))
            tokens = min(limit, tokens + (now - then) * limit / 60)
            allowed = tokens >= 1
            self.buckets[caller] = (tokens - allowed, now)
            if len(self.buckets) > 100_000:  # bounded memory: forget full buckets
                self.buckets = {k: v for k, v in self.buckets.items() if v[0] < self.limit(k)}
        return allowed
