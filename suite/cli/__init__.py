"""The command line: ``dlsuite run | list | report | ...``. Host side: imports no DL framework.

One module per subcommand (``suite/cli/<command>.py``: ``add_parser`` registers it, ``main``
runs it) and one dispatch table, :data:`COMMANDS`. Any SuiteError (bad input, missing
dependency) becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args: argparse.Namespace = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command].main(args, argv))
    except SuiteError as exc:
        print(f"dlsuite: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
