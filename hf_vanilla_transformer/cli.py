"""`hf-vanilla-transformer COMMAND ...` (or `python -m hf_vanilla_transformer`): every workflow of the package.

Each command lives beside what it runs (`<room>/command.py`, a `main(argv, prog)`); this module dispatches, so that
`--help` and a mistyped command answer without loading torch, and gives every command's process torch's settings for
batches that change shape (`cuda.CUDA_DEFAULTS`).
"""

import importlib
import sys

from .cuda import cuda_defaults
from .errors import InputError, report


PROG = "hf-vanilla-transformer"
# command -> (module, function, one-line help)
COMMANDS = {
    "train": (
        "recipes.command",
        "main",
        "train a translator (with no options: the bundled demo), a language model or a classifier",
    ),
    "translate": ("translate.command", "main", "translate text files, line by line, with a trained model"),
    "translate-corpus": (
        "translate.corpus_command",
        "main",
        "translate a corpus (Parquet, JSON Lines, text) on Ray Data, resumable, locally or on a cluster",
    ),
    "distill": ("distill.pipeline", "main", "distill a translator into a small, fast student, and measure both"),
    "vocabulary-map": (
        "data.vocabulary_map",
        "main",
        "write a model's vocabulary map (vmap.txt: a lexical shortlist for --use_vmap) from a parallel corpus",
    ),
    "serve": ("serve.command", "main", "serve a trained model over HTTP: LibreTranslate's API, batched requests"),
    "export": ("interop.command", "export", "export a trained model to CTranslate2, MarianMTModel or ONNX, exactly"),
    "verify-export": ("interop.command", "verify", "how exactly every export reproduces a model, on a test set"),
    "upgrade-folder": ("data.saved_code", "main", "give folders saved by earlier versions this version's model code"),
    "average": ("training.command", "main", "average the last checkpoints of a training run (section 6.1)"),
    "publish": ("hub.command", "main", "publish a trained model to the Hugging Face Hub with its model card"),
    "demo": ("demo.command", "demo", "serve the Gradio translation page, or write it as a Hugging Face Space"),
    "web-page": ("demo.command", "web_page", "build a page that translates in the browser, with no server"),
    "plot": ("demo.command", "plot", "draw a translation's attention, or the positional encoding, as PNG files"),
}  # fmt: skip


def usage() -> str:
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {help}" for name, (_, _, help) in COMMANDS.items())
    return (
        f"usage: {PROG} COMMAND [options]\n\n"
        "The Transformer of 'Attention Is All You Need' as a Hugging Face model: train it, translate with it, export "
        f"it, publish it.\n\ncommands:\n{commands}\n\n`{PROG} COMMAND --help` describes each command's options."
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from . import __version__

        print(f"{PROG} {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        return report(PROG, f"unknown command {name!r}; the commands are {', '.join(COMMANDS)}.")
    module, function, _ = COMMANDS[name]
    prog = f"{PROG} {name}"
    cuda_defaults()
    run = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    from transformers.utils import logging

    logging.disable_progress_bar()  # "Loading weights" bars: noise in a command's output
    try:
        return run(argv[1:], prog) or 0
    except InputError as error:
        return report(prog, error)


if __name__ == "__main__":
    sys.exit(main())
