"""JAX's distributed words: ``jax.distributed`` with ``psum``/``all_gather``/``psum_scatter``
under ``shard_map`` over the global mesh of one device per process (gloo collectives between CPU
processes, NCCL on GPUs), and the strategies mapped to them. A mixin of
:class:`~suite.adapters.jax.adapter.JaxAdapter`; ``jax`` is imported by the adapter's ``setup``,
never here at module import.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from suite import strategies as S
from suite.adapters.base import Adapter, Tensor
from suite.errors import AdapterError, UnsupportedError

MESH_AXIS = "ranks"
JAX_NO_COMPRESSION = (
    "JAX's collectives (psum, pmean over named axes, compiled by XLA) have no gradient "
    "compression; casting, quantising or factorising gradients before a psum would be the "
    "suite's scheme, not JAX's"
)
JAX_NO_PS = (
    "JAX is SPMD: every process runs the same compiled program and exchanges through "
    "collectives; it has no parameter server"
)


def _pcast_varying(lax: Any, x: Any, axis: str) -> Any:
    """``x`` marked as varying over ``axis`` inside shard_map (``lax.pcast`` in JAX >= 0.8,
    ``lax.pvary`` before)."""
    if hasattr(lax, "pcast"):
        return lax.pcast(x, axis, to="varying")
    return lax.pvary(x, axis)


def _in_buckets(jax: Any, tree: Any, bucket: int, reduce: Any) -> Any:
    """``reduce`` (a collective over the mesh axis) of ``tree``'s leaves raveled into flat
    buffers of at most ``bucket`` bytes, cut back into the leaves' shapes."""
    jnp = jax.numpy
    leaves, treedef = jax.tree.flatten(tree)
    groups = S.bucket_groups(
        [leaf.size * leaf.dtype.itemsize for leaf in leaves], [str(x.dtype) for x in leaves], bucket
    )
    out: list[Any] = [None] * len(leaves)
    for group in groups:
        flat = reduce(jnp.concatenate([leaves[i].ravel() for i in group]))
        offset = 0
        for i in group:
            out[i] = flat[offset : offset + leaves[i].size].reshape(leaves[i].shape)
            offset += leaves[i].size
    return jax.tree.unflatten(treedef, out)


class JaxDistributed(Adapter):
    """The distributed words over jax.distributed (state set up by the adapter's ``__init__``)."""

    jax: Any
    jnp: Any
    device: Any
    on_gpu: bool
    _world: int
    _rank: int
    _mesh: Any
    _collectives: dict[tuple[str, Any], Any]

    if TYPE_CHECKING:

        def _track(self, out: Any) -> Any: ...

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "jax.lax.pmean of the gradients inside the jitted step over the processes' "
        "devices (jax.distributed, gloo collectives on CPUs)",
    }

    unsupported_strategies: ClassVar[dict[str, str]] = {
        "ps-sync": JAX_NO_PS,
        "ps-async": JAX_NO_PS,
        "ssp": JAX_NO_PS,
        "fp16": JAX_NO_COMPRESSION,
        "bf16": JAX_NO_COMPRESSION,
        "powersgd": JAX_NO_COMPRESSION,
        "2bit": JAX_NO_COMPRESSION,
        "1bit": JAX_NO_COMPRESSION,
        "local-sgd": "JAX has no local SGD or model averager; skipping the pmean for k steps "
        "and averaging the parameters would be the suite's loop, not a JAX mechanism",
        "pipeline": "JAX has no pipeline schedule: shard_map with ppermute lets a user write "
        "one (GPipe-style loops in user code), which would be the suite's runtime",
        "adasum": "Adasum is Horovod's reduction (hvd.Adasum); JAX has none",
    }

    # -- distributed words -------------------------------------------------------------------
    def _join_if_launched(self, platform: str) -> None:
        """``jax.distributed.initialize`` from the launcher's variables, before any backend
        starts (JAX refuses it afterwards). One device per process: on GPUs the LOCAL_RANK-th."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return
        jax = self.jax
        from jax._src import distributed

        rank = int(os.environ.get("RANK", "0"))
        if distributed.global_state.client is None:
            address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}"
            timeout = int(float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300")))
            local_ids = [int(os.environ.get("LOCAL_RANK", "0"))] if platform == "cuda" else None
            if platform == "cpu":
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(
                coordinator_address=address,
                num_processes=world,
                process_id=rank,
                local_device_ids=local_ids,
                initialization_timeout=timeout,
            )
        self._world, self._rank = world, rank

    def dist_init(self, backend: str) -> str:
        """The runtime was joined in ``setup`` (see the module docstring); this builds the mesh
        of one device per rank, in rank order, and says which collectives run: gloo between
        CPU processes, NCCL between GPUs."""
        jax = self.jax
        in_use = "nccl" if self.on_gpu else "gloo"
        if backend not in ("auto", in_use):
            raise UnsupportedError(
                f"jax on the {'GPU' if self.on_gpu else 'CPU'} runs its collectives with "
                f"{in_use}; --dist-backend {backend} is not available (use auto)"
            )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if jax.process_count() != world or self._world != world:
            raise AdapterError(
                f"jax: {jax.process_count()} processes joined for WORLD_SIZE={world}; the "
                "distributed runtime is joined in setup, which this process ran before the "
                "launcher's variables were set"
            )
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        if len(devices) != world:
            raise AdapterError(f"jax: {len(devices)} devices for {world} ranks; want one each")
        from jax.sharding import Mesh

        self._mesh = Mesh(np.array(devices), (MESH_AXIS,))
        return in_use

    def dist_shutdown(self, clean: bool = True) -> None:
        jax = self.jax
        from jax._src import distributed

        if distributed.global_state.client is None:
            return
        if clean:
            self.barrier()
        self.synchronize()
        jax.distributed.shutdown()

    def _require_mesh(self) -> Any:
        if self._mesh is None:
            raise AdapterError("jax: distributed word used before dist_init")
        return self._mesh

    def _global(self, local: Any, replicated: bool) -> Any:
        """This rank's array as its part of a global array over the mesh: a shard of a global
        array split along axis 0 (rank order), or one copy of a replicated one."""
        jax = self.jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = self._require_mesh()
        if replicated:
            return jax.make_array_from_single_device_arrays(
                local.shape, NamedSharding(mesh, P()), [local]
            )
        shape = (self._world * local.shape[0], *local.shape[1:])
        return jax.make_array_from_single_device_arrays(
            shape, NamedSharding(mesh, P(MESH_AXIS)), [local]
        )

    @staticmethod
    def _local(g: Any) -> Any:
        return g.addressable_shards[0].data

    def _collective(self, op: str, root: int = 0) -> Any:
        """A jitted shard_map over the mesh: each rank's block in, each rank's block out."""
        key = (op, root)
        if key in self._collectives:
            return self._collectives[key]
        jax = self.jax
        jnp = self.jnp
        lax = jax.lax
        from jax.sharding import PartitionSpec as P

        axis = MESH_AXIS

        def body(x: Any) -> Any:
            if op == "allreduce":
                return lax.psum(x, axis)
            if op == "allgather":
                return lax.all_gather(x, axis, axis=0, tiled=True)
            if op == "reduce_scatter":
                return lax.psum_scatter(x, axis, scatter_dimension=0, tiled=True)
            if op == "max":
                return lax.pmax(x, axis)
            if op == "broadcast":
                # JAX has no broadcast primitive; multihost_utils.broadcast_one_to_all is this
                # same masked psum (only the root's values are non-zero, so the sum is exact)
                mine = lax.axis_index(axis) == root
                return lax.psum(jnp.where(mine, x, jnp.zeros_like(x)), axis)
            raise ValueError(op)

        fn = jax.jit(
            jax.shard_map(body, mesh=self._require_mesh(), in_specs=P(axis), out_specs=P(axis))
        )
        self._collectives[key] = fn
        return fn

    def _run_collective(self, op: str, t: Tensor, root: int = 0) -> Tensor:
        out = self._collective(op, root)(self._global(t, replicated=False))
        return self._track(self._local(out))

    def barrier(self) -> None:
        """A tiny psum every rank must enter before any leaves it, waited for."""
        token = self.jax.device_put(np.zeros(1, np.float32), self.device)
        self.jax.block_until_ready(self._run_collective("allreduce", token))

    def agree_max(self, value: int) -> int:
        t = self.jax.device_put(np.array([int(value)], dtype=np.int32), self.device)
        return int(np.asarray(self._run_collective("max", t))[0])

    def allreduce(self, t: Tensor) -> Tensor:
        """The sum across ranks, as a new array (JAX arrays are immutable)."""
        return self._run_collective("allreduce", t)

    def allgather(self, t: Tensor) -> Tensor:
        return self._run_collective("allgather", t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        """Root's values on every rank: a masked ``psum``, as JAX's own
        ``multihost_utils.broadcast_one_to_all`` (so it moves an allreduce's bytes)."""
        return self._run_collective("broadcast", t, int(root))

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """``psum_scatter``: this rank's chunk of the sum across ranks. On CPUs it is the
        framework's own reduce-scatter with its known bug (``known_bugs``), measured as it is:
        an allreduce and a slice would be right, and an allreduce's time."""
        return self._run_collective("reduce_scatter", t)

    data_parallel_buckets: ClassVar[str] = (
        "the gradients (and BatchNorm statistics) raveled into flat buffers of at most bytes, "
        "one pmean each (jnp.concatenate in the jitted step: JAX has no bucket setting, this is "
        "what a JAX program writes; without it XLA's CPU runtime sends one gloo allreduce per "
        "gradient tensor)"
    )

    def data_parallel(self, net: Any) -> Any:
        """The network's step as a shard_map over the ranks: each rank differentiates its own
        batch, the gradients are averaged with ``pmean`` inside the jitted step (DDP's average),
        and every rank applies the same update. BatchNormalization's running statistics are
        taken from rank 0 after the step (DDP broadcasts rank 0's buffers before each forward).
        The weights stay replicated; dropout masks differ per rank (the key is folded with the
        rank).

        XLA combines the step's pmeans into one all-reduce of a tuple of every gradient tensor;
        on CPUs its runtime then calls gloo once per tensor (``AllReduceThunk::Execute`` loops
        over the source buffers, xla/backends/cpu/runtime/all_reduce_thunk.cc), each call a
        round trip between the processes: ResNet-18's 62 gradients and 40 BatchNorm statistics
        are 102 allreduces a step. :meth:`data_parallel_bucketed` sends them in flat buffers."""
        return self._data_parallel(net, None)

    def data_parallel_bucketed(self, net: Any, bucket_bytes: int) -> Any:
        """:meth:`data_parallel` with the gradients, and the BatchNorm statistics taken from
        rank 0, raveled into flat buffers of at most ``bucket_bytes`` (consecutive tensors of
        one dtype in the pytree's order; a larger tensor alone), one collective each."""
        return self._data_parallel(net, bucket_bytes)

    def _data_parallel(self, net: Any, bucket: int | None) -> Any:
        jax = self.jax
        jnp = self.jnp
        lax = jax.lax
        from jax.sharding import PartitionSpec as P

        mesh = self._require_mesh()
        axis = MESH_AXIS

        def step(params: Any, opt_state: Any, state: Any, scaler: Any, x: Any, y: Any,
                 key: Any) -> tuple[Any, ...]:  # fmt: skip
            key, sub = jax.random.split(key)
            sub = jax.random.fold_in(sub, lax.axis_index(axis))
            # The weights are the same on every rank (invariant); marked as varying per rank,
            # jax.grad gives this rank's own gradients (differentiating through the implicit
            # invariant->varying cast would sum them already), and the exchange is the pmean.
            local = jax.tree.map(lambda p: _pcast_varying(lax, p, axis), params)
            loss, grads, new_state = net.gradients(local, state, scaler, x, y, sub)
            mean = lambda g: lax.pmean(g, axis)  # noqa: E731
            grads = _in_buckets(jax, grads, bucket, mean) if bucket else mean(grads)
            params, opt_state, scaler = net.apply_update(params, opt_state, scaler, grads)
            first = lax.axis_index(axis) == 0
            new_state = jax.tree.map(lambda s: jnp.where(first, s, jnp.zeros_like(s)), new_state)
            total = lambda s: lax.psum(s, axis)  # noqa: E731
            new_state = _in_buckets(jax, new_state, bucket, total) if bucket else total(new_state)
            return params, opt_state, new_state, scaler, key, loss.reshape(1)

        rep, shard = P(), P(axis)
        compiled = jax.jit(
            jax.shard_map(
                step,
                mesh=mesh,
                in_specs=(rep, rep, rep, rep, shard, shard, rep),
                out_specs=(rep, rep, rep, rep, rep, shard),
            )
        )

        # The global arrays of the last call, by argument, beside the local objects they stand
        # for: a step fed what the previous one returned (the train loop) reuses them instead of
        # wrapping every leaf again, as a JAX program keeps its global arrays from step to step
        # (wrapping ResNet-18's 165 leaves and back took 6-8 ms of a 32 ms step on 2 CPUs).
        kept: list[tuple[Any, Any] | None] = [None] * 7

        def as_global(i: int, local: Any, replicated: bool) -> Any:
            hit = kept[i]
            if hit is not None and hit[0] is local:
                return hit[1]
            g = jax.tree.map(lambda a: self._global(a, replicated=replicated), local)
            kept[i] = (local, g)
            return g

        def dp_step(params: Any, opt_state: Any, state: Any, scaler: Any, x: Any, y: Any,
                    key: Any) -> tuple[Any, ...]:  # fmt: skip
            args = (params, opt_state, state, scaler, x, y, key)
            out = compiled(
                *(as_global(i, a, replicated=i not in (4, 5)) for i, a in enumerate(args))
            )
            *trees, loss = out
            local = [jax.tree.map(self._local, tree) for tree in trees]
            for i, (lo, g) in zip((0, 1, 2, 3, 6), zip(local, trees, strict=True), strict=True):
                kept[i] = (lo, g)
            return (*local, self._local(loss).reshape(()))

        net.dp_step = dp_step
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """The same jitted step on this rank's batch without the gradient exchange (DDP's
        ``no_sync``): the ranks' weights drift apart afterwards."""
        loss = net.train_step(x, y, sync=False)
        self._track(net.params)
        return self._track(loss)
