"""What every subcommand's module shares: the parser that reports bad flags as one line (exit
code 2), the flag value types, and the console a command prints to."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from rich.console import Console


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line and exit code 2, with no usage dump."""

    def error(self, message: str) -> NoReturn:
        print(f"dlsuite: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def int_csv(text: str) -> list[int]:
    try:
        return [int(v) for v in csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None


def csv(text: str) -> list[str]:
    from suite.config import split_list

    return split_list(text)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return v


def console(width: int = 180, *, soft_wrap: bool = False) -> Console:
    """A console for a command's output: the terminal's width, else ``width`` (wide enough for
    a log); ``soft_wrap`` keeps a message on one line (greppable), tables still fit."""
    if sys.stdout.isatty():
        return Console(soft_wrap=soft_wrap)
    return Console(width=width, soft_wrap=soft_wrap)
