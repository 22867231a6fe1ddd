"""Distributed benchmarks: collectives swept over message sizes (nccl-tests' algbw/busbw) and
data-parallel training of zoo networks (throughput, scaling, communication share).

Framework-neutral: sizes, expected values and bandwidth factors are NumPy and arithmetic; the
adapter's distributed words do the communication."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from suite.errors import ConfigError
from suite.levels.network import zoo
from suite.levels.operator.base import Field, SizeSpec

Params = dict[str, Any]
ITEMSIZE = 4  # collectives move fp32 elements

QUICK_SIZES = [8, 1024, 65536, 1 << 20, 16 << 20]
FULL_SIZES = [8 << i for i in range(26)]  # 8 B ... 256 MiB by powers of two, as nccl-tests


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw = algbw x factor (PERFORMANCE.md of nccl-tests)."""
    n = world
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def element_count(op: str, size_bytes: int, world: int) -> int:
    """Elements of the (total) message, rounded up so it splits evenly across ranks."""
    n = max(1, -(-size_bytes // ITEMSIZE))
    if op in ("allgather", "reduce_scatter"):
        n = -(-n // world) * world
    return n


def pattern(n: int, seed: int) -> np.ndarray:
    """Small positive integers (1..4): sums over ranks stay exact in fp32, and no value is 0."""
    return np.random.default_rng(seed).integers(1, 5, size=n).astype(np.float64)


def rank_input(op: str, n: int, rank: int, world: int, seed: int) -> np.ndarray:
    """What rank ``rank`` contributes (allgather: its 1/world share)."""
    if op == "allgather":
        return (rank + 1) * pattern(n // world, seed)
    if op == "broadcast":
        return pattern(n, seed) if rank == 0 else np.full(n, -1.0)  # non-roots hold a sentinel
    return (rank + 1) * pattern(n, seed)


def expected(op: str, n: int, rank: int, world: int, seed: int) -> np.ndarray:
    """The result each rank must hold, computed independently of any framework."""
    total = world * (world + 1) / 2  # sum of (r + 1) over ranks
    if op == "allreduce":
        return total * pattern(n, seed)
    if op == "allgather":
        base = pattern(n // world, seed)
        return np.concatenate([(r + 1) * base for r in range(world)])
    if op == "broadcast":
        return pattern(n, seed)
    if op == "reduce_scatter":
        k = n // world
        return total * pattern(n, seed)[rank * k : (rank + 1) * k]
    raise ValueError(op)


class Collective:
    level: ClassVar[str] = "distributed"
    name: ClassVar[str]
    summary: ClassVar[str]
    fields: ClassVar[dict[str, Field]] = {}

    def sizes(self, size_set: str) -> list[SizeSpec]:
        sizes = QUICK_SIZES if size_set == "quick" else FULL_SIZES
        src = (
            "quick sweep" if size_set == "quick" else "8 B to 256 MiB by powers of two (nccl-tests)"
        )
        return [SizeSpec({"sizes": list(sizes)}, src)]

    def validate(self, params: Mapping[str, Any]) -> Params:
        unknown = set(params) - {"sizes"}
        if unknown:
            raise ConfigError(
                f"{self.name}: unknown parameter {sorted(unknown)[0]!r}; known: sizes"
            )
        sizes = params.get("sizes")
        if not isinstance(sizes, list) or not sizes:
            raise ConfigError(f"{self.name}.sizes: give a list of message sizes in bytes")
        for s in sizes:
            if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
                raise ConfigError(f"{self.name}.sizes: {s!r} is not a positive number of bytes")
        return {"sizes": sorted(set(sizes))}

    def label(self, p: Params) -> str:
        if "message_bytes" in p:
            return human_bytes(p["message_bytes"])
        return f"{len(p['sizes'])} sizes {human_bytes(min(p['sizes']))}..{human_bytes(max(p['sizes']))}"


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


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


class DataParallel:
    """Data-parallel training with the framework's own mechanism (DDP, Horovod, ...)."""

    level: ClassVar[str] = "distributed"
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

    def validate(self, params: Mapping[str, Any]) -> Params:
        p = dict(params)
        scaling = p.pop("scaling", "weak")
        batch = p.pop("batch", None)
        lr = p.pop("lr", None)
        name = p.pop("network", None)
        if scaling not in ("strong", "weak"):
            raise ConfigError(f"data_parallel.scaling: {scaling!r} is not 'strong' or 'weak'")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise ConfigError(f"data_parallel.batch: must be a positive integer, got {batch!r}")
        if not isinstance(name, str):
            raise ConfigError(
                f"data_parallel.network: give a zoo network ({', '.join(zoo.network_names())})"
            )
        from suite.levels.network.benchmarks import BASE_LR, DEFAULT_LR

        lr = DEFAULT_LR.get(name, BASE_LR) if lr is None else lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
            raise ConfigError(f"data_parallel.lr: expected a positive learning rate, got {lr!r}")
        arch = zoo.get(name).validate(p)
        return {"network": name, **arch, "scaling": scaling, "batch": batch, "lr": float(lr)}

    def label(self, p: Params) -> str:
        kind = "global" if p["scaling"] == "strong" else "per-rank"
        return f"{p['network']} {p['scaling']} ({kind} batch {p['batch']})"

    @staticmethod
    def batches(p: Params, world: int) -> tuple[int, int]:
        """(global batch, per-rank batch) for ``world`` ranks."""
        if p["scaling"] == "strong":
            if p["batch"] % world:
                raise ConfigError(
                    f"data_parallel.batch: strong scaling splits the global batch "
                    f"{p['batch']} over {world} ranks; use a multiple of {world}"
                )
            return p["batch"], p["batch"] // world
        return p["batch"] * world, p["batch"]
