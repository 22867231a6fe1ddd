"""The ``feed`` benchmark of the training level: a zoo network trained at the transform's
output size (224) from the framework's loader, against the same training from memory.

The same network (the ONNX zoo's ResNet, built by the adapter) trains ``steps`` steps on
batches already in memory (gathered from the loader first, not timed), then ``steps`` steps
fed by the loader (a new epoch: the loader works while the network trains, on the same cores).
Per fed step the time waiting for the next batch and bringing it to the network (through
NumPy: each adapter's ``from_numpy``) is measured; the **input-bound share** is that wait over
the step time, and the step time against the from-memory step time says the same from the
other side (``1 - memory/fed``). The report sets the loader records' rates against this
training rate from memory (the feeding capacity "from the run"). Imports no framework.
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import NetworkOptions
from suite.benchmark import Context, Field, Params, Result, SizeSpec
from suite.levels.training import pipeline as P
from suite.levels.training.loader import (
    DATA_FIELDS,
    DataBenchmark,
    prepare,
    rank_world,
    usable_cores,
    worker_sweep,
)
from suite.metrics import Check, Metric
from suite.metrics.performance import INPUT_BOUND_SHARE, STEP_TIME, THROUGHPUT

STEP_TIME_MEMORY = Metric(
    "step_time_from_memory", "s", higher_is_better=False,
    description="end to end: the same training step on batches already in memory",
)  # fmt: skip
INPUT_WAIT = Metric(
    "input_wait", "s", higher_is_better=False,
    description="end to end: per fed step, waiting for the loader's batch and bringing it to the network",
)  # fmt: skip


class FeedBenchmark(DataBenchmark):
    name: ClassVar[str] = "feed"
    words: ClassVar[frozenset[str]] = frozenset({"network"})
    summary: ClassVar[str] = (
        "end to end: a zoo ResNet trained at 224 px from the loader vs from memory; the "
        "input-bound share of the step"
    )
    fields: ClassVar[dict[str, Field]] = {
        **DATA_FIELDS,
        "network": Field(str, default="resnet18", choices=("resnet18", "resnet50")),
        "width": Field(int, default=1, below=65),
        "steps": Field(int, default=8, below=100_001),
        "warmup": Field(int, default=2, positive=False, below=1001),
        "lr": Field(float, default=0.01, below=10),  # the network level's range
    }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        quick = size_set == "quick"
        out = []
        for fmt in ("folder", "webdataset", "tfrecord", "recordio"):
            for workers in worker_sweep(usable_cores(), quick):
                if quick:
                    # a quarter of the channels (1/16 of the FLOPs): at full width one step
                    # took 1-4 s on 2 cores, and the four quick records most of `make bench
                    # LEVEL=training` (336 of 755 s at load 6); 1/8 width crashes PyTorch's CPU
                    # step at 224 px (docs/reference/training-level.md)
                    p = {"format": fmt, "workers": workers, "batch": 16, "dataset": "quick",
                         "network": "resnet18", "width": 4, "steps": 8, "warmup": 2}  # fmt: skip
                    src = "ResNet-18 at 1/4 width, 224 px, batch 16 (what 2 CPU cores train fast)"
                else:
                    p = {"format": fmt, "workers": workers, "batch": 64, "dataset": "full",
                         "network": "resnet50", "steps": 30, "warmup": 5}  # fmt: skip
                    src = "ResNet-50 at 224 px, batch 64"
                out.append(SizeSpec(p, src))
        return out

    def check(self, params: Params) -> None:
        from suite.errors import ConfigError
        from suite.onnx import zoo

        super().check(params)
        if params["transform"] != "train":
            raise ConfigError("feed.transform: training reads the train transform; set train")
        # the network's own fields at the loader's 224 px, now rather than in the worker (a
        # width that does not divide the base width was a failed task)
        try:
            zoo.get(params["network"]).validate({"resolution": 224, "width": params["width"]})
        except ConfigError as exc:
            raise ConfigError(f"feed.width: {exc}") from None

    def label(self, p: Params) -> str:
        w = f"/{p['width']}" if p["width"] != 1 else ""
        return f"{p['network']}{w} from {p['format']} w{p['workers']} b{p['batch']} x{p['steps']}"

    def run(self, ctx: Context) -> Result:
        return run_feed(ctx)


def _step(adapter: Any, net: Any, x: Any, y: Any) -> float:
    """One training step, done: the loss waited for and the device synchronised (an
    asynchronous engine, MXNet's, would otherwise still run the backward pass and the update
    while the next step waits for its batch, and that wait would be counted as input)."""
    loss = adapter.train_step(net, x, y)
    adapter.wait(loss)
    adapter.synchronize()
    return float(adapter.to_numpy(loss))


def run_feed(ctx: Context) -> Result:
    from suite.onnx import zoo

    p, adapter = ctx.params, ctx.adapter
    rank, world = rank_world(ctx)
    data, facts = prepare(ctx)
    arch = {"resolution": 224, "classes": data.catalogue.classes, "width": p["width"]}
    model = zoo.get(p["network"]).build(arch, seed=ctx.seed)
    # the task's dtype is the training's precision (bf16/fp16: mixed, fp32 weights); the
    # loader delivers float32 images whatever it is
    net = adapter.build_network(
        model, ctx.dtype, NetworkOptions(lr=p["lr"], seed=ctx.seed, amp=ctx.dtype != "fp32")
    )
    spec = data.spec(workers=p["workers"], batch=p["batch"], transform="train", seed=ctx.seed,
                     rank=rank, world=world, decode=p["decode"])  # fmt: skip
    total = p["warmup"] + p["steps"]
    loader = ctx.adapter.data_loader(spec)
    try:
        # from memory: the first batches of epoch 0, brought to the network before timing
        held: list[tuple[Any, Any]] = []
        delivered: list[P.Epoch] = []
        base = data.label_base  # a user's labels may count from 1: the network's from 0
        ep0 = P.read_epoch(
            loader, 0, limit=total,
            on_batch=lambda b: held.append((adapter.batch_to_network(b.images),
                                            adapter.labels_from_numpy(np.asarray(b.labels) - base))),
        )  # fmt: skip
        delivered.append(ep0)
        if len(held) < total:
            from suite.errors import ConfigError

            raise ConfigError(f"feed: the dataset gives {len(held)} batches of {p['batch']}, "
                              f"fewer than warmup + steps = {total}; lower them or the batch")  # fmt: skip
        tensors = list(held)
        adapter.synchronize()  # every held batch is on the device before the first clock
        losses: list[float] = []
        mem_steps = []
        for i, (xt, yt) in enumerate(tensors):
            t0 = time.perf_counter()
            loss = _step(adapter, net, xt, yt)
            if i >= p["warmup"]:
                mem_steps.append(time.perf_counter() - t0)
            losses.append(loss)
        del tensors
        held.clear()
        # fed by the loader: epoch 1, each step waits for its batch
        waits: list[float] = []
        fed_steps: list[float] = []
        state = {"t": time.perf_counter(), "i": 0}

        def step(b: Any) -> None:
            t_arrive = time.perf_counter()
            x = adapter.batch_to_network(b.images)
            y = adapter.labels_from_numpy(np.asarray(b.labels) - base)
            t_ready = time.perf_counter()
            loss = _step(adapter, net, x, y)
            t_end = time.perf_counter()
            if state["i"] >= p["warmup"]:
                waits.append((t_arrive - state["t"]) + (t_ready - t_arrive))
                fed_steps.append(t_end - state["t"])
            losses.append(loss)
            state["t"], state["i"] = time.perf_counter(), state["i"] + 1

        with ctx.timed_region():
            state["t"] = time.perf_counter()
            ep1 = P.read_epoch(loader, 1, limit=total, on_batch=step)
        delivered.append(ep1)
    finally:
        loader.close()
    mem, fed = float(np.median(mem_steps)), float(np.median(fed_steps))
    share = sum(waits) / max(1e-12, sum(fed_steps))
    batch = p["batch"]
    rate_memory = batch / mem
    checks = [
        P.labels_match(delivered, data.catalogue.labels),
        Check(
            "finite_losses",
            0.0 if all(math.isfinite(v) for v in losses) else math.inf,
            0.0,
            detail={"first": losses[0], "last": losses[-1], "steps": len(losses)},
        ),  # fmt: skip
    ]
    dataset = data.describe()
    dataset.update(fs_type=facts.get("fs_type"), mount_point=facts.get("mount_point"),
                   mount_source=facts.get("mount_source"))  # fmt: skip
    section = {
        "dataset": dataset,
        "storage": facts,
        "loader": {"format": p["format"], "workers": p["workers"], "decode": p["decode"]},
        "cache": {"state": "warm", "note": "epoch 0's first batches were read before the fed run"},
        "feeding": [],
    }
    e2e = {
        "network": p["network"], "resolution": 224, "width": p["width"],
        "classes": data.catalogue.classes, "label_base": data.label_base,
        "batch": batch, "steps": p["steps"],
        "warmup": p["warmup"], "step_s_memory": mem, "step_s_fed": fed,
        "input_wait_s": float(np.median(waits)), "input_bound_share": share,
        "slowdown_share": max(0.0, 1.0 - mem / fed),
        "train_rate_memory": rate_memory, "train_rate_fed": batch / fed,
        "dtype": ctx.dtype, "device": ctx.device.kind,
        "note": "the batch reaches the network through the adapter's batch_to_network (its "
                "own copy to the device, or NumPy and from_numpy), part of the wait; the "
                "loader's workers and the training share the host's cores",
    }  # fmt: skip
    metrics = [
        STEP_TIME.entry(fed_steps),
        STEP_TIME_MEMORY.entry(mem_steps),
        INPUT_WAIT.entry(waits),
        INPUT_BOUND_SHARE.entry(value=100.0 * share),
        THROUGHPUT.entry([batch / s for s in fed_steps]),
    ]
    measurement = {"warmup_iters": p["warmup"], "inner_repeats": 1, "samples": len(fed_steps),
                   "stop_reason": "max_samples", "elapsed_s": float(sum(fed_steps)),
                   "ci_rel_width": P.ci_rel(fed_steps), "target_ci_rel": P.TARGET_CI_REL}  # fmt: skip
    return Result(metrics=metrics, checks=checks, measurement=measurement,
                  sections={"pipeline": section, "end_to_end": e2e})  # fmt: skip
