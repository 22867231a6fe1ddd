"""Launchers: *how ranks start* — one process, torchrun, horovodrun, mpirun, srun, or the suite's own spawn. Each renders its
command as an argument list (tested as text) and the backend runs it for real."""

from __future__ import annotations

from suite.errors import ConfigError
from suite.launchers.base import Launcher, RankEnv, free_port, rank_env
from suite.registry import Registry

LAUNCHERS: Registry[type[Launcher]] = Registry("launcher", error=ConfigError)
LAUNCHERS.register("single", "suite.launchers.base:SingleProcess")
LAUNCHERS.register("torchrun", "suite.launchers.torchrun:Torchrun")
LAUNCHERS.register("mpirun", "suite.launchers.mpirun:Mpirun")
LAUNCHERS.register("srun", "suite.launchers.srun:Srun")
LAUNCHERS.register("spawn", "suite.launchers.spawn:Spawn")
LAUNCHERS.register("horovodrun", "suite.launchers.horovodrun:Horovodrun")

__all__ = ["LAUNCHERS", "Launcher", "RankEnv", "free_port", "rank_env"]
