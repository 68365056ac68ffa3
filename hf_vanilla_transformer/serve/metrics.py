"""`GET /metrics`: Prometheus text through prometheus_client.

Each application has its own registry. Under `--workers N` each worker process counts its own requests; with
`PROMETHEUS_MULTIPROC_DIR` set (the command sets it for several workers) `/metrics` sums them all, as
prometheus_client's multiprocess mode does.
"""

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)


LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter(
            "translation_requests", "HTTP requests by route and status", ["route", "status"], registry=registry
        )
        self.latency = Histogram(
            "translation_request_duration_seconds",
            "Time from a request's arrival to its answer, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue = Gauge(
            "translation_queue_depth",
            "Translation requests admitted and not yet answered",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.batch_sentences = Histogram(
            "translation_batch_sentences",
            "Sentences per model batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=registry,
        )
        self.batch_tokens = Histogram(
            "translation_batch_tokens",
            "Padded source tokens per model batch",
            buckets=(16, 64, 128, 256, 512, 1000, 2000, 3000, 5000, 10000),
            registry=registry,
        )
        self.generated = Counter(
            "translation_generated_tokens", "Tokens generated (best hypotheses)", registry=registry
        )
        self.busy = Counter("translation_model_seconds", "Seconds the model spent on batches", registry=registry)
        self.tokens_per_second = Gauge(
            "translation_tokens_per_second",
            "Tokens generated per second of model time, in the last batch",
            registry=registry,
            multiprocess_mode="liveall",
        )

    def batch(self, sentences: int, tokens: int, generated: int, seconds: float) -> None:
        self.batch_sentences.observe(sentences)
        self.batch_tokens.observe(tokens)
        self.generated.inc(generated)
        self.busy.inc(seconds)
        if seconds > 0:
            self.tokens_per_second.set(generated / seconds)

    def exposition(self) -> tuple[bytes, str]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        else:
            registry = self.registry
        return generate_latest(registry), CONTENT_TYPE_LATEST
