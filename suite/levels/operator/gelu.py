"""Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), elementwise."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np
from scipy.special import erf

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec

# Nominal FLOPs per element: scale, erf (counted as 1), add, two multiplies... 8 by convention.
FLOPS_PER_ELEMENT = 8


def gelu_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "gelu"
    summary: ClassVar[str] = "exact (erf) GELU activation"
    fields: ClassVar[dict[str, Field]] = {"rows": Field(int), "cols": Field(int)}
    words: ClassVar[frozenset[str]] = frozenset({"gelu"})

    def label(self, p: Params) -> str:
        return f"{p['rows']}x{p['cols']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [SizeSpec({"rows": 1024, "cols": 1024}, "quick: CPU smoke size")]
        return [
            SizeSpec(
                {"rows": 32 * 128, "cols": 3072},
                "BERT-base FFN activation (batch 32 x seq 128 or batch 8 x seq 512 = 4096 tokens, 3072)",
            ),
            SizeSpec(
                {"rows": 32 * 512, "cols": 3072},
                "BERT-base FFN activation (batch 32 x seq 512 = 16384 tokens, 3072)",
            ),
        ]

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"x": 2.0 * rng.standard_normal((params["rows"], params["cols"]))}

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": gelu_ref(x["x"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        x = t["x"]
        op = adapter.gelu
        return lambda: {"y": op(x)}

    def flops(self, params: Params) -> float:
        return float(FLOPS_PER_ELEMENT * params["rows"] * params["cols"])

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        return float(itemsize * 2 * params["rows"] * params["cols"])
