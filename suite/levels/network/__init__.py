"""Network level: whole networks (ONNX zoo or a user's file), training and inference, checked
against onnxruntime, plus time-to-accuracy on real data."""

from __future__ import annotations

from suite.benchmark import Benchmark
from suite.registry import Registry

BENCHMARKS: Registry[type[Benchmark]] = Registry("network benchmark")
BENCHMARKS.register("train", "suite.levels.network.benchmarks:Train")
BENCHMARKS.register("infer", "suite.levels.network.benchmarks:Infer")
BENCHMARKS.register("digits", "suite.levels.network.benchmarks:Digits")
BENCHMARKS.register("agreement", "suite.levels.network.benchmarks:Agreement")


__all__ = ["BENCHMARKS"]
