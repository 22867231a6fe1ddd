"""``dlsuite report``: the Markdown and self-contained HTML report of one or more runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.cli.common import ArgumentParser


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    rp = sub.add_parser(
        "report", help="Markdown and self-contained HTML report of one or more runs"
    )
    rp.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (or results.jsonl files)"
    )
    rp.add_argument(
        "--format",
        dest="fmt",
        choices=("md", "html", "both"),
        default="both",
        help="report.md with its plots in report_plots/, a self-contained report.html, or "
        "both (default); an earlier dlsuite report of the other format in the folder is removed",
    )
    rp.add_argument("--out", help="output directory (default: the first RUN_DIR)")
    return rp


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.cli.history import report_sections
    from suite.projection.report_section import dominant_terms, projection_section
    from suite.report import report_main

    out = Path(args.out) if args.out else None
    # the projection section (it projects the runs' distributed records), and the History
    # section with --trends / --history: sections of packages above the report; the
    # projection's terms reach the report's bounds and findings through ``projected``
    extra = [projection_section, *report_sections(args)]
    removed: list[Path] = []
    for path in report_main(
        [Path(p) for p in args.run_dirs], args.fmt, out, extra, projected=dominant_terms,
        removed=removed,
    ):  # fmt: skip
        print(f"wrote {path}")
    wrote = "report.html" if args.fmt == "html" else "report.md and its plots"
    for path in removed:
        print(
            f"removed {path}{'' if path.suffix else '/'}: left by an earlier dlsuite report "
            f"(--format {args.fmt} writes {wrote} only; --format both writes both)"
        )
    return 0
