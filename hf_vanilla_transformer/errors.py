"""How a user's mistake ends, the same in every command: one line on stderr naming the option, file or folder and what
was expected, exit status 2, no traceback. Bugs keep their tracebacks."""

import argparse
import sys


class InputError(ValueError):
    """A problem with what a user gave (a file, a column, a folder, an option), named in the message with what was
    expected. `hf-vanilla-transformer` reports it as one line; any other exception is a bug."""


class OneLineErrors:
    """For `argparse.ArgumentParser` subclasses: a wrong option is reported as one line, like an [`InputError`]."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


class CommandParser(OneLineErrors, argparse.ArgumentParser):
    """The argument parser of every sub-command."""


__all__ = ["CommandParser", "InputError", "OneLineErrors"]
