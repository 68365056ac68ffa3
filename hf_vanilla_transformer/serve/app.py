"""The ASGI application: LibreTranslate's routes, the native batch route, health and metrics (see docs/serving.md).

    create_app(model="outputs/demo-de-en")            # an application for any ASGI server
    create_app(translator=load_translator(...))       # around a translator already loaded

The model loads when the application starts (its lifespan), and a runner thread (`runner.py`) translates for every
request. `from_environment()` is the factory of worker processes: it reads the settings from an environment variable.
"""

import asyncio
import contextlib
import dataclasses
import logging
import time

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import InputError
from ..translate.options import DecodeOptions, EngineOptions
from .access import RateLimits, read_api_keys
from .bodies import ApiError
from .detection import LanguageDetector
from .languages import Pair
from .metrics import Metrics
from .routes import ROUTES
from .runner import Job, Runner, TranslationFailed
from .settings import Settings


logger = logging.getLogger("hf_vanilla_transformer.serve")


class Service:
    """What the routes share: settings, the loaded translator and its runner, the server's decoding options, access
    rules, metrics, the queue count."""

    def __init__(self, settings: Settings, translator=None):
        self.settings, self.translator = settings, translator
        self.metrics = Metrics()
        self.detector = LanguageDetector()
        self.api_keys = read_api_keys(settings.api_keys) if settings.api_keys else None
        self.limits = RateLimits(settings.rate_limit, self.api_keys)
        self.max_body = 12 * settings.max_chars + 65536  # a form's %XX per UTF-8 byte, JSON's \\uXXXX, and the fields
        self.decoding = DecodeOptions.of(settings)  # a request's options start from these
        self.runner = self.pair = None
        self.state = "loading"
        self.in_flight = 0

    # ---------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Load the model (unless given) and start the runner; in a worker thread, as it takes seconds."""
        settings = self.settings
        use_threads(settings)
        if self.translator is None:
            self.translator = load(settings)
        self.pair = Pair.of(self.translator, settings.source_lang, settings.target_lang)
        self.num_beams = self.translator.decoding(self.decoding).num_beams
        self.runner = Runner(
            self.translator,
            settings.max_tokens,
            settings.batch_size,
            settings.max_wait_ms / 1000,
            observe=self.metrics.batch,
        )
        self.runner.start()
        self.state = "ok"

    def stop(self) -> None:
        self.state = "stopping"
        if self.runner is not None:
            self.runner.stop()

    # ------------------------------------------------------------------------------------------- translating

    def options(self, **request) -> DecodeOptions:
        """The server's decoding options with those a request gives (None: not given)."""
        return dataclasses.replace(self.decoding, **{k: v for k, v in request.items() if v is not None})

    def check_access(self, request: Request, values: dict) -> None:
        """403 without a listed key (when keys are required), 429 beyond the caller's rate."""
        key = values.get("api_key") or request.query_params.get("api_key")
        if self.api_keys is not None:
            if not key:
                raise ApiError(403, "Please contact the server operator to get an API key")
            if not isinstance(key, str) or key not in self.api_keys:
                raise ApiError(403, "Invalid API key")
        caller = key if self.api_keys is not None else (request.client.host if request.client else "unknown")
        if not self.limits.allow(caller):
            limit = self.limits.limit(caller)
            raise ApiError(429, f"Slowdown: {limit} per 1 minute", {"Retry-After": str(max(1, round(60 / limit)))})

    async def translate(self, lines: list[str], options, scores: bool = False) -> list:
        """The `LineTranslation` of each line, from the runner; 503 when the queue is full, 504 after the timeout."""
        if not lines:
            return []
        if self.state != "ok":
            raise ApiError(503, f"The server is {self.state}: try again later", {"Retry-After": "1"})
        if self.in_flight >= self.settings.max_queue:
            raise ApiError(
                503,
                f"The server is busy: {self.in_flight} requests are waiting (--max_queue); try again later",
                {"Retry-After": "1"},
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(result):
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(result))

        job = Job(lines, options, settle, scores=scores)
        self.in_flight += 1
        self.metrics.queue.inc()
        try:
            self.runner.submit(job)
            result = await asyncio.wait_for(future, self.settings.timeout)
        except asyncio.TimeoutError:
            job.abandoned = True
            raise ApiError(504, f"Translation timed out after {self.settings.timeout:g} seconds (--timeout)") from None
        finally:
            self.in_flight -= 1
            self.metrics.queue.dec()
        if isinstance(result, InputError):
            raise ApiError(400, f"Invalid request: {result}")
        if isinstance(result, TranslationFailed):
            raise ApiError(500, f"Cannot translate text: {result.kind} in the translation engine", detail=f"{result}")
        return result


def use_threads(settings: Settings) -> None:
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)


def load(settings: Settings):
    """translate's translator for `settings` (CTranslate2 takes as many threads as torch has)."""
    from ..data.folders import check_translation_folder, resolve_model
    from ..translate.translator import load_translator

    if not settings.model:
        raise InputError("--model is required: a trained model folder (or Hub id) with its tokenizer.")
    check_translation_folder(resolve_model(settings.model), ctranslate2=settings.backend == "ctranslate2")
    return load_translator(settings.model, EngineOptions.of(settings))


# ------------------------------------------------------------------------------------------------ application


def create_app(settings: Settings | None = None, *, translator=None, **options) -> Starlette:
    """The application for `settings` (or `Settings(**options)`: `model=`, the command's options by name); with
    `translator` (from `load_translator`), it serves that one instead of loading `model`."""
    settings = dataclasses.replace(settings or Settings(), **options).check()
    if translator is None and not settings.model:
        raise InputError("create_app needs model= (a trained model folder) or translator=.")
    service = Service(settings, translator)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await anyio.to_thread.run_sync(service.start)
        # The server binds its address after this: its own line ("Uvicorn running on ...") says when it serves.
        logger.info(f"Model loaded: {service.pair.source} -> {service.pair.target}.")
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(service.stop)

    async def not_routed(request: Request, exc: HTTPException) -> Response:  # 404, 405
        return answer_error(request, ApiError(exc.status_code, exc.detail, exc.headers))

    routes = [Route(path, _observed(service, path, handler), methods=[method]) for path, method, handler in ROUTES]
    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"], allow_headers=["*"]
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_routed},
    )
    app.state.service = service
    return app


def _observed(service: Service, path: str, handler):
    """`handler(service, request)` as a Starlette endpoint, its status and latency counted in the metrics."""

    async def endpoint(request: Request) -> Response:
        start = time.perf_counter()
        try:
            response = await handler(service, request)
        except ApiError as error:
            response = answer_error(request, error)
        except Exception:
            logger.exception(f"{request.method} {request.url.path}: an internal error")
            response = JSONResponse({"error": "Internal server error"}, 500)
        service.metrics.requests.labels(path, str(response.status_code)).inc()
        service.metrics.latency.labels(path).observe(time.perf_counter() - start)
        return response

    return endpoint


def answer_error(request: Request, error: ApiError) -> JSONResponse:
    """`{"error": ...}` with the error's status, and one line in the server's log."""
    detail = f" ({error.detail})" if error.detail else ""
    logger.warning(f"{request.method} {request.url.path} -> {error.status}: {error.message}{detail}")
    return JSONResponse({"error": error.message}, error.status, error.headers)


def from_environment() -> Starlette:
    """The application of a worker process: `create_app` with the settings in `HF_VANILLA_TRANSFORMER_SERVE`."""
    return create_app(Settings.from_environment())
