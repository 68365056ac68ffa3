"""How a user's mistake ends, the same in every command: one line on stderr naming the option, file or folder and what
was expected, exit status 2, no traceback. Bugs keep their tracebacks."""

import argparse
import difflib
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


UNRECOGNIZED = "unrecognized arguments: "  # how argparse (and HfArgumentParser's callers) begin that message


class OneLineErrors:
    """For `argparse.ArgumentParser` subclasses: options by their exact names only, and a wrong option reported as one
    line, like an [`InputError`], naming the option meant where one is close (`--beam`: did you mean --num_beams?).

    argparse would take a prefix of an option for the option (`--max_step 5` as `--max_steps`, `--learning_rat` as
    `--learning_rate`): `allow_abbrev` is False unless a parser asks for it."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        # A sub-command's parser hands the options it does not know to its parent's, which reports them: it suggests
        # from the options of the sub-command that ran.
        self.ran = True
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if message.startswith(UNRECOGNIZED):
            message += did_you_mean(message[len(UNRECOGNIZED) :].split(), self.option_names())
        sys.exit(report(self.prog, f"{message} (see --help)"))

    def option_names(self) -> list[str]:
        """This parser's options and those of the sub-command's parser that ran."""
        names = [name for action in self._actions for name in action.option_strings]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                ran = [parser for parser in action.choices.values() if getattr(parser, "ran", False)]
                names += [name for parser in ran for name in parser.option_names()]
        return names


def did_you_mean(arguments: list[str], options: list[str]) -> str:
    """`; did you mean --num_beams?` for the `arguments` that look like misspelt `options` (a close name, or the name
    with '-' for '_'), or nothing where none does."""
    canonical = {}  # the name with '_' for '-' -> the option, '_' spelling first (HfArgumentParser adds '-' aliases)
    for option in sorted(options, key=lambda option: "-" in option.lstrip("-")):
        canonical.setdefault(_underscored(option), option)
    names = [argument.split("=", 1)[0] for argument in arguments]
    names = [name for name in names if name.startswith("-") and name.lstrip("-")[:1].isalpha()]  # not values
    suggestions = {}
    for name in names:
        wanted = _underscored(name)
        close = [wanted] if wanted in canonical else difflib.get_close_matches(wanted, list(canonical), n=1)
        if close:
            suggestions[name] = canonical[close[0]]
    if not suggestions:
        return ""
    if len(names) == 1:
        return f"; did you mean {suggestions[names[0]]}?"
    return "; did you mean " + ", ".join(f"{option} for {name}" for name, option in suggestions.items()) + "?"


def _underscored(option: str) -> str:
    return "--" + option.lstrip("-").replace("-", "_")


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
    "did_you_mean",
    "import_extra",
    "one_line",
    "report",
]
