"""How the collectives and data-parallel training run on one rank (called by their benchmarks'
``run``). Every rank returns its own results; the runner aggregates the ranks (min/median/max
across ranks) into the task's record."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from suite import metrics as M
from suite.adapters.base import Adapter, NetworkOptions
from suite.benchmark import Context, Result
from suite.errors import UnsupportedError
from suite.levels.distributed import arithmetic as B
from suite.levels.network.run import (
    LR_CANDIDATES,
    LR_PROBE_STEPS,
    finite_losses_check,
    first_unmapped,
    lr_range_check,
    unmapped_reason,
)
from suite.levels.network.workload import (
    USER_MODEL,
    UserFile,
    Workload,
    fixed_batch,
    synthetic_batch,
    untrainable_output,
    without_final_softmax,
)
from suite.measure import MeasureConfig, measure
from suite.onnx import zoo

ALGBW, BUSBW, COMM_SHARE = M.REGISTRY["algbw"], M.REGISTRY["busbw"], M.REGISTRY["comm_share"]
THROUGHPUT_PER_RANK = M.REGISTRY["throughput_per_rank"]
EQUIVALENCE_STEPS = 3


def in_process_group(
    ctx: Context,
    body: Callable[[int, MeasureConfig, Callable[[Result], None]], list[Result]],
) -> list[Result]:
    """Run ``body(world, cfg, done)`` on this rank inside the framework's process group:
    joined before (world > 1), left after, or kept for a worker session's next task where the
    framework allows it (suite/session.py). Every result's work names the backend in use;
    ``done`` hands a sweep's point, so stamped, to :attr:`Context.point_done` as it ends."""
    task, adapter = ctx.task, ctx.adapter
    if task["dtype"] not in ("fp32",):
        raise UnsupportedError(
            f"the distributed level runs in fp32 for now; {task['dtype']} is not measured"
        )
    world = launched_world(task)
    grouped = in_group(task, world)
    if grouped:
        adapter.bucket_at_init(ctx.params.get("bucket"))  # a runtime that reads it at its start
    backend = adapter.dist_init(task.get("dist_backend", "auto")) if grouped else "none"

    def done(result: Result) -> None:
        if ctx.point_done is not None:
            result.work = {**(result.work or {}), "dist_backend": backend}
            ctx.point_done(result)

    # A worker session's next task of the same ranks reuses the process group
    # (suite/session.py) where the framework allows it; the last task leaves it.
    keep = keeps_group(ctx)
    clean = False
    try:
        cfg = MeasureConfig(**{"warmup_iters": 5, **task["measure"]})
        out = body(world, cfg, done)
        clean = True
    finally:
        # After a failure the other ranks may be blocked in a collective: no closing barrier
        # (it would deadlock); the worker exits non-zero and the launcher stops the rest.
        if grouped:
            if clean and keep:
                adapter.barrier()  # every rank is done with this task's collectives
            else:
                adapter.dist_shutdown(clean=clean)
    for result in out:
        result.work = {**(result.work or {}), "dist_backend": backend}
    return out


def launched_world(task: dict[str, Any]) -> int:
    """The ranks the launcher started (WORLD_SIZE), which must be the task's world size."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != task["world_size"]:
        raise RuntimeError(f"launched {world} ranks for a task of world size {task['world_size']}")
    return world


def in_group(task: dict[str, Any], world: int) -> bool:
    """Whether this rank joins the framework's process group: always with several ranks, and
    at one rank when the task asks for a group of one (``one_rank_group``)."""
    return world > 1 or bool(task.get("one_rank_group"))


def keeps_group(ctx: Context) -> bool:
    """Whether this task leaves the process group up for the session's next task."""
    session = ctx.task.get("session")
    return ctx.adapter.keeps_process_group and session is not None and not session["last"]


def collective(ctx: Context, op: str) -> list[Result]:
    """A collective swept over the task's message sizes: one result per size."""

    def body(world: int, cfg: MeasureConfig, done: Callable[[Result], None]) -> list[Result]:
        # a sample is capped at 64 calls (see the refill below)
        cfg = MeasureConfig(**{**cfg.to_dict(), "max_inner": min(cfg.max_inner, 64)})
        agree = ctx.adapter.agree_max if in_group(ctx.task, world) else None
        # timed_region wraps each measure()'s sampling phase only (one region per message size
        # of a sweep), so the telemetry's energy is that of the sampled calls, not of set-up,
        # warm-up and checks.
        return measure_collective(
            ctx.task, ctx.adapter, ctx.params, op, world, cfg, agree, ctx.timed_region, done
        )

    return in_process_group(ctx, body)


def data_parallel(ctx: Context) -> list[Result]:
    def body(world: int, cfg: MeasureConfig, done: Callable[[Result], None]) -> list[Result]:
        agree = ctx.adapter.agree_max if in_group(ctx.task, world) else None
        return [
            _data_parallel(ctx.task, ctx.adapter, ctx.params, world, cfg, agree, ctx.timed_region)
        ]

    return in_process_group(ctx, body)


def collective_declined(adapter_cls: type[Adapter], op: str) -> str:
    """Why the collective ``op`` is not measured with ``adapter_cls`` ("" when it is): the
    adapter emulates it (its time would be another collective's) or has none."""
    return adapter_cls.emulated_collectives.get(op) or adapter_cls.unsupported_collectives.get(
        op, ""
    )


def measure_collective(
    task: dict[str, Any],
    adapter: Adapter,
    params: dict[str, Any],
    op: str,
    world: int,
    cfg: MeasureConfig,
    agree: Callable[[int], int] | None,
    timed_region: Callable[[], AbstractContextManager[Any]] = nullcontext,
    done: Callable[[Result], None] | None = None,
) -> list[Result]:
    """The collective ``op`` measured at each of ``params["sizes"]`` in the process group this
    rank has joined: one result per size, each also handed to ``done`` as soon as it is
    measured (a sweep stopped by its timeout keeps those), and also what
    benchmarks/validation/allreduce_vs_bare.py times beside a bare loop."""
    if not in_group(task, world):
        raise UnsupportedError(
            f"{op} needs at least 2 ranks, or a group of one (--world-size 1 --dist-backend nccl)"
        )
    declined = collective_declined(type(adapter), op)
    if declined:
        raise UnsupportedError(declined)
    rank = int(os.environ["RANK"])
    call = {"allreduce": adapter.allreduce, "allgather": adapter.allgather, "broadcast": adapter.broadcast,
            "reduce_scatter": adapter.reduce_scatter}[op]  # fmt: skip
    factor = B.bus_factor(op, world)
    out = []
    for size in params["sizes"]:
        n = B.element_count(op, size, world)
        nbytes = n * B.ITEMSIZE
        seed = task["seed"] + size
        # Value check on fresh buffers, before any timing.
        x = adapter.from_numpy(B.rank_input(op, n, rank, world, seed), "fp32")
        got = adapter.to_numpy(call(x))
        want = B.expected(op, n, rank, world, seed)
        checks = [_value_check(adapter, op, got, want)]
        wrong = int(checks[0].error)
        # Timing on separate buffers, refilled before every sample (outside the clock): an
        # in-place sum grows the values world-fold per call, so they start at 2^-60 times small
        # integers (normal floats, exact) and a sample is capped at 64 calls — never inf, never
        # zero or denormal. Correctness was checked above on fresh buffers.
        # fp32 already (exact: small integers times a power of two), so a refill is a copy
        pristine = (B.rank_input(op, n, rank, world, seed + 1) * 2.0**-60).astype(np.float32)
        buf = adapter.from_numpy(pristine, "fp32")
        adapter.barrier()

        def timed(k: int, buf: Any = buf, pristine: np.ndarray = pristine) -> float:
            adapter.copy_from_numpy(buf, pristine)
            # Every rank has refilled before the clock starts; without this the first call of
            # a sample waits for the slowest rank's refill and is timed with it (a whole call's
            # worth at large sizes, where a sample is a single call).
            adapter.barrier()
            return adapter.time(lambda: call(buf), k)

        m = measure(timed, cfg, agree, region=timed_region)
        out.append(Result(
            params={"message_bytes": nbytes, "elements": n, "requested_bytes": size},
            metrics=[M.TIME.entry(m.samples), M.rate_entry(ALGBW, m.samples, nbytes, 1e9),
                     M.rate_entry(BUSBW, m.samples, nbytes * factor, 1e9)],
            checks=checks,
            measurement=m.to_dict(cfg),
            work={"bytes": nbytes, "bus_factor": factor, "wrong_elements": wrong},
        ))  # fmt: skip
        if done is not None:
            done(out[-1])
    return out


def _value_check(adapter: Adapter, op: str, got: np.ndarray, want: np.ndarray) -> M.Check:
    """How many elements of a collective's result are wrong (they must all be exact). A wrong
    result says where (the first and last wrong index, of how many) and, when the adapter
    declares a bug of its framework that does this here, names it."""
    if got.shape != want.shape:
        detail: dict[str, Any] = {"shape": list(got.shape), "expected_shape": list(want.shape)}
        wrong = int(want.size)
    else:
        where = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        wrong = int(where.size)
        detail = {}
        if wrong:
            detail = {"first_wrong": int(where[0]), "last_wrong": int(where[-1]), "of": want.size}
    if wrong and (bug := adapter.known_bug(op)):
        detail["known_bug"] = bug
    return M.Check(f"{op}.wrong_elements", float(wrong), 0.0, detail=detail or None)


def batch_tensors(
    adapter: Adapter, spec: Any, x: np.ndarray, y: np.ndarray, rows: Any
) -> tuple[Any, Any]:
    """The ``rows`` of a batch as the adapter's tensors: the inputs (fp32, or int64 token ids)
    and the labels."""
    inputs = x[rows]
    if spec.kind == "int64":
        return adapter.labels_from_numpy(inputs), adapter.labels_from_numpy(y[rows])
    return adapter.from_numpy(inputs, "fp32"), adapter.labels_from_numpy(y[rows])


def _flat(params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([params[k].ravel() for k in sorted(params)])


def _data_parallel(
    task: dict[str, Any],
    adapter: Adapter,
    p: dict[str, Any],
    world: int,
    cfg: MeasureConfig,
    agree: Callable[[int], int] | None,
    timed_region: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> Result:
    rank = int(os.environ.get("RANK", "0"))
    _bucket_settable(adapter, p.get("bucket"))  # at one rank too: the bucketed series' base
    global_batch, local_batch = B.data_parallel_batches(p, world)
    model, spec, classes, trained_as, reference = _network(
        p, task["seed"], local_batch, global_batch
    )
    node = first_unmapped(model, adapter.onnx_ops, local_batch)  # after folding, as trained
    if node is not None:
        raise UnsupportedError(unmapped_reason(node, adapter.name))
    # The global batch is the same seeded data on every rank; each rank trains on its shard.
    x, y = synthetic_batch(spec, global_batch, classes, np.random.default_rng(task["seed"]))
    shard = slice(rank * local_batch, (rank + 1) * local_batch)

    lr = p["lr"]
    if lr is None:  # a user's model without a rate: the network level's range check
        lr, trained_as["lr_range_check"] = _user_lr(
            adapter, Workload(model, spec, classes, USER_MODEL), x[shard], y[shard], cfg, agree
        )
    options = NetworkOptions(lr=lr, channels_last=False)
    checks = _equivalence(
        adapter, model, p, spec, classes, world, rank, options, task["seed"],
        in_group(task, world), reference,
    )  # fmt: skip

    grouped = in_group(task, world)
    net = adapter.build_network(model, "fp32", options)
    if grouped:
        _wrap(adapter, net, p.get("bucket"))
    xs, ys = batch_tensors(adapter, spec, x, y, shard)
    losses: list[Any] = []

    def step() -> Any:  # returns the loss: a lazy framework's time() waits on it
        losses.append(adapter.train_step(net, xs, ys))
        return losses[-1]

    m = measure(lambda k: adapter.time(step, k), cfg, agree, region=timed_region)
    step_median = float(np.median(m.samples))
    entries = [
        M.STEP_TIME.entry(m.samples),
        M.rate_entry(M.THROUGHPUT, m.samples, global_batch),
        M.rate_entry(THROUGHPUT_PER_RANK, m.samples, local_batch),
    ]
    values = np.array([float(adapter.to_numpy(v)) for v in losses])
    checks.append(finite_losses_check(values))
    work: dict[str, Any] = {
        "global_batch": global_batch,
        "per_rank_batch": local_batch,
        "steps": len(values),
    }
    work.update(trained_as)
    if p.get("bucket"):
        work["bucket_bytes"] = int(p["bucket"])
        work["bucket_mechanism"] = adapter.data_parallel_buckets
    if grouped:
        work.update(adapter.data_parallel_settings())
    if grouped:
        # After all the timed steps every rank must hold the same weights.
        mine = _flat(adapter.network_parameters(net))
        everyone = adapter.to_numpy(adapter.allgather(adapter.from_numpy(mine, "fp32"))).reshape(
            world, -1
        )
        spread = float(
            np.max(np.abs(everyone - everyone[0])) / max(float(np.max(np.abs(everyone[0]))), 1e-30)
        )
        checks.append(M.Check("weights_identical_across_ranks.max_rel_diff", spread, 1e-6))
        # Communication share: the same steps without the gradient exchange (DDP no_sync).
        # Last, because unsynchronised steps let the ranks' weights drift apart.
        reps = max(3, min(20, m.inner * 3))
        t_nosync = adapter.time(lambda: adapter.train_step_no_sync(net, xs, ys), reps) / reps
        adapter.barrier()
        share = max(0.0, 1.0 - t_nosync / step_median)
        entries.append(COMM_SHARE.entry(value=100.0 * share))
        work["no_sync_step_s"] = t_nosync
    return Result(metrics=entries, checks=checks, measurement=m.to_dict(cfg), work=work)


def _network(
    p: dict[str, Any], seed: int, local_batch: int, global_batch: int
) -> tuple[Any, Any, int, dict[str, Any], Any]:
    """(ONNX model, input spec, classes, what the record's work says of it, the reference for
    the single-process check on the global batch: see ``_equivalence``) of a data_parallel
    task: the zoo network, or a user's file as the network level trains it: a final Softmax
    left out, its other inputs bound at the batch it is fed (the per-rank batch; the global
    batch for the reference, unless the file is fixed at one batch)."""
    if p["network"] != USER_MODEL:
        net_def = zoo.get(p["network"])
        arch = {
            k: v for k, v in p.items() if k not in ("network", "scaling", "batch", "lr", "bucket")
        }
        model = net_def.build(arch, seed=seed)
        return model, net_def.input_spec(arch), net_def.num_classes(arch), {}, None

    user = UserFile.read(p["model"], p.get("dims"))
    w = user.at(local_batch)
    untrainable = untrainable_output(w.classes)
    if untrainable:
        raise UnsupportedError(untrainable)
    w, softmax_left_out = without_final_softmax(w)
    said: dict[str, Any] = {"classes": w.classes, **w.said()}
    if softmax_left_out:
        said["trained_without_final_softmax"] = softmax_left_out
    reference: Any = None  # the same model feeds the global batch
    if fixed_batch(user.at(None).model) is not None:
        reference = False  # one process cannot feed it the global batch
    elif w.bound:  # its other inputs bound at a batch's rows: built again for the global batch
        reference = without_final_softmax(user.at(global_batch))[0].model
    return w.model, w.input, w.classes, said, reference


def _user_lr(
    adapter: Adapter,
    w: Workload,
    x: np.ndarray,
    y: np.ndarray,
    cfg: MeasureConfig,
    agree: Callable[[int], int] | None,
) -> tuple[float, dict[str, Any]]:
    """The learning rate a user's model trains at data-parallel when its size gives none: the
    network level's range check on this rank's shard (its per-rank batch), and of the rates
    the ranks chose the smallest (every rank must train at one rate; the one that kept every
    shard's losses finite and falling for as long as the timed run). Returns the rate and what
    the record says of it."""
    give = (
        "give one in a --config file: [distributed.data_parallel] sizes = [{ network = "
        '"onnx", model = "FILE", batch = B, lr = 0.001 }]'
    )
    try:
        mine, tried = lr_range_check(
            adapter, w, "fp32", NetworkOptions(lr=0.0, channels_last=False), x, y, cfg, give
        )
    except RuntimeError as exc:  # no rate trains this shard: every rank must hear of it
        failed: RuntimeError | None = exc
        index = len(LR_CANDIDATES)
    else:
        failed, index = None, LR_CANDIDATES.index(mine)
    agreed = agree(index) if agree is not None else index
    if failed is not None:
        raise failed
    if agreed == len(LR_CANDIDATES):
        raise RuntimeError(f"no learning rate trained another rank's shard; {give}")
    return LR_CANDIDATES[agreed], {
        "chosen": LR_CANDIDATES[agreed], "this_rank_chose": mine, "tried": tried,
        "steps": LR_PROBE_STEPS, "agreed": "the smallest rate any rank chose",
    }  # fmt: skip


def _wrap(adapter: Adapter, net: Any, bucket: int | None) -> None:
    """The adapter's data parallelism, in buckets of ``bucket`` bytes where one was asked for
    (an UnsupportedError where the adapter's mechanism has no bucket to set)."""
    if bucket is None:
        adapter.data_parallel(net)
        return
    _bucket_settable(adapter, bucket)
    adapter.data_parallel_bucketed(net, int(bucket))


def _bucket_settable(adapter: Adapter, bucket: int | None) -> None:
    if bucket is not None and not adapter.data_parallel_buckets:
        raise UnsupportedError(
            f"{adapter.name}: its data parallelism has no bucket size to set; run "
            "data_parallel without bucket"
        )


def equivalence_network(
    model: Any, spec: Any, classes: int, name: str, seed: int
) -> tuple[Any, Any, int, str]:
    """The network an exactness check trains: ``model`` itself, or the zoo MLP where ``model``
    has batch norm (per-rank or per-micro-batch statistics differ from the global batch's by
    design): (model, input spec, classes, the name the check carries)."""
    if not any(n.op_type == "BatchNormalization" for n in model.graph.node):
        return model, spec, classes, name
    return _zoo_mlp(seed)


def _zoo_mlp(seed: int) -> tuple[Any, Any, int, str]:
    mlp = zoo.get("mlp")
    arch = mlp.validate({})
    return mlp.build(arch, seed=seed), mlp.input_spec(arch), mlp.num_classes(arch), "mlp"


def _equivalence(
    adapter: Adapter,
    model: Any,
    p: dict[str, Any],
    spec: Any,
    classes: int,
    world: int,
    rank: int,
    options: NetworkOptions,
    seed: int,
    grouped: bool | None = None,
    reference: Any = None,
) -> list[M.Check]:
    """k data-parallel steps on shards == k single-process steps on the concatenated batch.

    Exact only without batch norm (per-rank batch statistics differ from global ones by
    design), so networks with BatchNormalization are checked through an MLP of the zoo with
    the same global batch, and the check's name says so. ``reference``: the same network built
    for the global batch (a user's file binds its other inputs at one batch), by default
    ``model``; ``False`` where it cannot be fed the global batch (a user's file fixed at one
    batch), which is checked through the MLP too.
    """
    if reference is False:
        model, spec, classes, tag = _zoo_mlp(seed)
        reference = model
    else:
        reference = model if reference is None else reference
        checked, spec, classes, tag = equivalence_network(
            reference, spec, classes, p["network"], seed
        )
        model, reference = (model, reference) if checked is reference else (checked, checked)
    global_batch, local_batch = B.data_parallel_batches(p, world)
    x, y = synthetic_batch(spec, global_batch, classes, np.random.default_rng(seed + 11))
    shard = slice(rank * local_batch, (rank + 1) * local_batch)

    grouped = world > 1 if grouped is None else grouped
    dp = adapter.build_network(model, "fp32", options)
    if grouped:
        _wrap(adapter, dp, p.get("bucket"))
    ref = adapter.build_network(reference, "fp32", options)
    xs, ys = batch_tensors(adapter, spec, x, y, shard)
    xg, yg = batch_tensors(adapter, spec, x, y, slice(None))
    for _ in range(EQUIVALENCE_STEPS):
        adapter.train_step(dp, xs, ys)
        adapter.train_step(ref, xg, yg)
    a, b = _flat(adapter.network_parameters(dp)), _flat(adapter.network_parameters(ref))
    err = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    if grouped:
        adapter.barrier()
    return [M.Check(f"equals_single_process_on_global_batch[{tag}].l2_rel_error", err, 1e-5)]
