"""The command line: ``dlsuite run | list | report | ...``. Host side: imports no DL framework.

One module per subcommand (``suite/cli/<command>.py``: ``add_parser`` registers it, ``main``
runs it) and one dispatch table, :data:`COMMANDS`. Any SuiteError (bad input, missing
dependency) becomes one line on stderr and exit code 2. Output piped into a reader that stops
early (``dlsuite list | head -1``) ends the command quietly, as Unix tools end.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from types import ModuleType

from rich.console import Console

from suite.cli import (
    check_references,
    compare,
    data,
    envs,
    history,
    images,
    inspect,
    listing,
    project,
    reframe,
    report,
    run,
    validate,
)
from suite.cli.common import ArgumentParser
from suite.errors import SuiteError

#: every subcommand and its module, in the order ``dlsuite --help`` lists them (``history``
#: after ``run`` and ``report``: it adds their ``--history`` flags)
COMMANDS: dict[str, ModuleType] = {
    "run": run,
    "envs": envs,
    "list": listing,
    "report": report,
    "compare": compare,
    "check-references": check_references,
    "images": images,
    "history": history,
    "reframe": reframe,
    "project": project,
    "data": data,
    "inspect": inspect,
    "validate": validate,
}


def build_parser() -> ArgumentParser:
    from suite import __version__

    p = ArgumentParser(prog="dlsuite", description="Multi-framework deep-learning benchmark suite.")
    p.add_argument("--version", action="version", version=f"dlsuite {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    parsers: dict[str, ArgumentParser] = {}
    for name, module in COMMANDS.items():
        parsers[name] = module.add_parser(sub, parsers)
    return p


#: the exit status of a command whose reader closed the pipe: a Unix tool's, killed by SIGPIPE
EXIT_BROKEN_PIPE = 128 + 13


def _reader_gone(console: Console) -> None:
    """Rich's own handling (``SystemExit(1)``, stdout pointed at /dev/null whichever stream
    broke) replaced: nothing more from this console, and the BrokenPipeError goes on, to end the
    command as :func:`main` ends it (a run first marks itself interrupted, as for Ctrl-C)."""
    console.quiet = True
    raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def main(argv: list[str] | None = None) -> int:
    """Run one command; a closed standard output (the reader stopped) ends it quietly with
    :data:`EXIT_BROKEN_PIPE` instead of a BrokenPipeError traceback, here or at exit. A run
    whose output's reader went away stops as an interrupted one (``--resume`` continues it)."""
    Console.on_broken_pipe = _reader_gone  # type: ignore[method-assign,assignment]
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        # what is still buffered cannot be written: point stdout at /dev/null so the
        # interpreter's own flush at exit does not report the same error again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args: argparse.Namespace = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command].main(args, argv))
    except SuiteError as exc:
        print(f"dlsuite: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
