"""``dlsuite check-references RUN_DIR REFERENCES...``: a run against reference values."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.cli.common import ArgumentParser, console


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    cr = sub.add_parser(
        "check-references", help="check a run against reference values (references/*.toml)"
    )
    cr.add_argument("run_dir", metavar="RUN_DIR", help="run directory or results.jsonl")
    cr.add_argument(
        "references", nargs="+", metavar="REFERENCES", help="references .toml files or directories"
    )
    cr.add_argument(
        "--include-busy",
        action="store_true",
        help="judge values measured on a busy machine (the quiet check's verdict); by default "
        "they are shown as busy and do not fail the check, as in `dlsuite compare`",
    )
    return cr


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.references import check_references_main

    return check_references_main(
        Path(args.run_dir), [Path(p) for p in args.references], console(),
        include_busy=args.include_busy,
    )  # fmt: skip
