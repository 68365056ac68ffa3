"""The model runner: one thread owns the translator; requests hand it their lines and wait for their translations.

The runner takes every request waiting and translates their lines together in one call of the engine API
(`Translator.translate`, as the translate command translates a window of a file: sentence splitting, the length rule,
token-budget batches over the sentences of all of them), then answers each request with exactly its own lines, in
order. When fewer requests wait than the last round had clients (those it answered come back with their next requests,
and those that arrived meanwhile), it waits for them up to `max_wait` seconds after the round (or after the first
request's arrival): a lone client is not delayed, and concurrent clients fill batches together rather than in
alternating halves. Requests that ask for other decoding options
(beams, n-best, sentence splitting) are batched with their own kind, on the same loaded model.

A call that raises is retried request by request, so that only the request whose text fails gets the error; the
runner goes on. Requests whose caller has given up (timeout, disconnect) before their turn are skipped.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import InputError
from ..translate.options import DecodeOptions


logger = logging.getLogger("hf_vanilla_transformer.serve")


class TranslationFailed(Exception):
    """The engine failed on a request's text (answered as 500, the cause in the server's log)."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.kind = type(cause).__name__


@dataclass(eq=False)
class Job:
    """One request's lines; `settle(result)` is called once, from the runner thread, with the list of
    `LineTranslation` or an exception (`InputError`: the text cannot be translated; `TranslationFailed`)."""

    lines: list[str]
    options: DecodeOptions  # the server's, with the request's own on top
    settle: Callable[[object], None]
    scores: bool = False
    arrived: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # the caller stopped waiting: skip it
    done: bool = False


class Runner:
    """`submit` from any thread; the runner's thread alone calls `translator`."""

    def __init__(
        self,
        translator,
        max_tokens: int | None,
        batch_size: int | None,
        max_wait: float,
        observe: Callable[..., None] = lambda **_: None,
    ):
        self.translator, self.max_tokens, self.batch_size, self.max_wait = (
            translator,
            max_tokens,
            batch_size,
            max_wait,
        )
        self.observe = observe  # called after each batch with sentences=, tokens=, generated=, seconds=
        self.waiting: list[Job] = []
        self.expected, self.round_end = 1, 0.0  # clients seen in the last round, when it ended
        self.condition = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="model-runner", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: Job) -> None:
        with self.condition:
            if self.stopping:
                raise RuntimeError("the runner is stopped")
            self.waiting.append(job)
            self.condition.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Translate what is waiting, then end the thread."""
        with self.condition:
            self.stopping = True
            self.condition.notify()
        self.thread.join(timeout)

    def _take(self) -> list[Job] | None:
        with self.condition:
            while not self.waiting and not self.stopping:
                self.condition.wait()
            if not self.waiting:
                return None
            deadline = max(self.waiting[0].arrived, self.round_end) + self.max_wait
            while not self.stopping and self._short() and (left := deadline - time.monotonic()) > 0:
                self.condition.wait(left)
            jobs, self.waiting = self.waiting, []
        return jobs

    def _short(self) -> bool:
        """Whether fewer requests wait than the clients of the last round (those it answered, coming back with their
        next requests, and those that waited meanwhile), and their lines would not yet fill a batch (counting a line
        as one short sentence)."""
        lines = sum(len(job.lines) for job in self.waiting)
        return len(self.waiting) < self.expected and lines < (self.batch_size or (self.max_tokens or 0) // 16 or 1)

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            kinds: dict[DecodeOptions, list[Job]] = {}
            for job in jobs:
                kinds.setdefault(job.options, []).append(job)
            for options, group in kinds.items():
                try:
                    self._translate(options, group)
                except Exception as error:  # a bug: fail these requests, keep serving the others
                    logger.exception("The runner failed on a group of requests")
                    for job in group:
                        self._finish(job, TranslationFailed(error))
            with self.condition:
                self.expected, self.round_end = len(jobs) + len(self.waiting), time.monotonic()

    def _translate(self, options: DecodeOptions, jobs: list[Job]) -> None:
        try:
            self.translator.decoding(options)  # options that do not go together fail these requests alone
        except InputError as error:
            for job in jobs:
                self._finish(job, error)
            return
        self._run_jobs(options, [job for job in jobs if not job.abandoned])

    def _run_jobs(self, options: DecodeOptions, jobs: list[Job]) -> None:
        """The lines of `jobs` in one `Translator.translate` call; when it raises, each job on its own."""
        if not jobs:
            return
        try:
            translations = self.translator.translate(
                [line for job in jobs for line in job.lines],
                options,
                scores=any(job.scores for job in jobs),
                on_batch=lambda batch: self.observe(
                    sentences=batch.sentences, tokens=batch.tokens, generated=batch.generated, seconds=batch.seconds
                ),
            )
        except Exception as error:
            if len(jobs) > 1:  # find whose text fails
                for job in jobs:
                    self._run_jobs(options, [job])
            else:
                self._finish(jobs[0], error if isinstance(error, InputError) else TranslationFailed(error))
            return
        start = 0
        for job in jobs:
            self._finish(job, translations[start : start + len(job.lines)])
            start += len(job.lines)

    def _finish(self, job: Job, result) -> None:
        if not job.done:
            job.done = True
            job.settle(result)
