"""Host telemetry with ``psutil``: per-sample CPU utilisation and this process's memory, and
the CPU readings of the quiet-machine check (who else keeps the task's cores busy)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity), else all of them."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return list(range(os.cpu_count() or 1))


def _busy_total(t: Any) -> tuple[float, float]:
    """(busy, total) seconds of a psutil cpu_times tuple (idle and iowait are not busy; guest
    time is already in user time on Linux)."""
    d = t._asdict()
    total = sum(v for k, v in d.items() if k not in ("guest", "guest_nice"))
    return total - d.get("idle", 0.0) - d.get("iowait", 0.0), total


class HostReader:
    """One host sample: system CPU utilisation (% of all CPUs since the previous sample),
    this process's CPU (% of one core, all its threads, since the previous sample) and its
    resident memory. Computed from counter deltas, so any thread may call :meth:`read`
    (psutil's own ``cpu_percent`` keeps its state per calling thread)."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.proc = psutil.Process()
        self._last = self._counters()

    def _counters(self) -> tuple[float, float, float, float]:
        busy, total = _busy_total(self.psutil.cpu_times())
        pt = self.proc.cpu_times()
        return time.perf_counter(), busy, total, pt.user + pt.system

    def read(self) -> dict[str, Any]:
        now = self._counters()
        t0, busy0, total0, proc0 = self._last
        self._last = now
        wall, dtotal = now[0] - t0, now[2] - total0
        return {
            "cpu_util_pct": 100.0 * (now[1] - busy0) / dtotal if dtotal > 0 else None,
            "proc_cpu_pct": 100.0 * (now[3] - proc0) / wall if wall > 0 else None,
            "rss_mb": self.proc.memory_info().rss / 2**20,
        }


def own_pids(world_size: int) -> set[int]:
    """This process, its descendants and, for a rank of a multi-rank task, the other processes
    of its launch: its siblings (torchrun, spawn, mpirun and srun start every local rank from
    one parent) and everything below the launch's topmost process (horovodrun starts each rank
    through a process and a shell of its own), so a task's own processes never count as other
    load."""
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids |= {c.pid for c in me.children(recursive=True)}
        parent = me.parent()
        if world_size > 1 and parent is not None:
            pids |= {c.pid for c in parent.children(recursive=True)}
            root = _launch_root(me)
            if root is not None:
                pids |= {root.pid} | {c.pid for c in root.children(recursive=True)}
    except psutil.Error:
        pass
    return pids


def _launch_root(me: Any) -> Any:
    """The topmost ancestor started by the same launch as this rank: the launcher's
    environment (suite/launchers/base.py) names the launcher and the launch's own rendezvous
    port, which every process it starts inherits and nothing above it has. None where this
    rank was not started by one of the suite's launchers or no ancestor can be read."""
    import psutil

    from suite.launchers.base import RANKS_FROM

    mark = {k: os.environ.get(k) for k in (RANKS_FROM, "MASTER_PORT")}
    if not all(mark.values()):
        return None
    root, p = None, me.parent()
    while p is not None and p.pid > 1:
        try:
            env = p.environ()
        except psutil.Error:  # another user's process (Slurm's step daemon): stop here
            break
        if any(env.get(k) != v for k, v in mark.items()):
            break
        root, p = p, p.parent()
    return root


def _cpu_seconds(psutil: Any) -> dict[int, tuple[str, float, float]]:
    """pid -> (name, user + system CPU seconds, those of its children it has reaped) of every
    process this user can read."""
    out: dict[int, tuple[str, float, float]] = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        t = p.info.get("cpu_times")
        if t is None:
            continue
        reaped = float(getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))
        out[p.pid] = (p.info.get("name") or "?", float(t.user + t.system), reaped)
    return out


def _busy_split(psutil: Any, cpus: list[int]) -> tuple[float, float, float]:
    """(busy, steal, total) seconds summed over ``cpus`` since boot; steal (time the
    hypervisor gave to other virtual machines) is not counted as busy."""
    per_cpu = psutil.cpu_times(percpu=True)
    busy = steal = total = 0.0
    for i in cpus:
        if i >= len(per_cpu):
            continue
        b, t = _busy_total(per_cpu[i])
        st = getattr(per_cpu[i], "steal", 0.0)
        busy += b - st
        steal += st
        total += t
    return busy, steal, total


@dataclass
class CpuWindow:
    """CPU use of the task's cores over a short window: everything, ours, and the rest."""

    own: set[int]
    cpus: list[int] = field(default_factory=usable_cpus)

    def start(self) -> None:
        import psutil

        self.psutil = psutil
        self.t0 = time.perf_counter()
        self.split0 = _busy_split(psutil, self.cpus)
        self.procs0 = _cpu_seconds(psutil)

    def finish(self) -> dict[str, Any]:
        psutil = self.psutil
        wall = max(time.perf_counter() - self.t0, 1e-6)
        b1, s1, _ = _busy_split(psutil, self.cpus)
        procs1 = _cpu_seconds(psutil)
        busy = max(0.0, b1 - self.split0[0]) / wall
        steal = max(0.0, s1 - self.split0[1]) / wall
        used: dict[int, tuple[str, float]] = {}
        for pid, (name, secs, _) in procs1.items():
            before = self.procs0.get(pid, (name, 0.0, 0.0))[1]
            delta = max(0.0, secs - before) / wall
            if delta > 0:
                used[pid] = (name, delta)
        # The task's processes that ended in the window (a loader's workers for a warm-up
        # pass) are not there to read at its end: their CPU time reaches their parent, one of
        # the task's own, when it reaps them (its children's times); less what they had used
        # before the window. Without it, a warm loader task's own workers were 1.6 of 2 cores
        # of "other load", no process named.
        reaped = sum(
            max(0.0, c - self.procs0.get(pid, ("", 0.0, 0.0))[2])
            for pid, (_, _, c) in procs1.items() if pid in self.own
        ) - sum(
            s + c for pid, (_, s, c) in self.procs0.items() if pid in self.own and pid not in procs1
        )  # fmt: skip
        own_cores = sum(c for pid, (_, c) in used.items() if pid in self.own)
        own_cores += max(0.0, reaped) / wall
        others = sorted(
            ((pid, name, c) for pid, (name, c) in used.items() if pid not in self.own),
            key=lambda x: -x[2],
        )
        try:
            load1 = os.getloadavg()[0]
        except OSError:
            load1 = None
        return {
            "window_s": wall,
            "usable_cores": len(self.cpus),
            "logical_cpus": psutil.cpu_count() or len(self.cpus),
            "busy_cores": busy,
            "own_cores": own_cores,
            # Busy time of the task's cores not spent by its own processes. Other processes
            # may also run on other cores, so this is the figure that matters to the task.
            "other_cores": max(0.0, busy - own_cores),
            "steal_cores": steal,
            "loadavg_1m": load1,
            "top_other_processes": [
                {"pid": pid, "name": name, "cores": round(c, 3)} for pid, name, c in others[:5]
            ],
        }
