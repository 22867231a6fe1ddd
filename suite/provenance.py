"""Provenance: suite version and git commit, host, Python, timestamps. No framework imported."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import suite

SOURCE_ROOT = Path(suite.__file__).resolve().parent.parent
#: in a copy of a checkout, which has no .git: the commit it was made from
SOURCE_STAMP = ".dlsuite-source.json"


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def hostname() -> str:
    return socket.gethostname() or platform.node() or "unknown"


@cache
def git_info() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the suite's source tree; images bake DLSUITE_GIT_COMMIT in instead."""
    env_commit = os.environ.get("DLSUITE_GIT_COMMIT")
    if env_commit:
        return env_commit, None
    return tree_commit(SOURCE_ROOT)


def tree_commit(root: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout at ``root``: from git, or from the stamp a copy of a
    checkout carries (images.check_source_copy); (None, None) when neither says."""
    if not (root / ".git").exists():
        stamp = root / SOURCE_STAMP
        if stamp.is_file():
            doc = json.loads(stamp.read_text())
            return doc.get("git_commit"), doc.get("git_dirty")
        return None, None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return commit or None, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def host_provenance() -> dict[str, Any]:
    """Computed on the host once per run and passed to every worker in the task."""
    commit, dirty = git_info()
    return {"suite_version": suite.__version__, "git_commit": commit, "git_dirty": dirty}


def worker_provenance(host_side: dict[str, Any], versions: dict[str, str | None]) -> dict[str, Any]:
    try:
        import numpy

        numpy_version: str | None = numpy.__version__
    except ImportError:
        numpy_version = None
    out = {
        "suite_version": suite.__version__,
        "git_commit": None,
        "git_dirty": None,
        **host_side,
        "python": platform.python_version(),
        "numpy": numpy_version,
        "platform": platform.platform(),
        "versions": versions,
    }
    return out
