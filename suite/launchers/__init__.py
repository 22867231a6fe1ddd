"""Launchers: *how ranks start* — one process, torchrun, horovodrun, mpirun, srun, or the suite's
own spawn. Each renders its command as an argument list (tested as text) and the backend runs it
for real.

This module is the registry and nothing else: the one list of launcher names. A launcher is its
module (a :class:`~suite.launchers.base.Launcher` subclass declaring what it is) plus one line
here; ``LAUNCHERS.names()`` imports no launcher module, and a launcher whose module does not
import fails only when chosen, saying what is missing (see ``ADDING_LAUNCHERS.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from suite.errors import ConfigError
from suite.registry import Registry

if TYPE_CHECKING:
    from suite.launchers.base import Launcher

LAUNCHERS: Registry[type[Launcher]] = Registry("launcher", error=ConfigError)
LAUNCHERS.register("single", "suite.launchers.base:SingleProcess")
LAUNCHERS.register("torchrun", "suite.launchers.torchrun:Torchrun")
LAUNCHERS.register("mpirun", "suite.launchers.mpirun:Mpirun")
LAUNCHERS.register("srun", "suite.launchers.srun:Srun")
LAUNCHERS.register("spawn", "suite.launchers.spawn:Spawn")
LAUNCHERS.register("horovodrun", "suite.launchers.horovodrun:Horovodrun")

__all__ = ["LAUNCHERS"]
