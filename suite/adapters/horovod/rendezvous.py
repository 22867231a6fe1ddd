"""Joining Horovod (0.28.1, gloo controller) from any launcher, for both Horovod adapters.

``horovod.torch`` (suite/adapters/horovod/adapter.py) and ``horovod.tensorflow``
(suite/adapters/horovod/adapter_tensorflow.py) share Horovod's runtime: the same ``init``/``shutdown``,
the same gloo rendezvous. ``horovodrun --gloo`` starts that rendezvous server and gives every
rank its HOROVOD_* variables; under any other launcher of the suite (spawn, torchrun, mpirun,
srun) rank 0 runs the same server (Horovod's ``RendezvousHTTPServer``) at MASTER_ADDR and its
launcher port, and every rank sets the variables horovodrun would have set, from its rank, local
rank and node. Imports Horovod only inside the functions (called from a worker).
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

from suite.errors import SuiteError
from suite.launchers.base import RANK_PORTS

_HVD_NO_COMPRESSION = (
    "Horovod 0.28.1's gradient compression is Compression.none or Compression.fp16 only"
)
#: the strategies neither Horovod adapter can run (Horovod's own limits, shared)
UNSUPPORTED_STRATEGIES: dict[str, str] = {
    "ps-sync": "Horovod is allreduce only: it has no parameter server",
    "ps-async": "Horovod is allreduce only: it has no parameter server",
    "ssp": "Horovod is allreduce only, synchronous: no stale-synchronous mode",
    "bf16": _HVD_NO_COMPRESSION,
    "powersgd": _HVD_NO_COMPRESSION,
    "2bit": _HVD_NO_COMPRESSION,
    "1bit": _HVD_NO_COMPRESSION,
    "local-sgd": "Horovod has no model averaging: backward_passes_per_step accumulates "
    "gradients locally and then allreduces them (gradient accumulation, not local SGD)",
    "pipeline": "Horovod has no pipeline parallelism (data parallelism only)",
    "adasum": "Horovod's Adasum runs on CPUs through MPI (AdasumMPIAllreduceOp) and on GPUs "
    "through NCCL; this Horovod is built with gloo only (containers/horovod/: no MPI, no NCCL), "
    "and refuses it: 'No Adasum operation enabled'",
}

#: set by horovodrun (and by ``join`` when it hosts the rendezvous itself)
RENDEZVOUS_ADDR = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
#: Horovod's tensor fusion: the largest fused allreduce (bytes) and the time between its
#: background thread's cycles (ms). Both are read once, by that thread as it starts, before
#: ``hvd.init()`` returns (``BackgroundThreadLoop``, horovod/common/operations.cc); 0.28.1's
#: defaults are 128 MiB and 1 ms (64 MiB and 5 ms before 0.21: horovod#2468)
FUSION_THRESHOLD, CYCLE_TIME = "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME"
DEFAULT_FUSION_BYTES, DEFAULT_CYCLE_MS = 128 * 2**20, 1.0


def join(hvd: Any, backend: str, fusion_bytes: int | None = None) -> Any:
    """``hvd.init()`` (``hvd`` is ``horovod.torch`` or ``horovod.tensorflow``), hosting the
    rendezvous first when horovodrun did not start the ranks, with HOROVOD_FUSION_THRESHOLD
    set to ``fusion_bytes`` for the init where given (and put back after it). Returns the
    rendezvous server this rank hosts (rank 0 under another launcher), else None; pass it to
    ``leave``."""
    if backend not in ("auto", "gloo"):
        raise SuiteError(
            f"horovod here runs its gloo controller (built without MPI/NCCL), not "
            f"{backend!r}; use --dist-backend auto"
        )
    server = None if RENDEZVOUS_ADDR in os.environ else host_rendezvous()
    before = os.environ.get(FUSION_THRESHOLD)
    if fusion_bytes is not None:
        os.environ[FUSION_THRESHOLD] = str(int(fusion_bytes))
    try:
        hvd.init()
    finally:
        if before is None:
            os.environ.pop(FUSION_THRESHOLD, None)
        else:
            os.environ[FUSION_THRESHOLD] = before
    if not hvd.is_initialized() or hvd.size() != int(os.environ.get("WORLD_SIZE", "1")):
        raise SuiteError(
            f"horovod joined {hvd.size()} ranks, the launcher started "
            f"{os.environ.get('WORLD_SIZE')}"
        )
    return server


def fusion_in_effect(fusion_bytes: int | None) -> dict[str, Any]:
    """What Horovod's background thread read as it started (``join``): the fusion threshold
    (``fusion_bytes`` where the task set one, else the environment's, else the default) and
    the cycle time, each with where it came from."""
    env = os.environ

    def read(name: str, default: float, number: str) -> tuple[float, str]:
        if name not in env:
            return default, "default"
        # as Horovod reads it, strtol/strtof: the leading number, 0 where there is none
        found = re.match(number, env[name])
        return (float(found.group()) if found else 0.0), f"environment ({name}={env[name]})"

    threshold, source = (
        (float(fusion_bytes), "bucket")
        if fusion_bytes is not None
        else read(FUSION_THRESHOLD, DEFAULT_FUSION_BYTES, r"\s*[+-]?\d+")
    )
    cycle, cycle_source = read(
        CYCLE_TIME, DEFAULT_CYCLE_MS, r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
    )
    return {
        "horovod_fusion_threshold_bytes": int(threshold),
        "horovod_fusion_threshold_from": source,
        "horovod_cycle_ms": cycle,
        "horovod_cycle_from": cycle_source,
    }


def leave(
    hvd: Any, server: Any, clean: bool = True, barrier: Callable[[], None] | None = None
) -> None:
    """A closing barrier (only when no rank failed: it would block; ``barrier``, else
    ``hvd.barrier``), ``hvd.shutdown()``, and the rendezvous server stopped if this rank
    hosted it."""
    if hvd is not None and hvd.is_initialized():
        if clean:
            (barrier or hvd.barrier)()
        hvd.shutdown()
    if server is not None:
        server.shutdown()


def versions(hvd: Any) -> dict[str, str | None]:
    import horovod

    return {
        "horovod": horovod.__version__,
        "horovod_gloo": str(hvd.gloo_built()),
        "horovod_mpi": str(hvd.mpi_built()),
        "horovod_nccl": str(bool(hvd.nccl_built())),
    }


def host_rendezvous() -> Any:
    """What horovodrun does before it starts the ranks, for a launcher that is not
    horovodrun: rank 0 serves Horovod's gloo rendezvous (the server is returned), every rank
    gets its HOROVOD_* variables from the launcher's rank, local rank and node."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_size = _local_size(size)
    if size % local_size:
        raise SuiteError(f"{size} ranks do not split into nodes of {local_size}")
    nodes = size // local_size
    node = rank // local_size
    # the same allocation plan horovodrun makes, with one name per node
    hosts = ",".join(f"node{i}:{local_size}" for i in range(nodes))
    plan = get_host_assignments(parse_hosts(hosts), size)
    slot = plan[rank]
    if (slot.local_rank, slot.cross_rank) != (local_rank, node):
        raise SuiteError(
            f"rank {rank}: launcher says local rank {local_rank} on node {node}, "
            f"Horovod's plan says {slot.local_rank} on {slot.cross_rank}"
        )
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    # rank 0's own port from the launcher (MASTER_PORT may be taken: torchrun's store)
    ports = os.environ.get(RANK_PORTS, "")
    port = int(ports.split(",")[0]) if ports else int(os.environ["MASTER_PORT"]) + 1
    server = None
    if rank == 0:
        import threading

        server = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
        server.init(plan)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    else:
        _wait_for(addr, port, float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300")))
    os.environ.setdefault(
        "HOROVOD_GLOO_TIMEOUT_SECONDS", os.environ.get("DLSUITE_DIST_TIMEOUT", "300")
    )
    os.environ.update(
        {
            RENDEZVOUS_ADDR: addr,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_IFACE": _iface_for(addr),
            "HOROVOD_HOSTNAME": slot.hostname,
            "HOROVOD_RANK": str(slot.rank),
            "HOROVOD_SIZE": str(slot.size),
            "HOROVOD_LOCAL_RANK": str(slot.local_rank),
            "HOROVOD_LOCAL_SIZE": str(slot.local_size),
            "HOROVOD_CROSS_RANK": str(slot.cross_rank),
            "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        }
    )
    return server


def _local_size(size: int) -> int:
    """Ranks per node, from whichever launcher started this rank (one node when none says)."""
    e = os.environ
    for var in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        if e.get(var, "").isdigit():
            return int(e[var])
    if e.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        return int(e["SLURM_NTASKS_PER_NODE"])
    if e.get("SLURM_NNODES", "").isdigit():
        return max(1, size // int(e["SLURM_NNODES"]))
    return size


def _wait_for(addr: str, port: int, timeout_s: float) -> None:
    """Until rank 0's rendezvous server accepts connections."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise SuiteError(
                    f"horovod: rank 0's rendezvous at {addr}:{port} did not answer in "
                    f"{timeout_s:.0f} s ({exc})"
                ) from None
            time.sleep(0.1)


def _iface_for(addr: str) -> str:
    """The network interface whose address routes to ``addr`` (gloo binds to it)."""
    import psutil

    if addr in ("127.0.0.1", "localhost", "::1"):
        return _loopback()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(addr), 9))
        mine = s.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == mine for a in addrs):
            return str(name)
    raise SuiteError(f"horovod: no network interface has the address {mine} that reaches {addr}")


def _loopback() -> str:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addrs):
            return str(name)
    return "lo"
