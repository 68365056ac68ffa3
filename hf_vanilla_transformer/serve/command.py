"""`hf-vanilla-transformer serve`: the translation service (`app.create_app`) on uvicorn."""

import argparse
import copy
import os
import signal
import sys
import tempfile

from ..errors import CommandParser, InputError, import_extra
from ..translate.options import add_arguments


DESCRIPTION = """Serve a trained model over HTTP: LibreTranslate's API (POST /translate, GET /languages), a native
batch route (POST /v1/translate), GET /health and GET /metrics. Sentences from concurrent requests share batches; a
sentence is translated exactly as the translate command translates it, with the same engines and options. Needs the
`serve` extra: pip install 'hf-vanilla-transformer[serve]'. See docs/serving.md."""


def build_parser(prog: str) -> argparse.ArgumentParser:
    from .settings import Settings

    defaults = Settings()
    parser = CommandParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--model", required=True, help="model folder or Hub id (any AutoModelForSeq2SeqLM)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="server processes, each with its own model")
    parser.add_argument(
        "--grace_period", type=float, default=30.0, help="seconds that SIGTERM waits for requests in flight"
    )
    parser.add_argument(
        "--timeout_keep_alive",
        type=float,
        default=75.0,
        help="seconds an idle keep-alive connection stays open (longer than client pools and load balancers keep one)",
    )
    parser.add_argument("--access_log", action="store_true", help="log every request (default: errors only)")

    # The translate command's options, with its defaults; n-best is a request's (alternatives).
    add_arguments(parser, exclude=("nbest",))
    parser.add_argument("--target_lang", help="the target language (default: the folder's record)")
    parser.add_argument(
        "--max_wait_ms",
        type=float,
        default=defaults.max_wait_ms,
        help="how long a request arriving at an idle server waits for others to share its batch",
    )

    limits = parser.add_argument_group("limits")
    limits.add_argument("--max_queue", type=int, default=defaults.max_queue, help="requests in flight; more get 503")
    limits.add_argument("--max_chars", type=int, default=defaults.max_chars, help="characters per request (413)")
    limits.add_argument("--max_texts", type=int, default=defaults.max_texts, help="texts per request")
    limits.add_argument("--max_alternatives", type=int, default=defaults.max_alternatives)
    limits.add_argument(
        "--max_beams", type=int, default=defaults.max_beams, help="largest num_beams a request may ask"
    )
    limits.add_argument(
        "--max_glossary_terms",
        type=int,
        default=defaults.max_glossary_terms,
        help="terms of a request's own glossary",
    )
    limits.add_argument("--timeout", type=float, default=defaults.timeout, help="seconds per request (504)")

    access = parser.add_argument_group("access")
    access.add_argument(
        "--api_keys", metavar="FILE", help="require a key: one per line, optionally with its requests per minute"
    )
    access.add_argument("--rate_limit", type=int, help="requests per minute per key (per client address without keys)")
    access.add_argument(
        "--cors_origins", nargs="+", metavar="ORIGIN", help="origins that browsers may call from (* for any)"
    )
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    for module in ("starlette", "uvicorn", "prometheus_client", "python_multipart", "py3langid"):
        import_extra(module, "serve", "serve")
    settings = settings_of(args)
    if args.workers == 1:
        from .app import create_app, load

        run(create_app(settings, translator=load(settings)), args)  # a wrong folder or option ends before serving
        return 0
    from ..data.folders import check_translation_folder, resolve_model

    check_translation_folder(resolve_model(settings.model), ctranslate2=settings.backend == "ctranslate2")
    settings.to_environment()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when a worker loads torch: idle threads sleep
    with tempfile.TemporaryDirectory(prefix="serve-metrics-") as metrics:
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", metrics)  # /metrics sums the workers
        run("hf_vanilla_transformer.serve.app:from_environment", args)
    return 0


def settings_of(args):
    """The `Settings` of the command's options, checked (the API key file read) before anything loads."""
    from dataclasses import fields

    from ..translate.backends import check_before_loading
    from .access import read_api_keys
    from .settings import Settings

    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}).check()
    if args.workers < 1:
        raise InputError(f"--workers must be at least 1, got {args.workers}.")
    if not args.timeout_keep_alive > 0:
        raise InputError(f"--timeout_keep_alive must be a positive number of seconds, got {args.timeout_keep_alive}.")
    # A core left to the event loop: OpenMP threads that wait for a core it holds stall every operation.
    settings = settings.prepared(args.workers, reserved=1)
    if settings.api_keys:
        read_api_keys(settings.api_keys)
    if settings.model:  # what the engine would refuse at start-up, before the server starts
        check_before_loading(settings.model, settings, settings)
    return settings


def run(app, args) -> None:
    """uvicorn with the command's server options; `app` an application, or a factory's import path (workers)."""
    import uvicorn

    # After draining on SIGTERM, uvicorn raises the signal again: the handler it restores ends the process with 0.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    uvicorn.run(
        app,
        factory=isinstance(app, str),
        workers=args.workers if isinstance(app, str) else None,
        host=args.host,
        port=args.port,
        access_log=args.access_log,
        # A server that closes an idle connection as its client sends on it loses that request (seen at 128 clients
        # with uvicorn's default of 5 s, httpx's own idle expiry): the client must be the one that closes.
        timeout_keep_alive=args.timeout_keep_alive,
        timeout_graceful_shutdown=args.grace_period,
        log_config=log_config(),
    )


def log_config() -> dict:
    """uvicorn's logging, with this package's server log (one line per error) on the same handler."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["hf_vanilla_transformer.serve"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
