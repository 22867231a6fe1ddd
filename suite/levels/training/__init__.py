"""Training level (Deep500's L2): what a training step needs besides the network's math. The
input pipeline (datasets made by the suite or brought by the user, read from real storage by
each framework's own loader) and the optimizer (each framework's own optimizer object against
a float64 reference of its documented rule). No framework imported here."""

from __future__ import annotations

from suite.benchmark import Benchmark
from suite.registry import Registry

BENCHMARKS: Registry[type[Benchmark]] = Registry("training benchmark")
BENCHMARKS.register("optimizer", "suite.levels.training.optimizer:OptimizerBenchmark")
BENCHMARKS.register("loader", "suite.levels.training.loader:LoaderBenchmark")
BENCHMARKS.register("feed", "suite.levels.training.feed:FeedBenchmark")

__all__ = ["BENCHMARKS"]
