"""Schedulers: *when and on which nodes* tasks run — ``none`` (now, here) or ``slurm``
(sbatch job arrays whose elements run the suite itself, ranks started by srun).

This module is the registry: the one list of scheduler names (``SCHEDULERS.names()`` imports no
scheduler module). A scheduler is its module, a :class:`~suite.schedulers.base.Scheduler`
subclass that owns its options' checks and its records' ``scheduler`` section, plus one line
here (see ``ADDING_SCHEDULERS.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from suite.errors import ConfigError, SuiteError
from suite.registry import Registry

if TYPE_CHECKING:
    from suite.schedulers.base import Scheduler

SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler", error=ConfigError)
SCHEDULERS.register("none", "suite.schedulers.base:NoScheduler")
SCHEDULERS.register("slurm", "suite.schedulers.slurm:SlurmScheduler")


def environment_section(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The records' ``scheduler`` section for a run in the environment ``env``: inside a job of
    a registered scheduler (a Slurm allocation, say, where ``dlsuite run`` runs with scheduler
    ``none``), the section that scheduler describes; None elsewhere."""
    for name in SCHEDULERS.names():
        try:
            cls = SCHEDULERS.load(name)
        except SuiteError:
            continue  # a scheduler that does not load here started no job here either
        section = cls.record_section(env)
        if section is not None:
            return section
    return None


__all__ = ["SCHEDULERS", "environment_section"]
