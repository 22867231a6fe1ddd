"""Distributed benchmarks: collectives swept over message sizes (nccl-tests' algbw/busbw) and
data-parallel training of zoo networks or a user's ONNX file (throughput, scaling,
communication share).

Framework-neutral: sizes, expected values and bandwidth factors are NumPy and arithmetic
(suite/levels/distributed/arithmetic.py); the adapter's distributed words do the communication.
Each benchmark runs itself (suite/levels/distributed/run.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from suite.adapters.base import Adapter
from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.levels.distributed import run as R
from suite.levels.distributed.arithmetic import (
    FULL_SIZES,
    QUICK_SIZES,
    data_parallel_batches,
    human_bytes,
    round_up,
)
from suite.levels.network.workload import USER_MODEL, network_fields, user_batches


class Collective(Benchmark):
    """A collective (``name``) swept over message sizes: one record per size."""

    level: ClassVar[str] = "distributed"
    words: ClassVar[frozenset[str]] = frozenset({"distributed"})
    fields: ClassVar[dict[str, Field]] = {"sizes": Field(list, items=int)}
    point_word: ClassVar[str] = "size"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        sizes = QUICK_SIZES if size_set == "quick" else FULL_SIZES
        src = (
            "quick sweep" if size_set == "quick" else "8 B to 256 MiB by powers of two (nccl-tests)"
        )
        return [SizeSpec({"sizes": list(sizes)}, src)]

    def check(self, params: Params) -> None:
        params["sizes"] = sorted(set(params["sizes"]))

    def label(self, p: Params) -> str:
        if "message_bytes" in p:
            return human_bytes(p["message_bytes"])
        if len(p["sizes"]) == 1:
            return f"1 size {human_bytes(p['sizes'][0])}"
        return f"{len(p['sizes'])} sizes {human_bytes(min(p['sizes']))}..{human_bytes(max(p['sizes']))}"

    def covers(self, params: Params, point: Params) -> bool:
        """A sweep writes one record per size, which says the size it was asked for
        (``requested_bytes``; records without it: ``message_bytes``)."""
        size = point.get("requested_bytes", point.get("message_bytes"))
        return "sizes" in params and size in params["sizes"]

    def remaining(self, params: Params, points: list[Params]) -> Params | None:
        """The sizes a sweep stopped by its timeout had not measured yet."""
        done = {p.get("requested_bytes", p.get("message_bytes")) for p in points}
        left = [size for size in params["sizes"] if size not in done]
        return {**params, "sizes": left} if left else None

    def host_declined(self, adapter_cls: type[Adapter], params: Params, dtype: str) -> str:
        """A collective the adapter declares it only emulates or cannot run: skipped on the
        host, before an environment is built or a rank started (MXNet's kvstore started and
        stopped on two ranks, 7-8 s here, to say it has no broadcast)."""
        return R.collective_declined(adapter_cls, self.name)

    def run(self, ctx: Context) -> list[Result]:
        return R.collective(ctx, self.name)


def _collective(op: str, text: str) -> type[Collective]:
    return type(op, (Collective,), {"name": op, "summary": text})


AllReduce = _collective(
    "allreduce", "in-place sum across ranks: time, algbw, busbw = algbw*2(n-1)/n"
)
AllGather = _collective("allgather", "rank-ordered gather to every rank: busbw = algbw*(n-1)/n")
Broadcast = _collective("broadcast", "root 0 to every rank: busbw = algbw")
ReduceScatter = _collective(
    "reduce_scatter", "sum, each rank keeps its chunk: busbw = algbw*(n-1)/n"
)


class DataParallel(Benchmark):
    """Data-parallel training with the framework's own mechanism (DDP, Horovod, ...).

    ``bucket`` (bytes, or a size such as "1MiB") sets the size of the messages the gradients
    are exchanged in where the adapter's mechanism has one (``Adapter.data_parallel_buckets``:
    DDP's ``bucket_cap_mb``, JAX's flat buffers, Horovod's fusion threshold); absent, the
    framework's default (DDP 25 MiB, Horovod 128 MiB). A record carries it only when it was set.

    A user's ONNX file (``--model``, or ``network = "onnx"`` and ``model`` in a config size)
    trains at a per-rank batch (weak scaling), as the network level's ``batch`` is one
    device's; without an ``lr`` each rank runs the network level's range check on its shard
    and the ranks train at the smallest rate any chose (suite/levels/distributed/run.py)."""

    level: ClassVar[str] = "distributed"
    words: ClassVar[frozenset[str]] = frozenset({"distributed"})
    open_fields: ClassVar[bool] = True  # the zoo network's architecture fields
    fields: ClassVar[dict[str, Field]] = {
        "network": Field(str),
        "scaling": Field(str, choices=("strong", "weak"), default="weak"),
        "batch": Field(int),
        "lr": Field(float, default=None, nullable=True),
        "bucket": Field(int, default=None, nullable=True, size=True),
    }
    name: ClassVar[str] = "data_parallel"
    summary: ClassVar[str] = (
        "data-parallel training: throughput per rank and total, scaling, comm share"
    )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        out = []
        nets: list[tuple[dict[str, Any], int]]
        if size_set == "quick":
            # 48 and 24 split evenly over 1, 2, 3, 4, 6 and 8 ranks for strong scaling.
            nets = [
                ({"network": "mlp"}, 48),
                ({"network": "resnet18", "resolution": 32, "classes": 10, "width": 4}, 24),
            ]
        else:
            nets = [({"network": "resnet50", "resolution": 224, "classes": 1000, "width": 1}, 256),
                    ({"network": "transformer", "config": "base", "seq": 128, "classes": 2}, 32)]  # fmt: skip
        for arch, batch in nets:
            for scaling in ("strong", "weak"):
                out.append(
                    SizeSpec(
                        {**arch, "scaling": scaling, "batch": batch},
                        f"{'global' if scaling == 'strong' else 'per-rank'} batch {batch}",
                    )
                )
        return out

    def user_sizes(
        self, path: str, batches: list[int] | None, size_set: str, dims_text: str | None = None
    ) -> list[SizeSpec]:
        """A user's model at each batch ``user_batches`` chooses, per rank (weak scaling)."""
        resolved, given, chosen = user_batches(path, batches, size_set, dims_text)
        return [
            SizeSpec(
                {"network": USER_MODEL, "model": resolved, **given, "scaling": "weak", "batch": b},
                f"user model {Path(path).name}, per-rank batch {b}",
            )
            for b in chosen
        ]

    def validate_extra(self, params: Params, rest: Params) -> Params:
        return network_fields(self.name, params, rest, "'scaling', 'batch', 'lr', 'bucket'")

    def validate(self, params: Any) -> Params:
        out = super().validate(params)
        # the record's order: network, its architecture, then the run's fields; the bucket only
        # where one was asked for (the task ids of runs without one stay as they were)
        order = ["network", *(k for k in out if k not in self.fields), "scaling", "batch", "lr"]
        if out.get("bucket") is not None:
            order.append("bucket")
        return {k: out[k] for k in order}

    def label(self, p: Params) -> str:
        kind = "global" if p["scaling"] == "strong" else "per-rank"
        bucket = f", bucket {human_bytes(p['bucket'])}" if p.get("bucket") else ""
        name = Path(p["model"]).name if p["network"] == USER_MODEL else p["network"]
        return f"{name} {p['scaling']} ({kind} batch {p['batch']}{bucket})"

    def check_world(self, params: Params, world: int) -> None:
        data_parallel_batches(params, world)  # an indivisible batch: a ConfigError now

    def fit_world(self, params: Params, world: int) -> tuple[Params, str]:
        """Strong scaling's global batch, rounded up to split over ``world`` ranks (the quick
        resnet18's 24 over 16 ranks: 32), so the suite's sizes run at any world size."""
        batch = params["batch"]
        if params["scaling"] != "strong" or batch % world == 0:
            return params, ""
        fitted = round_up(batch, world)
        return {**params, "batch": fitted}, (
            f"global batch {batch} rounded up to {fitted} for {world} ranks"
        )

    def run(self, ctx: Context) -> list[Result]:
        return R.data_parallel(ctx)
