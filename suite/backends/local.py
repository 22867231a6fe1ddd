"""The local backend: the worker runs in this interpreter's environment, one process per task."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from suite.backends.base import Backend
from suite.provenance import SOURCE_ROOT


class LocalBackend(Backend):
    kind = "local"

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def command(self, task_path: Path) -> list[str]:
        return [self.python, "-m", "suite.worker", str(task_path)]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # The worker must import this same suite, also when it runs from a source checkout.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SOURCE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        return env
