"""The launcher contract and the rank environment every launcher provides to the worker.

What a launcher is (starts several ranks? reaches other nodes? which variables give a rank its
number?) is declared on its class, so adding a launcher is its module and one registration in
``suite/launchers/__init__.py``: the settings' checks, the container backends and the ranks
read these declarations, never a list of names."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from suite.errors import SuiteError
from suite.launchers import LAUNCHERS


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; the race window is tiny)."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> tuple[int, ...]:
    """``n`` distinct TCP ports that were free a moment ago (held open together while chosen,
    so the OS cannot hand out the same one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return tuple(int(s.getsockname()[1]) for s in socks)
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class Launch:
    """What a launcher needs to start ``world_size`` ranks of ``worker`` (an argument list)."""

    worker: list[str]  # e.g. [python, -m, suite.worker, TASK.json]
    python: str
    world_size: int
    nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    #: one free port per rank, for runtimes that need every worker's address up front
    #: (TensorFlow's TF_CONFIG, MXNet's servers); exported as DLSUITE_RANK_PORTS
    rank_ports: tuple[int, ...] = ()


class Launcher(ABC):
    """How the ranks of a task start. Constructed with no arguments (``LAUNCHERS.load(name)()``)."""

    #: what ``--launcher`` takes, ``distributed.launcher`` in records, ``DLSUITE_RANKS_FROM``
    name: ClassVar[str]
    #: the most ranks it starts (None: any number); more is a ConfigError before planning
    max_ranks: ClassVar[int | None] = None
    #: started once on this host, it starts ranks on every node of the allocation itself and
    #: gives them a rendezvous address the other nodes reach: only such a launcher takes
    #: ``--nodes`` > 1 (one that starts ranks here only would rendezvous at 127.0.0.1 on each)
    multi_node: ClassVar[bool] = False
    #: a container backend runs it on the host, and it starts one container per rank (it
    #: starts ranks through the host's own services: Slurm's step daemons, Open MPI's); else
    #: it runs inside the one container, with the image's interpreter
    container_per_rank: ClassVar[bool] = False
    #: the variables (rank, world size, local rank) its ranks read; they win over variables
    #: inherited from an outer job (see :func:`rank_env`). None: the usual sets, in order
    rank_variables: ClassVar[tuple[str, str, str] | None] = None
    #: its ranks may live outside its process group (torchrun puts each in a session of its
    #: own), so each asks the kernel to kill it when the launcher dies (:func:`die_with_parent`)
    ranks_die_with_launcher: ClassVar[bool] = False
    #: the Python distribution its command runs with the backend's interpreter (``python -m``):
    #: the framework's environment must hold it (checked when planning, where it can be seen)
    distribution: ClassVar[str | None] = None

    @abstractmethod
    def command(self, launch: Launch) -> list[str]:
        """The full command line as a list of arguments (never a shell string)."""

    @classmethod
    def outside_allocation(cls, nodes: int) -> str:
        """Why it cannot start the ranks of ``nodes`` node(s) outside a Slurm allocation ("" when
        it can): checked when planning a run no scheduler submits and no allocation holds."""
        return ""

    def environment(self, launch: Launch) -> dict[str, str]:
        """Extra environment for the launched processes: the rendezvous, and which launcher
        started them (so a rank reads its own launcher's variables, see :func:`rank_env`)."""
        env = {
            "MASTER_ADDR": launch.master_addr,
            "MASTER_PORT": str(launch.master_port),
            RANKS_FROM: self.name,
        }
        if launch.rank_ports:
            env[RANK_PORTS] = ",".join(str(p) for p in launch.rank_ports)
        return env


class SingleProcess(Launcher):
    """One rank in this process tree: the worker itself."""

    name = "single"
    max_ranks = 1

    def command(self, launch: Launch) -> list[str]:
        if launch.world_size != 1:
            raise ValueError("the single-process launcher runs exactly one rank")
        return list(launch.worker)

    def environment(self, launch: Launch) -> dict[str, str]:
        return {**super().environment(launch), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    launcher: str


RANK_PORTS = "DLSUITE_RANK_PORTS"  # comma-separated, rank i listens on the i-th
RANKS_FROM = "DLSUITE_RANKS_FROM"  # set by the suite's launchers: whose variables to read
#: where a process that none of the suite's launchers started (an outer torchrun or Kubernetes
#: job, mpirun or srun by hand, MPICH or Intel MPI) finds its rank: the conventions, in the
#: order they are tried, each named after the launcher that sets it
INHERITED_RANK_VARIABLES = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("horovodrun", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)


def launcher_class(name: str | None) -> type[Launcher] | None:
    """The registered launcher called ``name`` (None: no such launcher, or it does not load
    here: a rank of a launcher that is not the suite's, such as ``pmi``)."""
    if not name or name not in LAUNCHERS.names():
        return None
    try:
        return LAUNCHERS.load(name)
    except SuiteError:
        return None


def rank_env(env: Mapping[str, str] | None = None) -> RankEnv:
    """This process's rank, from whichever launcher started it (torchrun, Open MPI, Slurm, PMI).

    A process inherits its parent's variables too: RANK/WORLD_SIZE of a job the suite itself
    runs in, or SLURM_PROCID/SLURM_NTASKS of the allocation. When one of the suite's launchers
    started this process it says which (``DLSUITE_RANKS_FROM``), and the variables that
    launcher declares (:attr:`Launcher.rank_variables`) win; otherwise the first complete set
    of :data:`INHERITED_RANK_VARIABLES` (torchrun, Horovod, Open MPI, Slurm, PMI)."""
    e = os.environ if env is None else env
    source = e.get(RANKS_FROM)
    if source == SingleProcess.name:
        return RankEnv(0, 1, 0, SingleProcess.name)
    sets = list(INHERITED_RANK_VARIABLES)
    cls = launcher_class(source)
    if source and cls is not None and cls.rank_variables is not None:
        sets.insert(0, (source, *cls.rank_variables))
    for launcher, rank, size, local in sets:
        if rank in e and size in e:
            return RankEnv(int(e[rank]), int(e[size]), int(e.get(local, e[rank])), launcher)
    return RankEnv(0, 1, 0, SingleProcess.name)


def export_rank_env(r: RankEnv) -> None:
    """Set the variables frameworks' env:// initialisation reads (RANK, WORLD_SIZE, LOCAL_RANK);
    a rank of a launcher that declares ``ranks_die_with_launcher`` (torchrun, spawn,
    horovodrun) also asks to die with it (see :func:`die_with_parent`)."""
    os.environ["RANK"] = str(r.rank)
    os.environ["WORLD_SIZE"] = str(r.world_size)
    os.environ["LOCAL_RANK"] = str(r.local_rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    cls = launcher_class(r.launcher)
    if cls is not None and cls.ranks_die_with_launcher:
        die_with_parent()


PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this process when its parent (the launcher) dies (Linux).

    torchrun starts every rank in a session of its own, so the runner's kill of the launcher's
    process group on a timeout never reaches the ranks: a rank that hangs in a way SIGTERM
    cannot end (a stopped process, one stuck in the kernel) outlived the run, holding its
    memory and its GPU. With this, killing the launcher takes its ranks along; SIGKILL also
    ends a stopped process. Returns whether the request was accepted."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def end_processes(procs: list[subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    """SIGTERM every process of ``procs`` still running, wait up to ``grace_s`` seconds for all
    of them together, then SIGKILL (and reap) those still there. What the spawn launcher does
    to its ranks when one fails, and the adapters to the servers they start (TensorFlow's
    parameter-server cluster, MXNet's ps-lite scheduler and server)."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in alive:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
