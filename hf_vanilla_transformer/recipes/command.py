"""`hf-vanilla-transformer train {translation,language-modeling,classification}`: each head's recipe."""

import importlib

from ..errors import InputError, report


# head -> (module of this folder with main(argv, prog), one-line help)
HEADS = {
    "translation": ("translation", "the encoder-decoder translator (no options: the bundled German->English demo)"),
    "language-modeling": ("language_modeling", "a GPT-style language model: the decoder stack alone"),
    "classification": ("classification", "a sentence classifier: the encoder stack alone"),
}


def main(argv: list[str], prog: str) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in HEADS:
        heads = "\n".join(f"  {name:<18} {help}" for name, (_, help) in HEADS.items())
        message = f"usage: {prog} HEAD [options]\n\nheads:\n{heads}\n\n`{prog} HEAD --help` lists each head's options."
        if argv and argv[0] in ("-h", "--help"):
            print(message)
            return 0
        got = f"unknown head {argv[0]!r}" if argv else "which head to train?"
        return report(prog, f"{got}; the heads are {', '.join(HEADS)} (see --help).")
    module, _ = HEADS[argv[0]]
    prog = f"{prog} {argv[0]}"
    try:
        return importlib.import_module(f"{__package__}.{module}").main(argv[1:], prog)
    except InputError as error:  # named with the head, as a mistake in its options
        return report(prog, error)
