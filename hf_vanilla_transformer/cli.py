"""`hf-vanilla-transformer COMMAND ...`: the package's command line, one sub-command per task (`translate`)."""

import argparse
import sys

from . import translate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-vanilla-transformer")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    translate.add_arguments(commands.add_parser("translate", help=translate.__doc__.split("\n")[0]))
    args = parser.parse_args(argv)
    return {"translate": translate.run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
