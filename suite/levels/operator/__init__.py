"""Operator level: single operators, timed and checked against a float64 NumPy reference."""

from __future__ import annotations

from suite.benchmark import Benchmark
from suite.levels.operator.base import OperatorBenchmark, SizeSpec
from suite.registry import Registry

BENCHMARKS: Registry[type[Benchmark]] = Registry("operator benchmark")
for _name in ("gemm", "conv2d", "norm", "softmax", "gelu", "attention"):
    BENCHMARKS.register(_name, f"suite.levels.operator.{_name}:Benchmark")

__all__ = ["BENCHMARKS", "OperatorBenchmark", "SizeSpec"]
