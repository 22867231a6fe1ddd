"""TensorFlow's distributed words: ``tf.distribute.MultiWorkerMirroredStrategy`` and its
collectives, and the strategies mapped to tf.distribute (the parameter-server runtime itself is
in strategies.py). A mixin of :class:`~suite.adapters.tensorflow.adapter.TensorFlowAdapter`;
``tensorflow`` is imported by the adapter's ``setup``, never here at module import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from suite.adapters.base import Coordination, DistributedWords, Tensor
from suite.errors import AdapterError, UnsupportedError

TF_NO_COMPRESSION = (
    "tf.distribute's collectives take CommunicationOptions (implementation RING or NCCL, bytes "
    "per pack, timeout) and no gradient compression (Horovod over TensorFlow has "
    "Compression.fp16: --framework horovod-tensorflow)"
)


class TensorFlowDistributed(DistributedWords):
    """The distributed words over tf.distribute (state set up by the adapter's ``__init__``)."""

    tf: Any
    on_gpu: bool
    device_name: str
    _strategy: Any
    _launcher: Any
    _comm_hint: str
    _timeout_s: float
    _rank: int
    _world: int
    _collectives: dict[str, Any]
    _ps: Any

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "tf.distribute.MultiWorkerMirroredStrategy (RING collectives over gRPC on "
        "CPUs, NCCL on GPUs), GradientTape step under strategy.run",
        "ps-async": "tf.distribute.experimental.ParameterServerStrategy with a ClusterCoordinator "
        "on rank 0, one parameter-server process and one worker per rank: each shard's step "
        "scheduled on a free worker, its gradients applied to the variables on the parameter "
        "server without waiting for the other workers",
    }

    #: auto is RING on CPUs and NCCL on GPUs; tf.distribute has no gloo nor MPI communication
    dist_backends: ClassVar[frozenset[str] | None] = frozenset({"nccl"})
    #: TF_CONFIG lists every worker at MASTER_ADDR (``_tf_config``, and the parameter-server
    #: cluster's in strategies.py): a rank on another node is never reached
    single_node: ClassVar[str] = (
        "the TF_CONFIG it writes puts every worker at MASTER_ADDR, so a rank on another node "
        "is never reached (--framework horovod-tensorflow spans nodes)"
    )

    #: tf.distribute's collectives and ParameterServerStrategy talk gRPC, which sends with
    #: sendmsg(2): /proc/self/io's wchar does not count it
    write_counter_blind: ClassVar[str] = (
        "tf.distribute talks gRPC, which sends with sendmsg(2); /proc/self/io's wchar does not "
        "count it"
    )

    unsupported_strategies: ClassVar[dict[str, str]] = {
        "ps-sync": "TensorFlow 2's ParameterServerStrategy is asynchronous by design: the "
        "ClusterCoordinator runs each step on whichever worker is free, which updates the "
        "variables on the parameter servers without waiting for the others (TF 1's "
        "SyncReplicasOptimizer is not in TF 2)",
        "ssp": "ParameterServerStrategy has no staleness bound: its workers run asynchronously",
        "fp16": TF_NO_COMPRESSION,
        "bf16": TF_NO_COMPRESSION,
        "powersgd": TF_NO_COMPRESSION,
        "2bit": TF_NO_COMPRESSION,
        "1bit": TF_NO_COMPRESSION,
        "local-sgd": "tf.distribute has no local SGD (no periodic model averaging); "
        "MultiWorkerMirroredStrategy keeps the replicas' variables in sync every step",
        "pipeline": "tf.distribute has no pipeline parallelism (GPipe lives in Lingvo and "
        "Mesh TensorFlow, not in TensorFlow 2)",
        "adasum": "Adasum is Horovod's reduction (hvd.Adasum); tf.distribute has none",
    }

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        """MultiWorkerMirroredStrategy over the ranks: TF_CONFIG from the launcher's
        RANK/WORLD_SIZE/MASTER_ADDR and one port per rank (DLSUITE_RANK_PORTS), unless the
        environment already has a TF_CONFIG. RING collectives on CPUs, NCCL on GPUs."""
        tf = self.tf
        from tensorflow.python.eager import context

        if backend not in ("auto", "nccl", "ring"):
            raise UnsupportedError(
                f"tf.distribute has no {backend!r} communication; use --dist-backend auto "
                "(RING collectives over gRPC on CPUs, NCCL on GPUs) or nccl"
            )
        if backend == "nccl" and not self.on_gpu:
            raise UnsupportedError("NCCL collectives need GPUs; this task runs on the CPU")
        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        if not os.environ.get("TF_CONFIG"):
            os.environ["TF_CONFIG"] = json.dumps(self._tf_config())
        if context.context()._context_handle is not None:
            raise AdapterError(
                "tensorflow: the eager context started before dist_init; "
                "MultiWorkerMirroredStrategy must configure collectives first"
            )
        impl = tf.distribute.experimental.CommunicationImplementation
        use_nccl = self.on_gpu and backend in ("auto", "nccl")
        self._comm_hint = "nccl" if use_nccl else "ring"
        self._timeout_s = float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300"))
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if use_nccl else impl.RING,
            timeout_seconds=self._timeout_s,
        )
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        if self._strategy.num_replicas_in_sync != self._world:
            raise AdapterError(
                f"tensorflow: {self._strategy.num_replicas_in_sync} replicas in sync for "
                f"{self._world} ranks (one device per rank expected)"
            )
        # the strategy's own collective launcher: our broadcasts, barriers and max-reductions
        # take instance keys from the same sequence as its all-reduces
        self._launcher = self._strategy.extended._cross_device_ops._launchers[0]
        self._collectives = {}
        return f"MultiWorkerMirroredStrategy/{self._comm_hint.upper()}"

    def _tf_config(self) -> dict[str, Any]:
        ports = [p for p in os.environ.get("DLSUITE_RANK_PORTS", "").split(",") if p.strip()]
        if len(ports) != self._world:
            raise AdapterError(
                f"tensorflow: MultiWorkerMirroredStrategy needs every rank's address up front: "
                f"DLSUITE_RANK_PORTS has {len(ports)} ports for {self._world} ranks (the suite's "
                "launchers export it), or set TF_CONFIG yourself"
            )
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        return {
            "cluster": {"worker": [f"{host}:{int(p)}" for p in ports]},
            "task": {"type": "worker", "index": self._rank},
        }

    def dist_shutdown(self, clean: bool = True) -> None:
        # MultiWorkerMirroredStrategy has no shutdown; a closing barrier keeps a rank from
        # leaving (and tearing down its gRPC server) while another still talks to it.
        if self._strategy is not None and clean:
            self.barrier()
        self._strategy = None

    def _collective(self, name: str) -> Any:
        """One tf.function per collective (traced once per shape, instance keys fed per call)."""
        if name in self._collectives:
            return self._collectives[name]
        tf = self.tf
        from tensorflow.python.ops import collective_ops, gen_collective_ops

        strategy, launcher = self._strategy, self._launcher
        group, world = launcher._group_key, self._world
        hint, timeout = self._comm_hint, self._timeout_s
        sum_ = tf.distribute.ReduceOp.SUM

        def replica(fn: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
            def run(t: Any) -> Any:
                def step(v: Any) -> Any:
                    return fn(tf.distribute.get_replica_context(), tf.identity(v))

                out = strategy.run(step, args=(t,))
                return strategy.experimental_local_results(out)[0]

            return run

        def reduce_max(t: Any) -> Any:
            return collective_ops.all_reduce_v2(
                t, world, group, launcher._next_instance_key(), merge_op="Max",
                communication_hint=hint, timeout=timeout,
                ordering_token=launcher._get_ordering_token(),
            )  # fmt: skip

        def broadcast(t: Any, root: int) -> Any:
            key = launcher._next_instance_key()
            if self._rank == root:
                return collective_ops.broadcast_send_v2(
                    t, world, group, key, communication_hint=hint, timeout=timeout
                )
            return collective_ops.broadcast_recv_v2(
                tf.shape(t), t.dtype, world, group, key, communication_hint=hint, timeout=timeout
            )

        def reduce_scatter(t: Any) -> Any:
            if self.on_gpu:
                return gen_collective_ops.collective_reduce_scatter_v2(
                    t, group_size=world, group_key=group,
                    instance_key=launcher._next_instance_key(),
                    ordering_token=[launcher._get_ordering_token()],
                    merge_op="Add", final_op="Id", communication_hint=hint,
                    timeout_seconds=timeout,
                )  # fmt: skip
            # CollectiveReduceScatterV2 is NCCL-only (on the CPU it fails and aborts every later
            # collective): all-to-all of the world chunks, then this rank sums the chunks it
            # received. That is the pairwise-exchange reduce-scatter algorithm (MPI has it too),
            # with the bytes on the wire of a ring reduce-scatter, so its time is a
            # reduce-scatter's and it is not listed in ``emulated_collectives``.
            chunks = tf.reshape(t, (world, -1))
            received = collective_ops.all_to_all_v2(
                chunks, world, group, launcher._next_instance_key(), communication_hint=hint,
                timeout=timeout, ordering_token=launcher._get_ordering_token(),
            )  # fmt: skip
            return tf.reduce_sum(received, axis=0)

        impl: dict[str, Callable[..., Any]] = {
            "allreduce": replica(lambda ctx, v: ctx.all_reduce(sum_, v)),
            "allgather": replica(lambda ctx, v: ctx.all_gather(v, axis=0)),
            "max": reduce_max,
            "broadcast": broadcast,
            "reduce_scatter": reduce_scatter,
        }
        fn = tf.function(impl[name], autograph=False)
        self._collectives[name] = fn
        return fn

    def _require_dist(self) -> None:
        if self._strategy is None:
            raise AdapterError("tensorflow: distributed word used before dist_init")

    def agree_max(self, value: int) -> int:
        self._require_dist()
        with self.tf.device(self.device_name):
            t = self.tf.constant([float(value)], self.tf.float64)  # exact below 2**53
        return int(self._collective("max")(t).numpy()[0])

    def allreduce(self, t: Tensor) -> Tensor:
        """The sum across ranks, as a new tensor (TensorFlow tensors are immutable)."""
        self._require_dist()
        return self._collective("allreduce")(t)

    def allgather(self, t: Tensor) -> Tensor:
        self._require_dist()
        return self._collective("allgather")(t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        self._require_dist()
        return self._collective("broadcast")(t, int(root))

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """This rank's chunk of the sum across ranks (NCCL's reduce-scatter on GPUs; on CPUs an
        all-to-all plus a local sum, TensorFlow having no CPU reduce-scatter)."""
        self._require_dist()
        return self._collective("reduce_scatter")(t)

    def data_parallel(self, net: Any) -> Any:
        self._require_dist()
        net.distribute(self._strategy, self._world)
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step_no_sync(x, y)

    # -- strategies (suite/adapters/tensorflow/strategies.py) ----------------------------------
    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        if strategy != "ps-async":
            return self.dist_init(backend)
        from suite.adapters.tensorflow.strategies import ParameterServerCluster

        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        self._ps = ParameterServerCluster(self.tf, rendezvous, self._rank, self._world)
        return str(self._ps.start())

    def strategy_shutdown(self, clean: bool = True) -> None:
        if self._ps is None:
            self.dist_shutdown(clean)
            return
        self._ps.stop(clean)
        self._ps = None

    def strategy_coordination(self) -> Coordination:
        # under ParameterServerStrategy, rank 0's coordinator drives every worker
        return self._ps if self._ps is not None else Coordination()

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        if strategy == "ps-async":
            net.parameter_server(self._ps.strategy, self._ps.coordinator, world)
            return net
        return super().apply_strategy(net, strategy, options, world)
