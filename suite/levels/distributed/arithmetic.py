"""The distributed level's arithmetic, framework-neutral: message sizes, nccl-tests' bus
factors, what each rank sends and must receive in a collective, and how a data-parallel batch
splits over the ranks."""

from __future__ import annotations

from typing import Any

import numpy as np

from suite.errors import ConfigError

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


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def data_parallel_batches(p: dict[str, Any], world: int) -> tuple[int, int]:
    """(global batch, per-rank batch) of a data-parallel task for ``world`` ranks."""
    if p["scaling"] == "strong":
        if p["batch"] % world:
            raise ConfigError(
                f"data_parallel.batch: strong scaling splits the global batch "
                f"{p['batch']} over {world} ranks; use a multiple of {world}"
            )
        return p["batch"], p["batch"] // world
    return p["batch"] * world, p["batch"]


def round_up(batch: int, parts: int) -> int:
    """The smallest multiple of ``parts`` not below ``batch`` (a batch that splits in parts)."""
    return -(-batch // parts) * parts


def check_divides(batch: int, world: int, what: str) -> None:
    if batch % world:
        raise ConfigError(
            f"{what}: the batch {batch} is split into {world} equal parts; use a multiple of "
            f"{world}"
        )


def strategy_batches(
    p: dict[str, Any], data_parallel: bool, world: int, what: str = "strategies.batch"
) -> tuple[int, int]:
    """(global batch, per-rank batch) of a strategies task: data-parallel strategies split the
    global batch, a pipeline feeds it whole to its first stage. ``what``: the field named when
    the batch does not split."""
    check_divides(p["batch"], world, what)
    if not data_parallel:
        return p["batch"], p["batch"]
    return p["batch"], p["batch"] // world


def check_strategy_world(p: dict[str, Any], data_parallel: bool, world: int) -> None:
    """Every batch of a strategies task splits over ``world`` ranks (and a pipeline's batches
    into its micro-batches): a ConfigError naming the field otherwise."""
    strategy_batches(p, data_parallel, world)
    strategy_batches(
        {**p, "batch": p["digits"]["batch"]}, data_parallel, world, "strategies.digits.batch"
    )
    if not data_parallel:
        mb = p["options"]["microbatches"]
        check_divides(p["batch"], mb, "strategies.batch (over micro-batches)")
        check_divides(p["digits"]["batch"], mb, "strategies.digits.batch (over micro-batches)")
