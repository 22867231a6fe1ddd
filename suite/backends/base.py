"""The backend contract: render the worker command as an argument list, then run it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from suite.errors import SuiteError
from suite.session import EXIT_GRACE_S

if TYPE_CHECKING:
    from suite.oom import WorkerCgroup
    from suite.settings import RunConfig


@dataclass(frozen=True)
class WorkerResult:
    returncode: int | None
    timed_out: bool
    duration_s: float
    signal: str | None = None


class Backend(ABC):
    """Where a worker runs. The runner makes one with :meth:`create` on the first task that
    needs it (one per framework when :attr:`per_framework`)."""

    #: what ``--backend`` takes, and ``backend.kind`` in records
    kind: ClassVar[str]
    #: one backend per framework (its own environment or image), not one for every framework
    per_framework: ClassVar[bool] = False
    #: set by the runner once a worker refused this checkout's task document (its suite is
    #: older): the error the backend's remaining tasks are recorded with, none started again
    refused_task: SuiteError | None = None
    #: set by the runner once it said that this backend's workers start slowly (slow_start)
    said_slow_start: bool = False

    @classmethod
    def create(cls, framework: str, settings: RunConfig) -> Backend:
        """The backend for ``framework``'s tasks under ``settings``. The default constructs the
        class with no arguments; a backend that needs the framework or a setting (the venv
        backend: ``--envs-dir``) overrides this. A SuiteError raised here (an environment that
        cannot be built, an image that is missing) gives every task of the framework a failed
        record carrying its message, and the run goes on."""
        return cls()

    @abstractmethod
    def command(self, task_path: Path) -> list[str]:
        """The worker command line as a list of arguments (never passed through a shell)."""

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    python: str = "python3"
    #: how long a worker session may take to exit once its last task has ended, before the
    #: runner ends it (suite/session.py): a worker that hangs at exit costs this long
    exit_grace_s: float = EXIT_GRACE_S
    #: how long a worker ended by the runner (a timeout, an interrupt) has between SIGTERM and
    #: SIGKILL (:func:`terminate_group`)
    stop_grace_s: float = 5.0

    def launch_command(
        self, task_path: Path, launcher: Any = None, world_size: int = 1, nodes: int = 1
    ) -> tuple[list[str], dict[str, str]]:
        """The command line that starts every rank, and its environment: ``command()``
        wrapped in the launcher's command (a container backend puts the launcher inside)."""
        from suite.launchers.base import Launch, free_port, free_ports

        argv = self.command(task_path)
        env = self.environment()
        if launcher is not None:
            ports = free_ports(world_size + 1) if world_size > 1 else (free_port(),)
            launch = Launch(
                worker=argv,
                python=self.python,
                world_size=world_size,
                nodes=nodes,
                master_port=ports[0],
                rank_ports=ports[1:],
            )
            argv = launcher.command(launch)
            env.update(launcher.environment(launch))
        return argv, env

    def start(
        self,
        path: Path,
        log_path: Path,
        launcher: Any = None,
        world_size: int = 1,
        nodes: int = 1,
        cgroup: WorkerCgroup | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start the worker on ``path`` (a task or a worker session's document, through
        ``launcher`` for several ranks) in a process group of its own, its output appended
        to ``log_path``; the caller waits for it or ends it (:func:`terminate_group`).
        ``cgroup``: a memory cgroup of the worker's own to start it in (suite/oom.py), whose
        OOM-kill count tells the kernel's OOM killer from another SIGKILL."""
        self.prepare(path)
        argv, env = self.launch_command(path, launcher, world_size, nodes)
        if cgroup is not None:
            argv = cgroup.enter(argv)
        with log_path.open("ab") as log:
            header = self.log_header(argv)
            if header:
                log.write(header.encode() + b"\n")
                log.flush()
            return subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def log_header(self, argv: list[str]) -> str | None:
        """A first line for the worker's log (the command line, to rerun by hand); None: none."""
        return None

    def startup_failure(self, output: str) -> str | None:
        """The line in which this backend's own tool (a container runtime) said, in a
        worker's ``output``, that it could not start the worker; None where it said none."""
        return None

    def slow_start(self, output: str) -> str | None:
        """One line for the user where this backend's tool said, in a starting worker's
        ``output``, that the worker's start will take long (Apptainer unpacking a SIF); None
        where it said nothing of the kind."""
        return None

    def stale_worker_hint(self) -> str | None:
        """Where a worker refused this checkout's task document (its suite is another's):
        which suite the worker runs and how to bring it up to date; None where this backend
        cannot tell (its worker is this checkout's suite)."""
        return None

    def prepare(self, path: Path) -> None:
        """Before the worker on ``path`` starts. A container backend clears what an earlier
        worker left and hands the run directory to the image's user here."""
        return None

    def finish(self, path: Path, ended_early: bool) -> None:
        """After the worker on ``path`` is gone; ``ended_early``: it was ended (a timeout, an
        interrupt) rather than exiting by itself. A container backend cleans up here."""
        return None

    def run(
        self,
        task_path: Path,
        log_path: Path,
        timeout_s: float,
        launcher: Any = None,
        world_size: int = 1,
        nodes: int = 1,
    ) -> WorkerResult:
        """Run the worker (through ``launcher`` for several ranks) to its end; on timeout the
        whole process group — launcher and every rank — is terminated, then killed."""
        t0 = time.perf_counter()
        proc = self.start(task_path, log_path, launcher, world_size, nodes)
        ended_early = True
        try:
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                terminate_group(proc, self.stop_grace_s)
                return WorkerResult(None, True, time.perf_counter() - t0)
            except BaseException:  # KeyboardInterrupt: leave no orphan behind
                terminate_group(proc, self.stop_grace_s)
                raise
            ended_early = False
        finally:
            self.finish(task_path, ended_early)
        sig = signal.Signals(-rc).name if rc < 0 else None
        return WorkerResult(rc, False, time.perf_counter() - t0, sig)


def terminate_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``; reap the child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace_s)
            # the leader is gone; make sure nothing else of its group survives
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.wait()
