"""What every subcommand's module shares: the parser that reports bad flags as one line (exit
code 2), the flag value types, and the console a command prints to."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from rich.console import Console


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line and exit code 2, with no usage dump."""

    _words: list[str] = []  # the command line parsed last (the hint's subcommand)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import re

        super().__init__(*args, **kwargs)
        # a negative percentage ("--tolerance -5%") is a value, as argparse already takes
        # "-0.05": else it reads as an unknown option and the flag as missing its argument
        self._negative_number_matcher = re.compile(r"^-\d+%?$|^-\d*\.\d+%?$")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        import re

        # a subcommand's internal name ("argument history_command: invalid choice") is no
        # word a user typed
        message = re.sub(r"^argument (\w+_)?command: invalid choice:", "unknown command:",
                         message)  # fmt: skip
        hint, prog = self._did_you_mean(message)
        print(f"dlsuite: error: {message}{hint} (see `{prog} --help`)", file=sys.stderr)
        raise SystemExit(2)

    def _did_you_mean(self, message: str) -> tuple[str, str]:
        """For an invalid choice (a misspelt subcommand): "; did you mean check?". For
        unrecognised arguments (which the top-level parser reports): "; did you mean
        --level?" for a misspelt flag, the closest of the flags of the subcommand the command
        line names (its words in order, as argparse reads them), and that subcommand's prog
        for the help to see."""
        import difflib
        import re

        choice = re.search(
            r"(?:invalid choice|unknown command): '([^']*)' \(choose from (.*)\)$", message
        )
        if choice:  # a misspelt subcommand or choice: "history chek"
            options = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            return (f"; did you mean {close[0]}?" if close else ""), self.prog
        if not message.startswith("unrecognized arguments:"):
            return "", self.prog
        flags: set[str] = set()
        parser: argparse.ArgumentParser | None = self
        prog, words = self.prog, list(self._words)
        while parser is not None:
            prog, sub = parser.prog, None
            for action in parser._actions:
                flags.update(o for o in action.option_strings if o.startswith("--"))
                if isinstance(action, argparse._SubParsersAction):
                    # the first positional word names the subcommand
                    at = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
                    if at is not None and words[at] in action.choices:
                        sub, words = action.choices[words[at]], words[at + 1 :]
            parser = sub
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.75)
                if close:
                    return f"; did you mean {close[0]}?", prog
        return "", prog


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
