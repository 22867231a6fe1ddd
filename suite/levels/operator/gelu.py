"""Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), elementwise; forward or backward."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np
from scipy.special import erf

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.grad import DIRECTION, backward_build, directions, is_backward

# Nominal FLOPs per element: scale, erf (counted as 1), add, two multiplies... 8 by convention.
FLOPS_PER_ELEMENT = 8


def gelu_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def gelu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Float64 gradient of ``sum(dy * gelu(x))``: dy (Phi(x) + x phi(x))."""
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return dy * (0.5 * (1.0 + erf(x / np.sqrt(2.0))) + x * pdf)


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "gelu"
    summary: ClassVar[str] = "exact (erf) GELU activation, forward or backward"
    fields: ClassVar[dict[str, Field]] = {
        "rows": Field(int),
        "cols": Field(int),
        "direction": DIRECTION,
    }
    words: ClassVar[frozenset[str]] = frozenset({"gelu"})

    def label(self, p: Params) -> str:
        return ("bwd " if is_backward(p) else "") + f"{p['rows']}x{p['cols']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec({"rows": 1024, "cols": 1024}, "quick: CPU smoke size"),
                SizeSpec(
                    {"rows": 64, "cols": 48, "direction": "backward"},
                    "quick: CPU smoke size",
                    kit=True,
                ),
            ]
        return directions(
            [
                SizeSpec(
                    {"rows": 32 * 128, "cols": 3072},
                    "BERT-base FFN activation (batch 32 x seq 128 or batch 8 x seq 512 = 4096 tokens, 3072)",
                ),
                SizeSpec(
                    {"rows": 32 * 512, "cols": 3072},
                    "BERT-base FFN activation (batch 32 x seq 512 = 16384 tokens, 3072)",
                ),
            ]
        )

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (params["rows"], params["cols"])
        out = {"x": 2.0 * rng.standard_normal(shape)}
        if is_backward(params):
            out["dy"] = rng.standard_normal(shape)
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if is_backward(params):
            return {"dx": gelu_backward(x["x"], x["dy"])}
        return {"y": gelu_ref(x["x"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        op = adapter.gelu
        if is_backward(params):
            return backward_build(adapter, lambda x: op(x), t, {"dx": "x"}, "dy")
        x = t["x"]
        return lambda: {"y": op(x)}

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"dx": "x"} if is_backward(params) else {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        return gelu_ref if is_backward(params) else None

    def gradcheck_params(self, params: Params) -> Params:
        return {**params, "rows": min(params["rows"], 8), "cols": min(params["cols"], 8)}

    def flops(self, params: Params) -> float:
        factor = 2 if is_backward(params) else 1
        return float(factor * FLOPS_PER_ELEMENT * params["rows"] * params["cols"])

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = params["rows"] * params["cols"]
        return float(itemsize * (3 if is_backward(params) else 2) * n)  # bwd: read x, dy; dx
