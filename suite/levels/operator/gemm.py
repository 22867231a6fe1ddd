"""GEMM: C = A @ B with A (m, k) and B (k, n)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec

_BERT_TOKENS = 32 * 128  # BERT-base fine-tuning: batch 32 x sequence 128


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "gemm"
    summary: ClassVar[str] = "matrix multiply C = A @ B"
    fields: ClassVar[dict[str, Field]] = {"m": Field(int), "n": Field(int), "k": Field(int)}
    words: ClassVar[frozenset[str]] = frozenset({"matmul"})

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [SizeSpec({"m": 256, "n": 256, "k": 256}, "quick: CPU smoke size")]
        t = _BERT_TOKENS
        return [
            SizeSpec(
                {"m": t, "n": 2304, "k": 768}, "BERT-base fused QKV projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": t, "n": 768, "k": 768},
                "BERT-base attention output projection (batch 32 x seq 128)",
            ),
            SizeSpec(
                {"m": t, "n": 3072, "k": 768}, "BERT-base FFN up-projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": t, "n": 768, "k": 3072}, "BERT-base FFN down-projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": 256, "n": 1000, "k": 2048},
                "ResNet-50 final fully connected layer (batch 256)",
            ),
            SizeSpec(
                {"m": 8192, "n": 8192, "k": 8192},
                "square 8192^3 (peak-rate reference, as in DeepBench)",
            ),
        ]

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k = params["m"], params["n"], params["k"]
        return {"a": rng.standard_normal((m, k)), "b": rng.standard_normal((k, n))}

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"c": x["a"] @ x["b"]}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        a, b = t["a"], t["b"]
        matmul = adapter.matmul
        return lambda: {"c": matmul(a, b)}

    def reduction_length(self, params: Params, output: str) -> int:
        return int(params["k"])

    def flops(self, params: Params) -> float:
        return 2.0 * params["m"] * params["n"] * params["k"]

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        m, n, k = params["m"], params["n"], params["k"]
        return float(itemsize * (m * k + k * n + m * n))
