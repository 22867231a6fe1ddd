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
    cp.add_argument(
        "--across",
        metavar="FIELD",
        default="",
        help="pair records that differ in these identity fields (comma-separated): device (a "
        "run of another machine), framework (one framework's run against another's)",
    )
    return cp


def parse_across(text: str) -> tuple[str, ...]:
    """``--across device,framework`` → ("device", "framework"); an unknown field is one
    ConfigError naming the fields there are."""
    from suite.compare import ACROSS
    from suite.errors import ConfigError

    fields = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in fields if f not in ACROSS]
    if unknown:
        raise ConfigError(
            f"--across {text}: {', '.join(unknown)} is not a field compare can pair across; "
            f"choose from: {', '.join(ACROSS)}"
        )
    return fields


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.compare import compare_main, parse_tolerance

    return compare_main(
        Path(args.base), Path(args.new), parse_tolerance(args.tolerance), console(),
        include_busy=args.include_busy, across=parse_across(args.across),
    )  # fmt: skip
