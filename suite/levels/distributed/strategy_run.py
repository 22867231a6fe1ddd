"""Run one task of the ``strategies`` benchmark on one rank (inside the worker).

The same sequence for every strategy and framework, through the adapter's strategy words
(suite/adapters/base.py, ``DistributedWords``):

1. correctness on the zoo network: a synchronous strategy's k steps must equal one process
   training on the global batch (as data_parallel); any other strategy's distance from that
   synchronous result is recorded;
2. throughput on synthetic data (the suite's measurement loop; ranks decide jointly where
   the strategy keeps them in lock step), the bytes this rank sends per step (computed from the
   strategy's definition, and read from the process's own write counter), the communication
   share (the same steps on a network without any exchange);
3. the statistical cost on scikit-learn's digits: a fixed budget of epochs, the test accuracy
   every quarter epoch, steps and training time to the target accuracy, the final accuracy,
   and the distance of the final weights from the synchronous trajectory (one process on the
   same global batches).

The host compares each record with the ``allreduce`` record of the same run
(suite/aggregate.py: ``add_strategy_cost``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from suite import metrics as M
from suite import strategies as S
from suite.adapters.base import Adapter, NetworkOptions
from suite.benchmark import Context, Result
from suite.errors import UnsupportedError
from suite.levels.distributed.arithmetic import check_strategy_world, strategy_batches
from suite.levels.distributed.run import (
    batch_tensors,
    equivalence_network,
    keeps_group,
    launched_world,
)
from suite.levels.network.workload import digits_data, synthetic_batch
from suite.measure import MeasureConfig, measure
from suite.onnx import zoo
from suite.onnx.importer import unsupported_op

#: digits settings (global batch 48 divides over 1, 2, 3, 4, 6, 8, 12, 16 and 24 ranks)
DIGITS_DEFAULTS = {
    "quick": {"batch": 48, "lr": 0.05, "target_accuracy": 0.95, "epochs": 6},
    "full": {"batch": 48, "lr": 0.05, "target_accuracy": 0.97, "epochs": 20},
}
#: the digits network: the zoo MLP at its quick size (64-128-128-10)
DIGITS_ARCH = {"features": 64, "hidden": 128, "layers": 2, "classes": 10}
#: evaluations of the test accuracy per epoch (the resolution of steps-to-target)
EVALS_PER_EPOCH = 4


EQUIVALENCE_STEPS = 3
EXACT_TOLERANCE = 1e-5
#: steps timed for the write counter and for the no-exchange step of the comm share
COUNTED_STEPS = 20


def run_strategy(ctx: Context) -> list[Result]:
    task, adapter, p = ctx.task, ctx.adapter, ctx.params
    strategy = S.get(p["strategy"])
    if task["dtype"] != "fp32":
        raise UnsupportedError(
            f"the distributed level runs in fp32 for now; {task['dtype']} is not measured"
        )
    world = launched_world(task)
    if world < 2 and not (task.get("one_rank_group") and S.runs_at_one_rank(strategy)):
        raise UnsupportedError(
            f"strategy {strategy.name} exchanges between ranks; run it with --world-size 2 or more"
            + ("" if S.runs_at_one_rank(strategy) else " (it has no meaning in a group of one)")
        )
    backend = adapter.strategy_init(
        strategy.name, p["options"], task.get("dist_backend", "auto"),
        rendezvous=task["record_path"] + ".strategy",
    )  # fmt: skip
    # A worker session's next task reuses the process group, as the other distributed
    # benchmarks do (execute.py): destroying PyTorch's default group and initialising it again
    # on the same rendezvous store hung or failed with gloo "Read error"s in 1 of 3 runs (the
    # new group can read the old one's addresses from the store).
    keep = keeps_group(ctx)
    clean = False
    try:
        cfg = MeasureConfig(**{"warmup_iters": 5, **task["measure"]})
        coordination = adapter.strategy_coordination()
        if coordination.coordinates():
            fields = _run(task, adapter, p, strategy, world, cfg, ctx.timed_region)
            coordination.publish(fields)
        else:
            # this rank hosts part of the framework's runtime (TensorFlow's workers under
            # ParameterServerStrategy) while another rank's process drives the training: its
            # record is the coordinator's measurement, saying so
            fields = coordination.serve()
            fields.setdefault("work", {})["served_for_coordinator"] = True
        clean = True
    finally:
        if clean and keep:
            adapter.barrier()  # every rank is done with this task's collectives
        else:
            adapter.strategy_shutdown(clean=clean)
    fields.setdefault("work", {})["dist_backend"] = backend
    return [Result.from_fields(fields)]


#: samples of the fixed schedule (``fixed_schedule``)
FIXED_SAMPLES = 20


def fixed_schedule(cfg: MeasureConfig) -> MeasureConfig:
    """A measurement every rank runs identically without deciding anything jointly: a fixed
    number of warm-up steps, samples of one step each, no time-based stop."""
    return MeasureConfig(
        warmup_iters=cfg.warmup_iters, warmup_s=0.0, min_samples=FIXED_SAMPLES + 1,
        max_samples=FIXED_SAMPLES, time_budget_s=1e9, target_ci_rel=cfg.target_ci_rel,
        min_sample_s=0.0, max_inner=1, min_time_s=0.0,
    )  # fmt: skip


def _measured(doc: dict[str, Any], fixed: bool) -> dict[str, Any]:
    """The record's measurement; a fixed schedule's without a CI target, which it never
    checks (so it is never "noisy", and --retry-noisy does not rerun what cannot narrow)."""
    if fixed:
        doc.pop("target_ci_rel", None)
    return doc


def _flat(params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([params[k].ravel() for k in sorted(params)])


def _rel_distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    fa, fb = _flat(a), _flat(b)
    return float(np.linalg.norm(fa - fb) / max(float(np.linalg.norm(fb)), 1e-30))


def written_bytes() -> int | None:
    """Bytes this process has passed to write(2)-family calls (write, writev, pwrite: files
    and sockets alike): Linux's ``/proc/self/io`` ``wchar``, counted for every thread of the
    process (the framework's communication threads too). send(2)/sendmsg(2) are not counted
    (``Adapter.write_counter_blind`` says which frameworks send that way). None where the
    counter does not exist."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class _Net:
    """A network trained with the strategy, and what the executor needs to feed it."""

    def __init__(
        self,
        adapter: Adapter,
        model: Any,
        strategy: S.Strategy,
        p: dict[str, Any],
        world: int,
        rank: int,
        lr: float,
        seed: int,
    ) -> None:
        self.adapter, self.model, self.strategy = adapter, model, strategy
        self.rank, self.world = rank, world
        options = dict(p["options"])
        self.shapes: list[tuple[int, ...]] = []
        self.cut_elements_per_sample = 0
        net_options = NetworkOptions(lr=lr, channels_last=False, seed=seed)
        if strategy.data_parallel:
            net = adapter.build_network(model, "fp32", net_options)
        else:
            parts, cuts = S.split_stages(model, world)
            net = adapter.build_network(parts[rank], "fp32", net_options)
            options.update(stage=rank, stages=world)
            # what this stage sends: its output's activations to the next stage, the gradient
            # of its input to the previous one
            sent = [cuts[rank]] if rank < world - 1 else []
            sent += [cuts[rank - 1]] if rank > 0 else []
            self.cut_elements_per_sample = sum(S.value_elements_per_sample(model, c) for c in sent)
        self.shapes = [tuple(v.shape) for v in adapter.network_parameters(net).values()]
        self.net = adapter.apply_strategy(net, strategy.name, options, world)

    def step(self, x: Any, y: Any) -> Any:
        return self.adapter.train_step(self.net, x, y)

    def parameters(self) -> dict[str, np.ndarray]:
        return self.adapter.strategy_parameters(self.net)

    def bytes_per_step(self, global_batch: int, options: dict[str, Any]) -> dict[str, Any]:
        return self.adapter.strategy_bytes(
            self.strategy.name, options, self.shapes, self.world,
            cut_elements=self.cut_elements_per_sample * global_batch, stage=self.rank,
        )  # fmt: skip


def _shard(adapter: Adapter, strategy: S.Strategy, rank: int, local: int) -> slice:
    """This rank's part of a global batch: its shard, or all of it for a pipeline's stages and
    for a process that feeds every rank (TensorFlow's coordinator)."""
    if strategy.data_parallel and not adapter.strategy_coordination().feeds_all_ranks():
        return slice(rank * local, (rank + 1) * local)
    return slice(None)


def _run(
    task: dict[str, Any],
    adapter: Adapter,
    p: dict[str, Any],
    strategy: S.Strategy,
    world: int,
    cfg: MeasureConfig,
    timed_region: Callable[[], AbstractContextManager[Any]],
) -> dict[str, Any]:
    rank = int(os.environ.get("RANK", "0"))
    seed = task["seed"]
    check_strategy_world(p, strategy.data_parallel, world)
    global_batch, local_batch = strategy_batches(p, strategy.data_parallel, world)
    net_def = zoo.get(p["network"])
    arch = {
        k: v
        for k, v in p.items()
        if k not in ("network", "batch", "lr", "strategy", "options", "digits")
    }
    spec, classes = net_def.input_spec(arch), net_def.num_classes(arch)
    model = net_def.build(arch, seed=seed)
    for node in model.graph.node:
        if node.op_type not in adapter.onnx_ops:
            raise UnsupportedError(unsupported_op(node.op_type, node.name))
    checks: list[M.Check] = []
    work: dict[str, Any] = {"global_batch": global_batch, "per_rank_batch": local_batch}
    section: dict[str, Any] = {
        **strategy.describe(),
        "options": p["options"],
        "mechanism": adapter.strategies[strategy.name],
    }

    # 1. correctness on the zoo network
    eq_check, distance = _equivalence(adapter, model, p, strategy, spec, classes, world, rank, seed)
    if eq_check is not None:
        checks.append(eq_check)
    section["distance_after_steps"] = {"steps": EQUIVALENCE_STEPS, "l2_rel": distance}

    # 2. throughput, bytes, communication share
    x, y = synthetic_batch(spec, global_batch, classes, np.random.default_rng(seed))
    shard = _shard(adapter, strategy, rank, local_batch)

    net = _Net(adapter, model, strategy, p, world, rank, p["lr"], seed)
    xs, ys = batch_tensors(adapter, spec, x, y, shard)
    losses: list[Any] = []

    def step() -> Any:
        losses.append(net.step(xs, ys))
        return losses[-1]

    usable = adapter.strategy_words_usable(strategy.name)
    agree = adapter.agree_max if strategy.lockstep and usable else None
    if strategy.lockstep and not usable:
        # ranks in lock step that cannot decide jointly: the same fixed schedule on every rank
        cfg = fixed_schedule(cfg)
        work["measurement_schedule"] = (
            f"fixed ({cfg.warmup_iters} warm-up steps, {cfg.max_samples} samples of one step): "
            "the framework's mechanism alters the suite's agree word"
        )
    m = measure(lambda k: adapter.time(step, k), cfg, agree, region=timed_region)
    step_median = float(np.median(m.samples))
    entries = [
        M.STEP_TIME.entry(m.samples),
        M.rate_entry(M.THROUGHPUT, m.samples, global_batch),
        M.rate_entry(M.REGISTRY["throughput_per_rank"], m.samples, global_batch / world),
    ]
    # bytes: the definition's count, and the process's write counter over COUNTED_STEPS steps
    # (it also counts anything else the process writes: nothing else runs meanwhile)
    wire = net.bytes_per_step(global_batch, p["options"])
    before = written_bytes()
    adapter.time(step, COUNTED_STEPS)
    after = written_bytes()
    measured = None if before is None or after is None else (after - before) / COUNTED_STEPS
    blind = adapter.write_counter_blind
    if blind:
        measured = None
    entries.append(M.REGISTRY["bytes_per_step"].entry(value=float(wire["bytes"])))
    section["bytes_per_step"] = {
        "computed": float(wire["bytes"]),
        "uncompressed": float(wire["uncompressed"]),
        "model": wire["model"],
        "written_by_process": measured,
        "written_source": blind or ("/proc/self/io wchar: every byte this rank's process wrote "
        "with write(2)-family calls (sockets and files), over the same steps" if measured is not None
        else "no per-process write counter here (/proc/self/io)"),
        "value_is": "computed from the strategy's definition and the tensors exchanged",
    }  # fmt: skip
    if strategy.compression is not None and wire["bytes"] > 0:
        ratio = float(wire["uncompressed"]) / float(wire["bytes"])
        entries.append(M.REGISTRY["compression_ratio"].entry(value=ratio))
        section["compression_ratio"] = ratio
    values = [float(adapter.to_numpy(v)) for v in losses if v is not None]
    if values or strategy.data_parallel:
        bad = 0.0 if values and np.all(np.isfinite(values)) else float("inf")
        checks.append(M.Check("loss_finite_every_step", bad, 0.0))
    if strategy.data_parallel:
        # communication share: the same steps on a network that exchanges nothing
        local = adapter.build_network(
            model, "fp32", NetworkOptions(lr=p["lr"], channels_last=False, seed=seed)
        )
        one = slice(rank * local_batch, (rank + 1) * local_batch)  # one rank's shard
        xl, yl = batch_tensors(adapter, spec, x, y, one)
        adapter.train_step(local, xl, yl)
        t_local = (
            adapter.time(lambda: adapter.train_step(local, xl, yl), COUNTED_STEPS) / COUNTED_STEPS
        )
        share = max(0.0, 1.0 - t_local / step_median)
        entries.append(M.REGISTRY["comm_share"].entry(value=100.0 * share))
        work["no_exchange_step_s"] = t_local
    else:
        work["comm_share_unavailable"] = (
            "a pipeline's stages overlap their compute with the sends; no step without the "
            "exchange exists to compare with"
        )
    if strategy.identical_across_ranks and not usable:
        work["identical_weights_unchecked"] = (
            "the framework's mechanism alters the suite's allgather word while this strategy runs"
        )
    elif strategy.identical_across_ranks:
        if strategy.lockstep:
            adapter.barrier()
        mine = _flat(net.parameters())
        everyone = adapter.to_numpy(adapter.allgather(adapter.from_numpy(mine, "fp32"))).reshape(
            world, -1
        )
        spread = float(
            np.max(np.abs(everyone - everyone[0])) / max(float(np.max(np.abs(everyone[0]))), 1e-30)
        )
        checks.append(M.Check("weights_identical_across_ranks.max_rel_diff", spread, 1e-6))
    if strategy.lockstep:
        adapter.barrier()

    # 3. statistical cost on digits
    digits = _digits(adapter, strategy, p, world, rank, seed)
    section["digits"] = digits["section"]
    entries += digits["metrics"]
    checks += digits["checks"]
    work["steps_measured"] = len(losses)
    if world > 1:
        work.update(adapter.data_parallel_settings())
    return {
        "params": p,
        "metrics": entries,
        "correctness": {"passed": all(c.passed for c in checks), "checks": [c.to_dict() for c in checks]},
        "measurement": _measured(m.to_dict(cfg), fixed="measurement_schedule" in work),
        "work": work,
        "strategy": section,
    }  # fmt: skip


def _equivalence(
    adapter: Adapter,
    model: Any,
    p: dict[str, Any],
    strategy: S.Strategy,
    spec: Any,
    classes: int,
    world: int,
    rank: int,
    seed: int,
) -> tuple[M.Check | None, float]:
    """k steps with the strategy against k single-process steps on the global batch: a check
    for an exact strategy, the distance for any other. Networks with batch norm are checked
    through the zoo MLP (per-rank or per-micro-batch statistics differ from the global batch's
    by design), as data_parallel does."""
    model, spec, classes, tag = equivalence_network(model, spec, classes, p["network"], seed)
    global_batch, local_batch = strategy_batches(p, strategy.data_parallel, world)
    x, y = synthetic_batch(spec, global_batch, classes, np.random.default_rng(seed + 11))
    shard = _shard(adapter, strategy, rank, local_batch)

    net = _Net(adapter, model, strategy, p, world, rank, p["lr"], seed)
    ref = adapter.build_network(
        model, "fp32", NetworkOptions(lr=p["lr"], channels_last=False, seed=seed)
    )
    xs, ys = batch_tensors(adapter, spec, x, y, shard)
    xg, yg = batch_tensors(adapter, spec, x, y, slice(None))
    for _ in range(EQUIVALENCE_STEPS):
        net.step(xs, ys)
        adapter.train_step(ref, xg, yg)
    err = _rel_distance(net.parameters(), adapter.network_parameters(ref))
    if strategy.lockstep:
        adapter.barrier()
    if not strategy.exact:
        return None, err
    name = f"equals_single_process_on_global_batch[{tag}].l2_rel_error"
    return M.Check(name, err, EXACT_TOLERANCE), err


def _digits(
    adapter: Adapter, strategy: S.Strategy, p: dict[str, Any], world: int, rank: int, seed: int
) -> dict[str, Any]:
    """Train the digits MLP with the strategy for a fixed budget of epochs; the test accuracy
    (of this rank's weights, evaluated in float64 NumPy) every quarter epoch."""
    from suite.onnx.numpy_eval import NumpyGraph

    d = p["digits"]
    xtr, ytr, xte, yte = digits_data(seed)
    net_def = zoo.get("mlp")
    arch = net_def.validate(dict(DIGITS_ARCH))
    model = net_def.build(arch, seed=seed)
    dp = {**p, "batch": d["batch"]}
    global_batch, local_batch = strategy_batches(dp, strategy.data_parallel, world)
    steps_per_epoch = len(xtr) // global_batch
    total = steps_per_epoch * d["epochs"]
    every = max(1, steps_per_epoch // EVALS_PER_EPOCH)
    rng = np.random.default_rng(seed)
    order = np.concatenate(
        [rng.permutation(len(xtr))[: steps_per_epoch * global_batch] for _ in range(d["epochs"])]
    )
    shard = _shard(adapter, strategy, rank, local_batch)
    batches = []  # host->device copies made before any clock starts
    for s in range(total):
        idx = order[s * global_batch : (s + 1) * global_batch][shard]
        batches.append((adapter.from_numpy(xtr[idx], "fp32"), adapter.labels_from_numpy(ytr[idx])))
    net = _Net(adapter, model, strategy, dp, world, rank, d["lr"], seed)
    graph = NumpyGraph(model)

    def accuracy(params: dict[str, np.ndarray]) -> float:
        return float((graph(xte, params=params).argmax(axis=1) == yte).mean())

    it = iter(batches)
    losses: list[Any] = []

    def step() -> Any:
        xb, yb = next(it)
        losses.append(net.step(xb, yb))
        return losses[-1]

    if strategy.lockstep:
        adapter.barrier()
    curve: list[list[float]] = []
    # The first step traces or compiles what the framework runs (tf.function on every worker,
    # a hybridized block, DDP's buckets): it is taken, and counted, before the clock starts.
    first_s = adapter.time(step, 1)
    done, train_s = 1, 0.0
    while done < total:
        k = min(every - done % every, total - done)
        train_s += adapter.time(step, k)
        done += k
        curve.append([done, train_s, accuracy(net.parameters())])
    final_params = net.parameters()
    # the synchronous trajectory: one process on the same global batches
    ref = adapter.build_network(
        model, "fp32", NetworkOptions(lr=d["lr"], channels_last=False, seed=seed)
    )
    for s in range(total):
        idx = order[s * global_batch : (s + 1) * global_batch]
        adapter.train_step(
            ref, adapter.from_numpy(xtr[idx], "fp32"), adapter.labels_from_numpy(ytr[idx])
        )
    ref_params = adapter.network_parameters(ref)
    distance = _rel_distance(final_params, ref_params)
    ref_accuracy = accuracy(ref_params)
    reached = next((c for c in curve if c[2] >= d["target_accuracy"]), None)
    final = curve[-1][2]
    best = max(c[2] for c in curve)
    metrics = [
        M.REGISTRY["final_accuracy"].entry(value=final),
        M.REGISTRY["distance_from_sync"].entry(value=distance),
    ]
    if reached is not None:
        metrics += [
            M.TIME_TO_ACCURACY.entry(value=reached[1]),
            M.REGISTRY["steps_to_target"].entry(value=reached[0]),
        ]
    values = np.array([float(adapter.to_numpy(v)) for v in losses if v is not None])
    checks = [
        M.Check(
            "digits.reached_target_accuracy.shortfall", max(0.0, d["target_accuracy"] - best), 0.0
        )
    ]
    if values.size:
        checks.append(
            M.Check(
                "digits.loss_finite_every_step",
                0.0 if np.all(np.isfinite(values)) else float("inf"),
                0.0,
            )
        )
    if strategy.lockstep:
        adapter.barrier()
    section = {
        "target_accuracy": d["target_accuracy"],
        "epochs": d["epochs"],
        "global_batch": global_batch,
        "lr": d["lr"],
        "budget_steps": total,
        "steps_to_target": None if reached is None else int(reached[0]),
        "time_to_accuracy_s": None if reached is None else reached[1],
        "samples_to_target": None if reached is None else int(reached[0]) * global_batch,
        "final_accuracy": final,
        "train_time_s": train_s,
        "first_step_s": first_s,
        "clock": "training time after the first step (which traces or compiles, untimed), "
        "test evaluations excluded",
        "synchronous_reference_accuracy": ref_accuracy,
        "distance_from_sync": distance,
        "curve": curve,
        "curve_columns": ["steps", "train_time_s", "test_accuracy"],
        "evaluated": "this rank's weights, in float64 NumPy (suite/onnx/numpy_eval.py)",
    }
    return {"metrics": metrics, "checks": checks, "section": section}
