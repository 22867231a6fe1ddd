"""Schedulers: *when and on which nodes* tasks run — ``none`` (now, here) or ``slurm``
(sbatch job arrays whose elements run the suite itself, ranks started by srun)."""

from __future__ import annotations

from suite.errors import ConfigError
from suite.registry import Registry
from suite.schedulers.base import Scheduler, slurm_section

SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler", error=ConfigError)
SCHEDULERS.register("none", "suite.schedulers.base:NoScheduler")
SCHEDULERS.register("slurm", "suite.schedulers.slurm:SlurmScheduler")

__all__ = ["SCHEDULERS", "Scheduler", "slurm_section"]
