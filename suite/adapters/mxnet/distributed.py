"""MXNet's distributed words: the parameter-server kvstore ``dist_sync``. MXNet's bundled
launcher (tools/launch.py) does not run on Python 3.11, so rank 0's ``dist_init`` starts the
scheduler and one server as child processes (``DMLC_ROLE=scheduler/server``, dying with it) and
every rank joins as a worker; ``dist_shutdown`` stops them. The strategies mapped to the kvstore
are here too (their server-side pieces in strategies.py). A mixin of
:class:`~suite.adapters.mxnet.adapter.MXNetAdapter`; ``mxnet`` is imported by the adapter's
``setup``, never here at module import.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import AdapterError, UnsupportedError
from suite.launchers.base import end_processes

BROADCAST = (
    "the kvstore dist_sync has no broadcast from a chosen rank: a server answers a key only "
    "after every worker pushed it, and KVStore.broadcast (init + pull) sends from ps-lite's "
    "worker 0 once per key; a broadcast made of a sum with zeros would measure an allreduce"
)


#: the scheduler's and server's program (argv[1]: the pid of the rank that started it)
_ROLE_MAIN = (
    "import os, sys; from suite.launchers.base import die_with_parent; die_with_parent(); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); import mxnet"
)


MX_NO_FLOAT_COMPRESSION = (
    "the kvstore's gradient compression types are '2bit' and '1bit'; pushing fp16 or bf16 "
    "arrays means training in that precision (no fp16 CPU kernels, no bfloat16 NDArray in "
    "MXNet 1.9.1), not compressing fp32 gradients"
)


class _KVHolder:
    """The kvstore, shared with data-parallel networks (so ``dist_shutdown`` can drop the one
    reference that keeps it alive: freeing it is what stops ps-lite)."""

    kv: Any = None


class MXNetDistributed(Adapter):
    """The distributed words over the kvstore (state set up by the adapter's ``__init__``)."""

    mx: Any
    ctx: Any
    _holder: _KVHolder
    _children: list[subprocess.Popen[bytes]]
    _rank: int
    _world: int
    _next_key: int
    _keys: dict[tuple[Any, ...], Any]
    _kv_type: str
    _compression: dict[str, Any] | None
    _server_lrs: dict[int, float]

    if TYPE_CHECKING:

        def _feature(self, name: str) -> bool: ...

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "kvstore dist_sync without an optimizer on the server: every gradient "
        "pushed, the server sums the workers' pushes, the sum pulled back and a local "
        "Trainer step (MXNet has no collective allreduce on CPUs: the server does the sum)",
        "ps-sync": "kvstore dist_sync with the optimizer on the server (set_optimizer: MXNet's "
        "SGD with momentum): gradients pushed, summed over the workers, one update per "
        "round, weights pulled",
        "ps-async": "kvstore dist_async with the optimizer on the server: each worker's push "
        "applied as it arrives, weights pulled without waiting for the other workers",
        "2bit": "kvstore dist_sync with set_gradient_compression({'type': '2bit', "
        "'threshold': t}): pushes quantised on the worker with the residual kept (error "
        "feedback), the server sums, the pull uncompressed; a local Trainer step",
    }

    #: only the kvstore dist_sync (auto): no gloo, NCCL or MPI communication
    dist_backends: ClassVar[frozenset[str] | None] = frozenset()

    #: ps-lite sends through ZeroMQ, with send(2)/sendmsg(2): /proc/self/io's wchar does not
    #: count them, so the write counter says nothing about the kvstore's traffic
    write_counter_blind: ClassVar[str] = (
        "ps-lite sends through ZeroMQ with send(2)/sendmsg(2), which /proc/self/io's wchar does "
        "not count"
    )
    #: data parallelism goes through the dist_sync kvstore: every gradient pushed to the server
    #: (which sums) and the sum pulled back, not a ring
    strategy_sent_as: ClassVar[dict[str, str]] = {"allreduce": "ps-sync"}

    unsupported_strategies: ClassVar[dict[str, str]] = {
        "1bit": "MXNet 1.9.1's kvstore compresses only to '2bit' ('1bit' is refused: "
        "'Unknown type for gradient compression')",
        "ssp": "the kvstore has dist_sync and dist_async; ps-lite as MXNet 1.9.1 uses it "
        "offers no bounded-delay (staleness) consistency",
        "fp16": MX_NO_FLOAT_COMPRESSION,
        "bf16": MX_NO_FLOAT_COMPRESSION,
        "powersgd": "MXNet has no PowerSGD (its kvstore compresses to 2 or 1 bits only)",
        "local-sgd": "MXNet has no local SGD: the kvstore exchanges on every push; averaging "
        "the parameters every k steps would be the suite's loop, not MXNet's",
        "pipeline": "MXNet 1.9.1 has no pipeline parallelism (a Gluon block runs on the "
        "contexts of one process; placing layers on devices by hand is not a pipeline "
        "schedule)",
        "adasum": "Adasum is Horovod's reduction; MXNet's 'horovod' kvstore needs Horovod "
        "built against MXNet (not in this environment)",
    }

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        """Join the kvstore ``dist_sync`` as a worker; rank 0 first starts the scheduler and
        one server (child processes that die with it). The scheduler listens on MASTER_ADDR
        at the first of DLSUITE_RANK_PORTS (else MASTER_PORT)."""
        return self._join(backend, "dist_sync", None)

    def _join(self, backend: str, kv_type: str, compression: dict[str, Any] | None) -> str:
        """Join the kvstore ``kv_type`` (dist_sync or dist_async), with ``compression``
        (set_gradient_compression's argument) set before any key exists."""
        if backend not in ("auto", "dist_sync"):
            raise UnsupportedError(
                f"mxnet: no {backend!r} communication; the kvstore dist_sync (parameter "
                "server over ps-lite) is used: --dist-backend auto"
            )
        if not self._feature("DIST_KVSTORE"):
            raise UnsupportedError("mxnet: this MXNet build has no distributed kvstore")
        from suite.launchers.base import RANK_PORTS

        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        ports = [p.strip() for p in os.environ.get(RANK_PORTS, "").split(",") if p.strip()]
        port = ports[0] if ports else os.environ.get("MASTER_PORT", "")
        if not port.isdigit():
            raise AdapterError(
                f"mxnet: the kvstore scheduler needs a port: set {RANK_PORTS} or MASTER_PORT"
            )
        cluster = {
            "DMLC_PS_ROOT_URI": os.environ.get("MASTER_ADDR", "127.0.0.1"),
            "DMLC_PS_ROOT_PORT": port,
            "DMLC_NUM_WORKER": str(self._world),
            "DMLC_NUM_SERVER": "1",
        }
        if self._rank == 0:
            self._start_roles(cluster)
        os.environ.update(cluster)
        os.environ["DMLC_ROLE"] = "worker"
        kv = self.mx.kv.create(kv_type)
        if kv.num_workers != self._world:
            raise AdapterError(f"mxnet: kvstore has {kv.num_workers} workers for {self._world}")
        if compression is not None:
            kv.set_gradient_compression(compression)
        self._holder.kv = kv
        self._next_key, self._keys, self._server_lrs = 0, {}, {}
        self._kv_type, self._compression = kv_type, compression
        return f"kvstore/{kv_type}" + (f"+{compression['type']}" if compression else "")

    def _start_roles(self, cluster: dict[str, str]) -> None:
        """Scheduler and server: ``import mxnet`` with DMLC_ROLE set runs the role and exits.
        Each first asks the kernel to kill it when this rank dies (``die_with_parent``), and
        exits at once if this rank is already gone."""
        for role in ("scheduler", "server"):
            env = {**os.environ, **cluster, "DMLC_ROLE": role, "OMP_NUM_THREADS": "1"}
            self._children.append(
                subprocess.Popen(
                    [sys.executable, "-c", _ROLE_MAIN, str(os.getpid())],
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            )

    def dist_shutdown(self, clean: bool = True) -> None:
        kv = self._holder.kv
        if kv is not None:
            if clean:
                self.mx.nd.waitall()
                kv._barrier()
            else:  # another rank may be gone: no barrier when ps-lite finalises
                import ctypes

                from mxnet.base import _LIB, check_call

                check_call(_LIB.MXKVStoreSetBarrierBeforeExit(kv.handle, ctypes.c_int(0)))
        # Freeing the kvstore finalises ps-lite; worker 0 tells the server to stop, and the
        # scheduler exits when every node has left.
        self._holder.kv = None
        self._holder = _KVHolder()  # networks built before keep the old (now empty) holder
        del kv
        gc.collect()
        for child in self._children:  # the server and scheduler end once every node has left
            try:
                child.wait(timeout=30 if clean else 0.1)
            except subprocess.TimeoutExpired:
                break
        end_processes(self._children, grace_s=5)
        self._children = []

    def _kv(self) -> Any:
        if self._holder.kv is None:
            raise AdapterError("mxnet: distributed word used before dist_init")
        return self._holder.kv

    def _key(self, kind: str, shape: tuple[int, ...], dtype: Any, count: int = 1) -> Any:
        """Integer kvstore keys (never strings: MXNet refuses mixed key types), ``count`` of
        them per (kind, shape, dtype), initialised once (every rank in the same order)."""
        from suite.adapters.mxnet.strategies import CONTROL_BASE

        name = (kind, shape, np.dtype(dtype).name, count)
        if name not in self._keys:
            first = CONTROL_BASE + sum(len(k) for k in self._keys.values())
            keys = list(range(first, first + count))
            zeros = [self.mx.nd.zeros(shape, ctx=self.ctx, dtype=dtype) for _ in keys]
            self._kv().init(keys, zeros)
            self._keys[name] = keys
        return self._keys[name]

    def barrier(self) -> None:
        kv = self._kv()
        self.mx.nd.waitall()  # this rank's queued work (pushes and pulls included) first
        kv._barrier()

    def agree_max(self, value: int) -> int:
        """Every rank pushes a one-hot vector holding its value (float64, exact below 2**53);
        the pulled sum holds every rank's value."""
        kv = self._kv()
        (key,) = self._key("agree_max", (self._world,), np.float64)
        slots = np.zeros(self._world)
        slots[self._rank] = float(value)
        buf = self.mx.nd.array(slots, ctx=self.ctx, dtype=np.float64)
        kv.push(key, buf)
        kv.pull(key, out=buf)
        return int(buf.asnumpy().max())

    def allreduce(self, t: Tensor) -> Tensor:
        """In place: push ``t`` (the server sums the workers' pushes), pull the sum into it."""
        kv = self._kv()
        (key,) = self._key("allreduce", tuple(t.shape), t.dtype)
        kv.push(key, t)
        kv.pull(key, out=t)
        return t

    def allgather(self, t: Tensor) -> Tensor:
        """A sum of zero-padded slots (this rank's ``t`` at its rank's rows): the kvstore only
        sums, and a dist_sync server needs a push from every worker to every key, so each rank
        pushes and pulls world times its message (the bandwidth of that sum, not of a ring
        all-gather)."""
        kv = self._kv()
        n = t.shape[0]
        shape = (self._world * n, *t.shape[1:])
        (key,) = self._key("allgather", shape, t.dtype)
        buf = self.mx.nd.zeros(shape, ctx=self.ctx, dtype=t.dtype)
        buf[self._rank * n : (self._rank + 1) * n] = t
        kv.push(key, buf)
        kv.pull(key, out=buf)
        return buf

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        raise UnsupportedError(BROADCAST)

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """One key per chunk: every rank pushes its world chunks, the server sums each, and
        this rank pulls only its own chunk (the parameter-server reduce-scatter)."""
        kv = self._kv()
        k = t.shape[0] // self._world
        keys = self._key("reduce_scatter", (k, *t.shape[1:]), t.dtype, count=self._world)
        kv.push(keys, [t[i * k : (i + 1) * k] for i in range(self._world)])
        out = self.mx.nd.zeros((k, *t.shape[1:]), ctx=self.ctx, dtype=t.dtype)
        kv.pull(keys[self._rank], out=out)
        return out

    def data_parallel(self, net: Any) -> Any:
        """Gradients summed across workers by the kvstore (push + pull per step, keys of this
        network's own), then the local Trainer step rescaled by 1/world (the mean)."""
        from suite.adapters.mxnet.network import DataParallel

        kv = self._kv()
        grads = [p.grad(net.ctx) for p in net.trainable]
        keys = list(range(self._next_key, self._next_key + len(grads)))
        self._next_key += len(grads)
        kv.init(keys, [self.mx.nd.zeros(g.shape, ctx=self.ctx, dtype=g.dtype) for g in grads])
        net.parallel = DataParallel(self._holder, keys, self._world)
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step(x, y, sync=False)

    # -- strategies (suite/adapters/mxnet/strategies.py) ---------------------------------------
    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        if strategy == "ps-async":
            return self._join(backend, "dist_async", None)
        if strategy == "2bit":
            threshold = float(options["threshold"])
            if threshold <= 0:
                raise UnsupportedError(
                    "mxnet: 2bit compression needs a threshold above 0 ('threshold must be "
                    "greater than 0')"
                )
            return self._join(backend, "dist_sync", {"type": "2bit", "threshold": threshold})
        return self._join(backend, "dist_sync", None)

    def strategy_words_usable(self, strategy: str) -> bool:
        # gradient compression quantises every push, the control words' included (a pushed
        # 0.3 comes back as 0 at threshold 0.5); the barrier (ps-lite's) still works
        return strategy != "2bit"

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        if strategy in ("allreduce", "2bit"):
            return self.data_parallel(net)
        if strategy not in ("ps-sync", "ps-async"):
            raise NotImplementedError(f"mxnet has no mapping of {strategy!r}")
        return self._server_update(net)

    def _server_update(self, net: Any) -> Any:
        """The network's weights on the server: keys initialised with them (worker 0's values;
        every rank built the same), pulled back, and the server's optimizer (re)registered
        with this network's learning rate (by rank 0, between barriers, so no push of the new
        keys reaches the server before it)."""
        from suite.adapters.mxnet.strategies import ServerSGD, ServerUpdate

        mx, kv = self.mx, self._kv()
        weights = [p.data(net.ctx) for p in net.trainable]
        keys = list(range(self._next_key, self._next_key + len(weights)))
        self._next_key += len(weights)
        kv.init(keys, weights)
        kv.pull(keys, out=weights)
        trainer = net.trainer._optimizer
        self._server_lrs.update({k: float(trainer.learning_rate) for k in keys})
        self.barrier()
        if self._rank == 0:
            optimizer = ServerSGD(
                learning_rate=1.0,
                momentum=float(trainer.momentum),
                wd=0.0,
                rescale_grad=1.0 / self._world,
            )
            optimizer.set_lr_mult(dict(self._server_lrs))
            kv.set_optimizer(optimizer)
        self.barrier()
        mx.nd.waitall()
        net.parallel = ServerUpdate(self._holder, keys, self._world)
        return net
