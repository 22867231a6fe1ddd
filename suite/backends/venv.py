"""The venv backend: the worker runs in the framework's own environment, ``.venvs/<fw>-<hash>``
(see suite/envs.py), built on first use. Frameworks that cannot share an interpreter (MXNet
needs NumPy < 1.24, Horovod pins old framework releases) each get theirs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from suite import envs
from suite.backends.base import Backend
from suite.backends.local import LocalBackend

if TYPE_CHECKING:
    from suite.settings import RunConfig


class VenvBackend(LocalBackend):
    kind = "venv"
    per_framework = True

    @classmethod
    def create(cls, framework: str, settings: RunConfig) -> Backend:
        """The framework's environment under ``--envs-dir`` (built now if it is not there)."""
        return cls(framework, envs.envs_root(settings.envs_dir))

    def __init__(self, framework: str, root: Path | None = None) -> None:
        self.env = envs.ensure(framework, root)
        super().__init__(python=str(self.env.python))

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # as if the environment were activated: its scripts (torchrun, horovodrun) come first
        env["VIRTUAL_ENV"] = str(self.env.path)
        env["PATH"] = os.pathsep.join([str(self.env.path / "bin"), env.get("PATH", "")])
        env.pop("PYTHONHOME", None)
        return env
