"""Horovod (0.28.1, its last release) as a distributed strategy over TensorFlow.

The TensorFlow twin of suite/adapters/horovod/adapter.py: this adapter *is* the TensorFlow adapter
(its tensors, operator words and Keras network builder) with Horovod's distributed words from
``horovod.tensorflow`` — ``hvd.allreduce`` (sum) / ``allgather`` / ``broadcast`` /
``reducescatter`` for the collectives benchmark, and for data-parallel training the adapter's
own custom training loop with its tape wrapped in ``hvd.DistributedGradientTape`` (every gradient
averaged across ranks before the optimizer applies it) after ``hvd.broadcast_variables`` from
rank 0. It declares only the distributed level: operator and network numbers would be
TensorFlow's measured twice (and an older TensorFlow's: see below), so those tasks are skipped
with a pointer to ``--framework tensorflow``.

Horovod 0.28.1 builds against TensorFlow only up to 2.12, so this adapter runs in its own
environment (containers/horovod-tensorflow/: tensorflow-cpu 2.12.1, whose Keras is tf.keras
2.12, and NumPy 1.24.3); the TensorFlow adapter's few Keras-3-only calls have Keras-2
equivalents there (suite/adapters/tensorflow/network.py).

Launch: ``horovodrun --gloo`` (the default launcher) or any launcher of the suite: when
horovodrun did not start the ranks, rank 0 hosts Horovod's gloo rendezvous itself
(suite/adapters/horovod/rendezvous.py, shared with the PyTorch-based adapter).
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite.adapters.base import Tensor
from suite.adapters.horovod import rendezvous as horovod_rendezvous
from suite.adapters.horovod.words import HorovodWords
from suite.adapters.tensorflow.adapter import TensorFlowAdapter
from suite.errors import AdapterError


class HorovodTensorFlowAdapter(HorovodWords, TensorFlowAdapter):
    name: ClassVar[str] = "horovod-tensorflow"
    horovod_binding: ClassVar[str] = "horovod.tensorflow"
    # words: TensorFlow's (the kit checks them here too, on TensorFlow 2.12)
    levels_reason: ClassVar[str] = (
        "horovod-tensorflow is a distributed strategy over TensorFlow: its operators, "
        "networks and optimizers are TensorFlow's (measure them with --framework tensorflow); "
        "it runs the distributed level"
    )

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "hvd.DistributedGradientTape (op=Average) after hvd.broadcast_variables",
        "fp16": "hvd.DistributedGradientTape(compression=hvd.Compression.fp16): each gradient "
        "cast to fp16 for the allreduce and back",
    }
    #: Horovod's gloo writes with writev(2), which the write counter counts (unlike the
    #: gRPC of tf.distribute, which the TensorFlow adapter's declaration is about)
    write_counter_blind: ClassVar[str] = ""

    def supports(self, dtype: str) -> tuple[bool, str]:
        if dtype == "fp16" and not self.on_gpu:
            return (
                False,
                "horovod-tensorflow runs TensorFlow 2.12, whose fp16 matmul on a CPU accumulates "
                "in fp16 (gemm and attention l2 error 2.4e-3 and 2.2e-3 > the fp16 tolerance "
                "2e-3; TensorFlow 2.21's does not: --framework tensorflow)",
            )
        return super().supports(dtype)

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        hvd = self.hvd
        self._join(backend)
        self._rank, self._world = hvd.rank(), hvd.size()
        return "gloo"

    def dist_shutdown(self, clean: bool = True) -> None:
        horovod_rendezvous.leave(self.hvd, self._rendezvous, clean, self.barrier)
        self._rendezvous = None

    def _require_dist(self) -> None:
        if self.hvd is None or not self.hvd.is_initialized():
            raise AdapterError("horovod-tensorflow: distributed word used before dist_init")

    def agree_max(self, value: int) -> int:
        self._require_dist()
        with self.tf.device(self.device_name):
            t = self.tf.constant([int(value)], self.tf.int64)
        return int(self.hvd.allreduce(t, op=self.hvd.Max).numpy()[0])

    # Eager calls: each is one Horovod operation, done when the call returns its tensor (a new
    # one: TensorFlow tensors are immutable, so the timing loop's buffer never changes).
    def allreduce(self, t: Tensor) -> Tensor:
        self._require_dist()
        return self.hvd.allreduce(t, op=self.hvd.Sum)

    def allgather(self, t: Tensor) -> Tensor:
        self._require_dist()
        return self.hvd.allgather(t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        self._require_dist()
        return self.hvd.broadcast(t, root_rank=int(root))

    def reduce_scatter(self, t: Tensor) -> Tensor:
        self._require_dist()
        return self.hvd.reducescatter(t, op=self.hvd.Sum)

    def data_parallel(self, net: Any, compression: str = "none") -> Any:
        """Horovod's TensorFlow 2 recipe on the adapter's training step: the tape wrapped in
        ``DistributedGradientTape`` (averaging allreduce of every gradient; ``compression``
        one of Horovod's compressors, "none" or "fp16"), then the model's variables and the
        optimizer's state broadcast from rank 0. The no-exchange twin of the step
        (``train_step_no_sync``) is the same step on a copy of the network, unwrapped."""
        self._require_dist()
        hvd = self.hvd
        compressor = getattr(hvd.Compression, compression)
        net.exchange_gradients(
            lambda tape: hvd.DistributedGradientTape(tape, op=hvd.Average, compression=compressor)
        )
        hvd.broadcast_variables(net.model.variables, root_rank=0)
        hvd.broadcast_variables(net.optimizer_variables(), root_rank=0)
        return net
