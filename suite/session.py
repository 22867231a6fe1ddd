"""Worker sessions: one worker process (per rank) runs a sequence of tasks.

A task still is the unit of a record, of ``--resume`` and of a timeout; what changes is how
many tasks one process runs. Starting a worker costs an interpreter, the framework's import and
the adapter's set-up: ~3 s per task on a CPU, 6-8 s on an H100 with its CUDA context, against
0.1-1 s of sampling. A session pays that once for a sequence of tasks of one environment,
device and rank set (:func:`session_key`).

The protocol is files in the run directory, so it works wherever the run directory is visible
to the worker: a local process, a venv, a container with the run directory bind-mounted, ranks
on other nodes of a Slurm allocation (a shared file system). The runner writes:

* ``tasks/<id>.json`` for every task of the session (as for a single task), then
* ``sessions/<sid>.json``: the session document (``schemas/session.schema.json``): the task
  files in order;

and starts ``python -m suite.worker sessions/<sid>.json`` through the backend and launcher as
it would a single task. Each rank appends one JSON line per event to
``sessions/<sid>.rank<r>.jsonl``: ``start`` before a task and ``end`` after its records are
written (``tasks/<id>.<attempt>.records.jsonl``, as for a single task). The runner follows
those files and reads each task's records as soon as every rank has ended it.

Isolation stays with the runner:

* a task whose worker dies (a crash, a signal, the OOM killer) or stops answering within its
  timeout costs that task only: the runner records it as for a single task, ends the session's
  process group, and starts a fresh session for the tasks after it;
* a task that fails inside the worker (its record says ``failed`` or ``oom``) ends the session
  too: the framework's state after an exception is not trusted for the next task;
* a task's timeout runs from the moment the task before it ended (or the session started).

``--isolate task`` makes every session one task long: one process per task, as before.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.rundir import appended_lines

#: how often the runner looks at a session's progress files
POLL_S = 0.01
#: how long a worker may take to exit after its last task before it is ended
EXIT_GRACE_S = 30.0


def session_key(task: Any, isolate: str) -> tuple[Any, ...]:
    """Tasks that may share one worker process: the same backend (and so environment or
    image), framework, device and rank set (world size, nodes, launcher, ``--dist-backend``).
    A task of several ranks shares only when its adapter keeps its process group across tasks
    (:attr:`Adapter.keeps_process_group`); other frameworks' runtimes cannot be set up twice
    in one process (TensorFlow's collectives, MXNet's parameter servers), so each such task
    gets a process of its own. ``isolate == "task"``: every task alone."""
    if isolate == "task":
        return ("task", task.task_id)
    if task.world_size > 1 and not keeps_process_group(task.framework):
        return ("task", task.task_id)
    return (
        task.backend,
        task.framework,
        task.device,
        task.world_size,
        task.nodes,
        task.launcher,
        task.dist_backend,
    )


def keeps_process_group(framework: str) -> bool:
    from suite.adapters import ADAPTERS
    from suite.errors import SuiteError

    try:
        return bool(ADAPTERS.load(framework).keeps_process_group)
    except SuiteError:
        return False


def isolation_reason(task: Any, isolate: str) -> str | None:
    """Why ``task`` runs in a process of its own (None when it may share one)."""
    if isolate == "task":
        return "--isolate task"
    if task.world_size > 1 and not keeps_process_group(task.framework):
        return (
            f"{task.framework} cannot set up its distributed runtime twice in one process; "
            "each task of several ranks gets its own"
        )
    return None


def sessions(tasks: list[Any], isolate: str) -> list[list[Any]]:
    """The tasks grouped into sessions, in the order they run: single-rank sessions first,
    then by world size (a data-parallel task's 1-rank scaling baseline is then always measured
    before its N-rank runs), and otherwise in the order each session's first task has in the
    plan; within a session, plan order."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for t in tasks:
        groups.setdefault(session_key(t, isolate), []).append(t)
    return sorted(groups.values(), key=lambda g: g[0].world_size)  # stable: plan order kept


@dataclass
class SessionProgress:
    """What the ranks of a session have said so far (``sessions/<sid>.rank<r>.jsonl``)."""

    path_of: Callable[[int], Path]
    world_size: int
    _offsets: dict[int, int] = field(default_factory=dict)
    started: dict[str, set[int]] = field(default_factory=dict)
    ended: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    #: the ranks' process ids, as each said in its first event (the kernel log names them)
    pids: set[int] = field(default_factory=set)

    def poll(self) -> None:
        """Read what the ranks appended since the last poll (whole lines only)."""
        for rank in range(self.world_size):
            path = self.path_of(rank)
            offset = self._offsets.get(rank, 0)
            try:
                data = appended_lines(path, offset)
            except FileNotFoundError:
                continue
            for line in data.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                tid = str(event.get("task_id"))
                if event.get("event") == "start":
                    self.started.setdefault(tid, set()).add(rank)
                    if isinstance(event.get("pid"), int):
                        self.pids.add(event["pid"])
                elif event.get("event") == "end":
                    self.ended.setdefault(tid, {})[rank] = event
            self._offsets[rank] = offset + len(data)

    def all_ended(self, task_id: str) -> bool:
        return len(self.ended.get(task_id, {})) == self.world_size

    def stops_after(self, task_id: str) -> bool:
        """Whether a rank said it ends the session after this task."""
        return any(e.get("stop") for e in self.ended.get(task_id, {}).values())


@dataclass
class Finished:
    """One task of a session, as the runner saw it end."""

    index: int
    #: "ended": every rank wrote its records; "died": the session's process ended first;
    #: "timeout": the task overran its timeout and the session was ended
    how: str
    returncode: int | None = None
    signal: str | None = None
    duration_s: float = 0.0


def follow(
    proc: Any,
    task_ids: list[str],
    timeouts: list[float],
    progress: SessionProgress,
    terminate: Callable[[], None],
    poll_s: float = POLL_S,
    exit_grace_s: float = EXIT_GRACE_S,
    watch: Callable[[], None] = lambda: None,
) -> Iterator[Finished]:
    """Follow a started session: yield each task as it finishes, in order, until the session
    is done or ended early (a death, a timeout, a failed task). The caller records each task
    when it is yielded (so a record is written as soon as its task ends) and starts another
    session for the tasks after the last one yielded. Once its work is done the worker has
    ``exit_grace_s`` to exit (the backend's: what its tool does after the worker, such as
    Apptainer removing the image it unpacked) before it is ended. ``watch`` is called on each
    poll while a task runs (the caller reads the session's output there)."""
    import signal as signals

    base = time.monotonic()
    for i, tid in enumerate(task_ids):
        while True:
            progress.poll()
            if progress.all_ended(tid):
                now = time.monotonic()
                yield Finished(i, "ended", duration_s=now - base)
                base = now
                if progress.stops_after(tid):
                    _wait_exit(proc, terminate, exit_grace_s)
                    return
                break
            rc = proc.poll()
            if rc is not None:
                progress.poll()  # the last lines written before the exit
                if progress.all_ended(tid):
                    continue  # ended after all: take it on the next pass
                sig = signals.Signals(-rc).name if rc < 0 else None
                yield Finished(i, "died", rc, sig, time.monotonic() - base)
                return
            watch()
            if time.monotonic() - base > timeouts[i]:
                terminate()
                yield Finished(i, "timeout", None, None, time.monotonic() - base)
                return
            time.sleep(poll_s)
    _wait_exit(proc, terminate, exit_grace_s)


def _wait_exit(proc: Any, terminate: Callable[[], None], grace_s: float = EXIT_GRACE_S) -> None:
    """The session's work is done: let the worker exit (it leaves its process group and
    returns), and end it if it does not within ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            terminate()
            break
        time.sleep(POLL_S)


def progress_path(run_dir: Path, session_id: str, rank: int) -> Path:
    return run_dir / "sessions" / f"{session_id}.rank{rank}.jsonl"


def write_event(path: Path, event: dict[str, Any]) -> None:
    """Append one event line (open, write, fsync, close: a reader on another node of a
    shared file system sees it after the close)."""
    line = (json.dumps(event, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
