"""The launcher contract and the rank environment every launcher provides to the worker."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass


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
    name: str

    @abstractmethod
    def command(self, launch: Launch) -> list[str]:
        """The full command line as a list of arguments (never a shell string)."""

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
_RANK_VARIABLES = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("spawn", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("horovodrun", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)


def rank_env(env: Mapping[str, str] | None = None) -> RankEnv:
    """This process's rank, from whichever launcher started it (torchrun, Open MPI, Slurm, PMI).

    A process inherits its parent's variables too: RANK/WORLD_SIZE of a job the suite itself
    runs in, or SLURM_PROCID/SLURM_NTASKS of the allocation. When one of the suite's launchers
    started this process it says which (``DLSUITE_RANKS_FROM``), and that launcher's variables
    win; otherwise the first complete set in the order torchrun, Open MPI, Slurm, PMI."""
    e = os.environ if env is None else env
    source = e.get(RANKS_FROM)
    if source == "single":
        return RankEnv(0, 1, 0, "single")
    order = sorted(_RANK_VARIABLES, key=lambda v: v[0] != source)  # stable: the named one first
    for launcher, rank, size, local in order:
        if rank in e and size in e:
            return RankEnv(int(e[rank]), int(e[size]), int(e.get(local, e[rank])), launcher)
    return RankEnv(0, 1, 0, "single")


def export_rank_env(r: RankEnv) -> None:
    """Set the variables frameworks' env:// initialisation reads (RANK, WORLD_SIZE, LOCAL_RANK);
    a rank started by torchrun or spawn also asks to die with it (see :func:`die_with_parent`)."""
    os.environ["RANK"] = str(r.rank)
    os.environ["WORLD_SIZE"] = str(r.world_size)
    os.environ["LOCAL_RANK"] = str(r.local_rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if r.launcher in ("torchrun", "spawn", "horovodrun"):
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
