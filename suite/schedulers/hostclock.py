"""What a scheduler costs the host: wall and CPU time per phase, and the commands it ran.

A scheduler that waits for a cluster spends most of its wall time asleep between polls; what
it costs per task is the rest: planning (before the scheduler is called), writing and
submitting the job, polling the queue, and merging records. :class:`HostClock` charges every
moment of the scheduler's own run to exactly one phase (phases nest: entering one pauses the
enclosing one), with the process's CPU time and that of the commands it waited for (``squeue``
and the like, from ``RUSAGE_CHILDREN``) beside the wall time. The Slurm scheduler appends one
line per invocation to ``RUN_DIR/slurm/host.jsonl`` (docs/guide/clusters.md, "At scale").
"""

from __future__ import annotations

import os
import resource
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class PhaseTime:
    """Time charged to one phase."""

    wall_s: float = 0.0
    cpu_s: float = 0.0  # this process (every thread)
    children_cpu_s: float = 0.0  # the commands it ran and waited for
    entries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 6),
            "cpu_s": round(self.cpu_s, 6),
            "children_cpu_s": round(self.children_cpu_s, 6),
            "entries": self.entries,
        }


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _now() -> tuple[float, float, float]:
    return time.perf_counter(), time.process_time(), _children_cpu()


def process_started_ago() -> float | None:
    """Seconds since this process started (from /proc; None where there is none): the time
    spent before the scheduler was called, on start-up, settings and planning."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of proc(5), counted after the ")"
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class HostClock:
    """Wall and CPU time per phase of a run on the host, and the commands run per name.

    ``with clock.phase("merge"): ...`` charges what happens inside to ``merge`` (a phase
    entered inside another pauses the outer one, so nothing is counted twice); time outside
    every phase is charged to ``other``. ``before`` holds what the process spent before the
    clock started (start-up, settings, planning), wall from /proc and CPU from its counters."""

    def __init__(self) -> None:
        wall, cpu, children = _now()
        ago = process_started_ago()
        self.before = PhaseTime(
            wall_s=ago if ago is not None else 0.0, cpu_s=cpu, children_cpu_s=children, entries=1
        )
        self.phases: dict[str, PhaseTime] = {}
        self.commands: Counter[str] = Counter()
        self.command_wall_s: dict[str, float] = {}
        self._stack = ["other"]
        self._mark = (wall, cpu, children)
        self._started = wall
        self.counts: Counter[str] = Counter()

    def _charge(self) -> None:
        now = _now()
        p = self.phases.setdefault(self._stack[-1], PhaseTime())
        p.wall_s += now[0] - self._mark[0]
        p.cpu_s += now[1] - self._mark[1]
        p.children_cpu_s += now[2] - self._mark[2]
        self._mark = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge()
        self._stack.append(name)
        self.phases.setdefault(name, PhaseTime()).entries += 1
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    @contextmanager
    def command(self, name: str) -> Iterator[None]:
        """A command (``squeue``, ``sbatch``...): counted, its wall time kept, charged to the
        phase ``name``."""
        self.commands[name] += 1
        t0 = time.perf_counter()
        try:
            with self.phase(name):
                yield
        finally:
            wall = time.perf_counter() - t0
            self.command_wall_s[name] = self.command_wall_s.get(name, 0.0) + wall

    def to_dict(self) -> dict[str, Any]:
        """The totals so far: ``before`` the clock, each phase, the commands, and ``busy``
        (everything but the phase ``sleep``: the host's own overhead)."""
        self._charge()
        phases = {k: v.to_dict() for k, v in sorted(self.phases.items())}
        busy = PhaseTime()
        for name, p in [("before", self.before), *self.phases.items()]:
            if name != "sleep":
                busy.wall_s += p.wall_s
                busy.cpu_s += p.cpu_s
                busy.children_cpu_s += p.children_cpu_s
        return {
            "before": self.before.to_dict(),
            "phases": phases,
            "busy": busy.to_dict(),
            "elapsed_s": round(time.perf_counter() - self._started, 6),
            "commands": dict(sorted(self.commands.items())),
            "command_wall_s": {k: round(v, 6) for k, v in sorted(self.command_wall_s.items())},
            "counts": dict(sorted(self.counts.items())),
        }
