"""``dlsuite validate PATH``: a results file (or a run directory) against the schema."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.cli.common import ArgumentParser


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    v = sub.add_parser(
        "validate", help="validate a results file (or a run directory) against the schema"
    )
    v.add_argument("path", help="results.jsonl or a run directory")
    return v


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.results import validate_file

    path = Path(args.path)
    if path.is_dir():
        path = path / "results.jsonl"
    n = validate_file(path)
    print(f"{path}: {n} records valid")
    return 0
