"""``dlsuite compare BASE NEW``: two runs compared; exit code 1 on any regression."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.cli.common import ArgumentParser, console


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    cp = sub.add_parser("compare", help="compare two runs; exit code 1 on any regression")
    cp.add_argument("base", metavar="BASE", help="run directory or results.jsonl")
    cp.add_argument("new", metavar="NEW", help="run directory or results.jsonl")
    cp.add_argument(
        "--tolerance", default="5%", help="relative tolerance, 5%% or 0.05 (default 5%%)"
    )
    cp.add_argument(
        "--include-busy",
        action="store_true",
        help="judge differences where a record was measured on a busy machine (the quiet "
        "check's verdict); by default they are shown as busy and do not fail the comparison",
    )
    return cp


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.compare import compare_main, parse_tolerance

    return compare_main(
        Path(args.base), Path(args.new), parse_tolerance(args.tolerance), console(),
        include_busy=args.include_busy,
    )  # fmt: skip
