"""Softmax over the last axis of a (rows, cols) matrix, e.g. attention scores."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec

# Nominal FLOPs per element: max, subtract, exp, sum, divide.
FLOPS_PER_ELEMENT = 5


def softmax_ref(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "softmax"
    summary: ClassVar[str] = "softmax over the last axis"
    fields: ClassVar[dict[str, Field]] = {"rows": Field(int), "cols": Field(int)}
    words: ClassVar[frozenset[str]] = frozenset({"softmax"})

    def label(self, p: Params) -> str:
        return f"{p['rows']}x{p['cols']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [SizeSpec({"rows": 2048, "cols": 128}, "quick: CPU smoke size")]
        return [
            SizeSpec(
                {"rows": 32 * 12 * 128, "cols": 128},
                "BERT-base attention scores (batch 32, 12 heads, seq 128)",
            ),
            SizeSpec(
                {"rows": 8 * 12 * 512, "cols": 512},
                "BERT-base attention scores (batch 8, 12 heads, seq 512)",
            ),
            SizeSpec(
                {"rows": 256, "cols": 1000},
                "ResNet-50 classifier softmax (batch 256, 1000 classes)",
            ),
        ]

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # Logit-like spread (std 3) so the max-subtraction matters.
        return {"x": 3.0 * rng.standard_normal((params["rows"], params["cols"]))}

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": softmax_ref(x["x"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        x = t["x"]
        op = adapter.softmax
        return lambda: {"y": op(x)}

    def flops(self, params: Params) -> float:
        return float(FLOPS_PER_ELEMENT * params["rows"] * params["cols"])

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        return float(itemsize * 2 * params["rows"] * params["cols"])
