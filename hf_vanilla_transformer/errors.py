"""How a user's mistake ends, the same in every command: one line on stderr naming the option, file or folder and what
was expected, exit status 2, no traceback. Bugs keep their tracebacks."""

import argparse
import importlib
import sys


class InputError(ValueError):
    """A problem with what a user gave (a file, a column, a folder, an option), named in the message with what was
    expected. `hf-vanilla-transformer` reports it as one line; any other exception is a bug."""


def report(prog: str, message) -> int:
    """Print a user's mistake as the one line every command ends with, `PROG: error: MESSAGE`, on stderr; return the
    exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class OneLineErrors:
    """For `argparse.ArgumentParser` subclasses: a wrong option is reported as one line, like an [`InputError`]."""

    def error(self, message: str):
        sys.exit(report(self.prog, f"{message} (see --help)"))


class CommandParser(OneLineErrors, argparse.ArgumentParser):
    """The argument parser of every sub-command."""


def one_line(error: Exception) -> str:
    """A library's message (some spread theirs over several lines) as one line, for an [`InputError`]."""
    return " ".join(str(error).split())


def check_at_least(option: str, value, minimum) -> None:
    """Refuse `value` (None: not given) below `minimum`, naming `option`: a count, a size or a beam of 0 would
    otherwise reach a library that fails deep inside (a division by zero, a negative dimension)."""
    if value is not None and value < minimum:
        raise InputError(f"{option} must be at least {minimum}, got {value}.")


def check_minimums(minimums: dict[str, int | float], *parsed) -> None:
    """[`check_at_least`] for every option in `minimums` (name -> least value) that `parsed` (argparse namespaces, a
    recipe's parsed dataclasses) holds, before a command starts its work."""
    for values in parsed:
        for name, minimum in minimums.items():
            check_at_least(f"--{name}", getattr(values, name, None), minimum)


# The package's optional extras (pyproject.toml) and how each is installed.
EXTRAS = {
    "demo": "pip install 'hf-vanilla-transformer[demo]'",
    "export": "pip install 'hf-vanilla-transformer[export]' (in a checkout: bash scripts/setup.sh --export)",
    "ray": "pip install 'hf-vanilla-transformer[ray]'",
    "serve": "pip install 'hf-vanilla-transformer[serve]'",
}


def import_extra(module: str, extra: str, purpose: str):
    """`module` imported, or an [`InputError`] saying that `purpose` needs it and how to install its `extra`."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.split(".")[0]
        broken = "" if isinstance(error, ModuleNotFoundError) and error.name == package else f" ({error})"
        raise InputError(
            f"{purpose} needs {package}, which is not installed{broken}: it comes with the `{extra}` extra, "
            f"{EXTRAS[extra]}."
        ) from None


__all__ = [
    "CommandParser",
    "EXTRAS",
    "InputError",
    "OneLineErrors",
    "check_at_least",
    "check_minimums",
    "import_extra",
    "one_line",
    "report",
]
