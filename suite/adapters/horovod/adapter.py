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
MASTER_ADDR:MASTER_PORT and every rank gets the HOROVOD_* variables horovodrun would have set
(suite/adapters/horovod/rendezvous.py, shared with the Horovod-over-TensorFlow adapter).
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite.adapters.base import Tensor
from suite.adapters.horovod import rendezvous as horovod_rendezvous
from suite.adapters.horovod.words import HorovodWords
from suite.adapters.pytorch.adapter import PyTorchAdapter


class HorovodAdapter(HorovodWords, PyTorchAdapter):
    name: ClassVar[str] = "horovod"
    horovod_binding: ClassVar[str] = "horovod.torch"
    # hvd.init/shutdown with the suite's rendezvous hosting: one task per process
    keeps_process_group: ClassVar[bool] = False
    levels_reason: ClassVar[str] = (
        "horovod is a distributed strategy over PyTorch: its operators, networks and "
        "optimizers are PyTorch's (measure them with --framework pytorch); it runs the "
        "distributed level"
    )

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "hvd.DistributedOptimizer (op=Average): gradients allreduced by "
        "Horovod's background thread, started from backward hooks",
        "fp16": "hvd.DistributedOptimizer(compression=hvd.Compression.fp16): each gradient "
        "cast to fp16 for the allreduce and back",
    }

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        hvd = self.hvd
        self._join(backend)
        if self.device.type == "cuda":
            self.device = self.torch.device("cuda", hvd.local_rank())
            self.torch.cuda.set_device(self.device)
        return "gloo"

    def dist_shutdown(self, clean: bool = True) -> None:
        horovod_rendezvous.leave(self.hvd, self._rendezvous, clean)
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

    def data_parallel(self, net: Any, compression: str = "none") -> Any:
        """Horovod's recipe: DistributedOptimizer (averaging allreduce of every gradient,
        started from backward hooks as gradients become ready; ``compression`` one of
        Horovod's compressors, "none" or "fp16"), then parameters, buffers and optimizer state
        broadcast from rank 0."""
        hvd = self.hvd
        module = net.module
        net.optimizer = hvd.DistributedOptimizer(
            net.optimizer,
            named_parameters=module.named_parameters(),
            op=hvd.Average,
            compression=getattr(hvd.Compression, compression),
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
