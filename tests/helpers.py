"""Shared test helpers: run the real CLI in a subprocess, read records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
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
