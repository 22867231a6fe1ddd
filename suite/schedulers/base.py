"""The scheduler contract and the ``none`` scheduler."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from suite.errors import ConfigError
from suite.rundir import RunOutcome
from suite.settings import SCHEDULER_OPTIONS

if TYPE_CHECKING:
    from rich.console import Console

    from suite.plan import Task
    from suite.settings import RunConfig


class Scheduler(ABC):
    """Decides when and on which nodes the planned tasks run.

    The class owns what is particular to it: the options it takes (:attr:`options`, checked by
    :meth:`check_options` while the settings are resolved, before planning) and the
    ``scheduler`` section of the records a run inside one of its jobs writes
    (:meth:`record_section`). Constructed with the resolved settings; never imports a DL
    framework. ``run`` returns when every task has records in ``RUN_DIR/results.jsonl`` (or
    was given a failed record saying why it has none) and raises KeyboardInterrupt after
    cleaning up (its jobs cancelled) on Ctrl-C or SIGTERM."""

    #: what ``--scheduler`` takes (also ``[run] scheduler``, ``DLSUITE_SCHEDULER``, a site's)
    name: ClassVar[str]
    #: the settings of :data:`~suite.settings.SCHEDULER_OPTIONS` this scheduler takes (given
    #: with a scheduler that does not take them, they are an error naming the ones that do)
    options: ClassVar[frozenset[str]] = frozenset()
    #: how a message says to choose it (default ``--scheduler NAME``)
    usage: ClassVar[str | None] = None

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    @classmethod
    def check_options(cls, cfg: RunConfig) -> None:
        """Check the settings this scheduler reads, raising ConfigError (exit 2, one line
        naming the flag and the fix). Called for the chosen scheduler when the settings are
        resolved, before anything is planned, written or submitted. This default refuses the
        options of other schedulers (naming the schedulers that take them); a scheduler with
        options of its own checks them after calling it."""
        foreign = [
            o for o in SCHEDULER_OPTIONS if o not in cls.options and getattr(cfg, o) is not None
        ]
        if not foreign:
            return
        from suite.schedulers import SCHEDULERS

        owners = [
            SCHEDULERS.load(name).choose_with()
            for name in SCHEDULERS.names_where(lambda other: set(foreign) <= other.options)
        ]
        flags = ", ".join(SCHEDULER_OPTIONS[o] for o in foreign)
        if owners:
            raise ConfigError(f"{flags}: only with {' or '.join(owners)}")
        raise ConfigError(f"{flags}: {cls.choose_with()} takes no such option")

    @classmethod
    def choose_with(cls) -> str:
        """How a message says to choose this scheduler (:attr:`usage`, else the flag)."""
        return cls.usage or f"--scheduler {cls.name}"

    @classmethod
    def record_section(cls, env: Mapping[str, str]) -> dict[str, Any] | None:
        """The records' ``scheduler`` section when this process runs inside one of this
        scheduler's jobs, from the variables it sets there (None: not inside one). Its keys
        are those of ``scheduler`` in ``schemas/result.schema.json``."""
        return None

    def describe(self, tasks: list[Task]) -> list[str]:
        """What ``--dry-run`` prints after the plan: the scripts and command lines that would
        be submitted (nothing is written or submitted). Empty when there is nothing to show."""
        return []

    @abstractmethod
    def run(self, tasks: list[Task], argv: list[str], console: Console) -> RunOutcome:
        """Run ``tasks`` (skipping those already done when ``cfg.resume``), write their records
        to ``RUN_DIR/results.jsonl`` and return the outcome."""


class NoScheduler(Scheduler):
    """``--scheduler none``: now, on this machine (inside an allocation, on its nodes; the
    records then carry the section of the scheduler whose job this is)."""

    name = "none"

    def run(self, tasks: list[Task], argv: list[str], console: Console) -> RunOutcome:
        from suite import runner
        from suite.schedulers import environment_section

        section = environment_section(os.environ)
        return runner.run(self.cfg, tasks, argv, console=console, scheduler_section=section)
