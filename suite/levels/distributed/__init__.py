"""Distributed level: collectives (nccl-tests' algbw/busbw), data-parallel training and
distributed strategies (parameter server, compression, local SGD, pipeline), run on several
ranks started by a real launcher (torchrun, mpirun, srun)."""

from __future__ import annotations

from suite.benchmark import Benchmark
from suite.registry import Registry

BENCHMARKS: Registry[type[Benchmark]] = Registry("distributed benchmark")
for _name, _cls in (
    ("allreduce", "AllReduce"),
    ("allgather", "AllGather"),
    ("broadcast", "Broadcast"),
    ("reduce_scatter", "ReduceScatter"),
    ("data_parallel", "DataParallel"),
):
    BENCHMARKS.register(_name, f"suite.levels.distributed.benchmarks:{_cls}")
BENCHMARKS.register("strategies", "suite.levels.distributed.strategies:Strategies")


__all__ = ["BENCHMARKS"]
