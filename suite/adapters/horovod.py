"""Horovod (0.28.1, its last release) as a distributed strategy over PyTorch.

Horovod is not a framework of its own: its tensors, operators and networks are PyTorch's, so this
adapter *is* the PyTorch adapter with Horovod's distributed words — ``hvd.allreduce_`` /
``allgather`` / ``broadcast_`` / ``reducescatter`` for the collectives benchmark and
``hvd.DistributedOptimizer`` (gradients averaged by Horovod's background thread, parameters and
optimizer state broadcast from rank 0) for data-parallel training. It declares only the
distributed level: operator and network numbers under the name "horovod" would be PyTorch's
measured twice, so those tasks are skipped with a pointer to ``--framework pytorch``.

Launch: ``horovodrun --gloo`` (the default launcher) — or any launcher of the suite (spawn,
torchrun, mpirun, srun): this Horovod is built with gloo and without MPI (containers/horovod/),
so when Horovod's own launcher did not start the ranks, rank 0 runs Horovod's gloo rendezvous
server itself (Horovod's ``RendezvousServer``, the one horovodrun starts) at
MASTER_ADDR:MASTER_PORT and every rank gets the HOROVOD_* variables horovodrun would have set.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, ClassVar

from suite.adapters.base import DeviceInfo, Tensor
from suite.adapters.pytorch import PyTorchAdapter
from suite.errors import SuiteError
from suite.launchers.base import RANK_PORTS

#: set by horovodrun (and by this adapter when it hosts the rendezvous itself)
RENDEZVOUS_ADDR = "HOROVOD_GLOO_RENDEZVOUS_ADDR"


class HorovodAdapter(PyTorchAdapter):
    name: ClassVar[str] = "horovod"
    module: ClassVar[str] = "horovod"
    distribution: ClassVar[str] = "horovod"
    adapter_version: ClassVar[str] = "1"
    default_launcher: ClassVar[str] = "horovodrun"
    # words: PyTorch's, all of them (the kit checks them here too); the levels keep operator and
    # network *tasks* to --framework pytorch
    levels: ClassVar[frozenset[str]] = frozenset({"distributed"})
    levels_reason: ClassVar[str] = (
        "horovod is a distributed strategy over PyTorch: its operators and networks are "
        "PyTorch's (measure them with --framework pytorch); it runs the distributed level"
    )

    def __init__(self) -> None:
        super().__init__()
        self.hvd: Any = None
        self._rendezvous: Any = None

    def setup(self, device: str) -> DeviceInfo:
        info = super().setup(device)
        import horovod.torch as hvd

        self.hvd = hvd
        return info

    def versions(self) -> dict[str, str | None]:
        import horovod

        hvd = self.hvd
        out = super().versions()
        out.update(
            {
                "horovod": horovod.__version__,
                "horovod_gloo": str(hvd.gloo_built()),
                "horovod_mpi": str(hvd.mpi_built()),
                "horovod_nccl": str(bool(hvd.nccl_built())),
            }
        )
        return out

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        hvd = self.hvd
        if backend not in ("auto", "gloo"):
            raise SuiteError(
                f"horovod here runs its gloo controller (built without MPI/NCCL), not "
                f"{backend!r}; use --dist-backend auto"
            )
        if RENDEZVOUS_ADDR not in os.environ:
            self._host_rendezvous()
        hvd.init()
        if not hvd.is_initialized() or hvd.size() != int(os.environ.get("WORLD_SIZE", "1")):
            raise SuiteError(
                f"horovod joined {hvd.size()} ranks, the launcher started "
                f"{os.environ.get('WORLD_SIZE')}"
            )
        if self.device.type == "cuda":
            self.device = self.torch.device("cuda", hvd.local_rank())
            self.torch.cuda.set_device(self.device)
        return "gloo"

    def _host_rendezvous(self) -> None:
        """What horovodrun does before it starts the ranks, for a launcher that is not
        horovodrun: rank 0 serves Horovod's gloo rendezvous, every rank gets its HOROVOD_*
        variables from the launcher's rank, local rank and node."""
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
        if rank == 0:
            import threading

            server = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
            server.init(plan)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._rendezvous = server
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

    def dist_shutdown(self, clean: bool = True) -> None:
        hvd = self.hvd
        if hvd is not None and hvd.is_initialized():
            if clean:
                hvd.barrier()
            hvd.shutdown()
        if self._rendezvous is not None:
            self._rendezvous.shutdown()
            self._rendezvous = None

    def barrier(self) -> None:
        self.hvd.barrier()

    def agree_max(self, value: int) -> int:
        t = self.torch.tensor([int(value)], dtype=self.torch.int64)
        return int(self.hvd.allreduce(t, op=self.hvd.Max, name="dlsuite.agree_max").item())

    def allreduce(self, t: Tensor) -> Tensor:
        return self.hvd.allreduce_(t, op=self.hvd.Sum)

    def allgather(self, t: Tensor) -> Tensor:
        return self.hvd.allgather(t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        return self.hvd.broadcast_(t, root_rank=root)

    def reduce_scatter(self, t: Tensor) -> Tensor:
        return self.hvd.reducescatter(t, op=self.hvd.Sum)

    def data_parallel(self, net: Any) -> Any:
        """Horovod's recipe: DistributedOptimizer (averaging allreduce of every gradient,
        started from backward hooks as gradients become ready), then parameters, buffers and
        optimizer state broadcast from rank 0."""
        hvd = self.hvd
        module = net.module
        net.optimizer = hvd.DistributedOptimizer(
            net.optimizer, named_parameters=module.named_parameters(), op=hvd.Average
        )
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(net.optimizer, root_rank=0)
        net.horovod = True
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """The same step without the exchange: Horovod's gradient-accumulation counter
        (``backward_passes_per_step``) held above zero keeps the backward hooks from starting
        allreduces, and ``skip_synchronize`` steps on the local gradients."""
        opt = net.optimizer
        delays = dict(opt._allreduce_delay)
        for p in delays:
            opt._allreduce_delay[p] = 1 << 30
        try:
            with opt.skip_synchronize():
                loss = net.train_step(net.prepare_input(x), y)
        finally:
            opt._handles.clear()
            opt._allreduce_delay.update(delays)
        return loss


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
