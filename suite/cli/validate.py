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
    v.add_argument(
        "path", help="results.jsonl, or a run directory (its results.jsonl and manifest.json)"
    )
    return v


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.results import validate_file

    path = Path(args.path)
    manifest = None
    if path.name == "manifest.json" and path.is_file():  # a run's manifest, given alone
        validate_manifest(path)
        print(f"{path}: valid")
        return 0
    if path.is_dir():
        manifest = path / "manifest.json"
        path = path / "results.jsonl"
    from suite.errors import SchemaError

    try:
        n = validate_file(path)
    except SchemaError as exc:
        if manifest is None or not manifest.is_file():
            raise
        # the manifest too, so one run of validate names everything there is to fix
        try:
            validate_manifest(manifest)
        except SchemaError as bad_manifest:
            raise SchemaError(f"{exc}\n{bad_manifest}") from None
        raise
    if manifest is not None and manifest.is_file():
        # a run directory's manifest (what --resume and the report read) against its schema
        validate_manifest(manifest)
        print(f"{path}: {n} records valid; {manifest.name} valid")
    else:
        print(f"{path}: {n} records valid")
    joined = joined_runs(path)
    if joined:
        print(f"note: {joined}")
    return 0


def joined_runs(path: Path) -> str:
    """Why ``dlsuite compare`` and ``check-references`` would refuse a file of valid records
    (a task's record twice: runs joined), or "" when they would not."""
    from suite.compare import one_record_a_task
    from suite.errors import ConfigError
    from suite.report.load import load_run

    try:
        one_record_a_task("", load_run(path), "compare or check")
    except ConfigError as exc:
        return f"{exc} (`dlsuite compare` and `dlsuite check-references` refuse it)"
    return ""


def validate_manifest(path: Path) -> None:
    """``RUN_DIR/manifest.json`` against ``schemas/manifest.schema.json``; SchemaError naming
    the file and the first bad field."""
    import json

    from suite import schemas
    from suite.errors import SchemaError

    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc}); the run writes it whole") from None
    try:
        schemas.validate("manifest", doc)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None
