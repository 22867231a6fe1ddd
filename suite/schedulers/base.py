"""The scheduler contract, the ``none`` scheduler, and the ``scheduler`` section of records."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from suite.config import RunConfig
    from suite.plan import Task
    from suite.runner import RunOutcome


class Scheduler(ABC):
    """Decides when and on which nodes the planned tasks run.

    Constructed with the resolved settings (``--site`` is already validated there); never
    imports a DL framework. ``run`` returns when every task has records in
    ``RUN_DIR/results.jsonl`` (or was given a failed record saying why it has none) and raises
    KeyboardInterrupt after cleaning up (its jobs cancelled) on Ctrl-C or SIGTERM."""

    name: str

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    def describe(self, tasks: list[Task]) -> list[str]:
        """What ``--dry-run`` prints after the plan: the scripts and command lines that would
        be submitted (nothing is written or submitted). Empty when there is nothing to show."""
        return []

    @abstractmethod
    def run(self, tasks: list[Task], argv: list[str], console: Console) -> RunOutcome:
        """Run ``tasks`` (skipping those already done when ``cfg.resume``), write their records
        to ``RUN_DIR/results.jsonl`` and return the outcome."""


class NoScheduler(Scheduler):
    """``--scheduler none``: now, on this machine (inside an allocation, on its nodes)."""

    name = "none"

    def run(self, tasks: list[Task], argv: list[str], console: Console) -> RunOutcome:
        from suite import runner

        return runner.run(self.cfg, tasks, argv, console=console)


def slurm_section(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The record's ``scheduler`` section when this process runs inside a Slurm job, from the
    ``SLURM_*`` variables Slurm sets (None outside Slurm)."""
    e = os.environ if env is None else env
    job_id = e.get("SLURM_JOB_ID")
    if not job_id:
        return None
    task_id = e.get("SLURM_ARRAY_TASK_ID")
    return {
        "kind": "slurm",
        "job_id": job_id,
        "array_job_id": e.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": int(task_id) if task_id and task_id.isdigit() else None,
        "nodelist": e.get("SLURM_JOB_NODELIST") or e.get("SLURM_NODELIST"),
        "partition": e.get("SLURM_JOB_PARTITION"),
        "cluster": e.get("SLURM_CLUSTER_NAME"),
    }
