"""Mistakes in what a user gave (a file, a column, a folder, an option), told apart from bugs."""

import functools
import os
import sys
from collections.abc import Callable


class InputError(ValueError):
    """A problem with the user's input, named in the message with what was expected.

    The command-line scripts report it as one line and a non-zero exit status; any other exception is a bug and keeps
    its traceback.
    """


def exit_on_input_error(main: Callable) -> Callable:
    """Wrap a command-line `main`: an [`InputError`] ends the program with its message on stderr and exit status 1."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except InputError as error:
            raise SystemExit(f"{os.path.basename(sys.argv[0])}: error: {error}") from None

    return run


__all__ = ["InputError", "exit_on_input_error"]
