"""Shared test helpers: run the real CLI in a subprocess, read records."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the unprivileged user (and group) the tests run a step as, where they run as root
NOBODY = 65534


def require_reachable_by_nobody(path: Path) -> None:
    """Fail in one line, before a step runs as :data:`NOBODY`, where that user cannot reach
    ``path``: a checkout under a directory only its owner may enter (``mktemp -d`` makes
    them 0700) would otherwise fail there with "Permission denied" and exit 126."""
    for d in [p for p in (path, *path.parents) if p.is_dir()]:
        mode = stat.S_IMODE(d.stat().st_mode)
        if not mode & stat.S_IXOTH or (d == path and not mode & stat.S_IROTH):
            pytest.fail(
                f"{d} has mode {mode:o}: this test runs a step as the unprivileged user "
                f"{NOBODY}, who cannot reach {path}; make the checkout readable by others "
                f"(chmod o+rx {d}) or clone it under a directory that is",
                pytrace=False,
            )
    if path.is_file() and not stat.S_IMODE(path.stat().st_mode) & stat.S_IROTH:
        pytest.fail(f"{path} is not readable by others (chmod o+r {path})", pytrace=False)


#: ``--config`` for the tests' whole-level runs: a 0.25 s time budget (see the file)
FAST_MEASURE = ROOT / "tests" / "fast-measure.toml"


def cli(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m suite ARGS`` with this interpreter, as a user would run ``dlsuite``."""
    # the checkout first, then whatever the caller's PYTHONPATH holds (an adapter package)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "suite", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or ROOT,
    )


def records(run_dir: Path) -> list[dict[str, Any]]:
    return records_at(run_dir / "results.jsonl")


def records_at(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
