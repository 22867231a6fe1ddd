"""Run directories into the history store: find them, import them (``dlsuite history import``),
rebuild the store from them (``dlsuite history rebuild``), and the hook at the end of ``dlsuite
run`` (:func:`record_finished_run`). The records stay the source of truth (suite/history/store.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.history.store import AddResult, HistoryStore, HistoryStoreError
from suite.report.load import RESULTS_FILE, Run, load_run

# -- import and rebuild ------------------------------------------------------------------------


def find_run_dirs(paths: Sequence[Path]) -> list[Path]:
    """Run directories under ``paths``: a run directory (or its results.jsonl) itself, or a
    folder of them (searched down to the first ``results.jsonl`` of each branch, so a Slurm
    run's ``part-*`` folders are not taken for runs of their own)."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise ConfigError(f"{p}: no such run directory or results file")
        if p.is_file() or (p / RESULTS_FILE).is_file():
            found.append(p)
            continue
        stack = [p]
        while stack:
            d = stack.pop()
            if (d / RESULTS_FILE).is_file():
                found.append(d)
                continue
            try:
                children = sorted((c for c in d.iterdir() if c.is_dir()), reverse=True)
            except OSError:
                continue
            stack.extend(children)
    return found


def run_dirs_to_import(paths: Sequence[Path]) -> list[Path]:
    """:func:`find_run_dirs`, a ConfigError when there is none (checked before a store is
    made: a mistyped path leaves no empty store behind)."""
    dirs = find_run_dirs(paths)
    if not dirs:
        raise ConfigError(
            f"no run directory (a folder with {RESULTS_FILE}) under {', '.join(map(str, paths))}"
        )
    return dirs


@dataclass
class ImportReport:
    added: list[AddResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line per run directory not imported
    notes: list[str] = field(default_factory=list)


def import_runs(store: HistoryStore, paths: Sequence[Path]) -> ImportReport:
    """Import every run directory under ``paths``; a directory that is not a valid run is
    reported (one line) and the others are imported."""
    report = ImportReport()
    for d in run_dirs_to_import(paths):
        try:
            run: Run = load_run(d)
        except HistoryStoreError:
            raise
        except ConfigError as exc:
            report.problems.append(str(exc))
            continue
        report.notes.extend(run.notes)
        if (run.manifest or {}).get("state") == "running":
            report.notes.append(
                f"{run.path}: its manifest says running: the run was killed (or is still "
                "running); imported with the records it has, state 'running'. `dlsuite run "
                f"--resume --out {run.path}` completes it, and its rows are replaced when it ends"
            )
        report.added.extend(store.add_run_dir(run.path, run.records, run.manifest))
    return report


def rebuild(path: Path, paths: Sequence[Path]) -> tuple[ImportReport, Path | None, bool]:
    """A new store at ``path`` from the run directories; the old file (and its WAL files), if
    any, is moved aside, never deleted. Returns the import report, where the old one went and
    whether the store was replaced: when no run could be imported, the old store stays in place
    (an empty store in its stead would hold nothing and hide the one it replaced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.rebuild-{os.getpid()}")
    for leftover in _store_files(fresh):
        leftover.unlink(missing_ok=True)
    moved: Path | None = None
    try:
        with HistoryStore(fresh, journal_mode="delete") as store:
            report = import_runs(store, paths)
        if not report.added:
            return report, None, False
        if path.exists():
            from suite.provenance import now_iso

            stamp = now_iso().replace(":", "").replace("-", "")[:15]
            moved = path.with_name(f"{path.name}.old-{stamp}")
            i = 1
            while any(Path(f"{moved}{s}").exists() for s in ("", "-wal", "-shm", "-journal")):
                i += 1  # two rebuilds within a second: keep both old files
                moved = path.with_name(f"{path.name}.old-{stamp}-{i}")
            for old, suffix in zip(
                _store_files(path), ("", "-wal", "-shm", "-journal"), strict=True
            ):
                if old.exists():
                    os.replace(old, Path(f"{moved}{suffix}"))
        os.replace(fresh, path)
    finally:
        for leftover in _store_files(fresh):
            leftover.unlink(missing_ok=True)
    return report, moved, True


def _store_files(path: Path) -> list[Path]:
    """The store and the files SQLite keeps beside it."""
    return [path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))]


# -- the hook at the end of `dlsuite run` ------------------------------------------------------


def record_finished_run(
    path: Path, run_dir: Path, records: Sequence[dict[str, Any]]
) -> list[AddResult]:
    """Append a run that just ended (``dlsuite run``'s hook). Raises HistoryStoreError; the
    caller turns it into a warning, the run's records being already safe on disk."""
    with HistoryStore(path) as store:
        return store.add_run_dir(Path(run_dir), records)
