"""Softmax over the last axis of a (rows, cols) matrix, e.g. attention scores; forward or
backward (the input's gradient)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.grad import DIRECTION, backward_build, directions, is_backward

# Nominal FLOPs per element: max, subtract, exp, sum, divide.
FLOPS_PER_ELEMENT = 5


def softmax_ref(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Float64 gradient of ``sum(dy * softmax(x))`` with respect to ``x``."""
    y = softmax_ref(x)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "softmax"
    summary: ClassVar[str] = "softmax over the last axis, forward or backward"
    fields: ClassVar[dict[str, Field]] = {
        "rows": Field(int),
        "cols": Field(int),
        "direction": DIRECTION,
    }
    words: ClassVar[frozenset[str]] = frozenset({"softmax"})

    def label(self, p: Params) -> str:
        return ("bwd " if is_backward(p) else "") + f"{p['rows']}x{p['cols']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec({"rows": 2048, "cols": 128}, "quick: CPU smoke size"),
                SizeSpec(
                    {"rows": 64, "cols": 48, "direction": "backward"},
                    "quick: CPU smoke size",
                    kit=True,
                ),
            ]
        return directions(
            [
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
        )

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # Logit-like spread (std 3) so the max-subtraction matters.
        shape = (params["rows"], params["cols"])
        out = {"x": 3.0 * rng.standard_normal(shape)}
        if is_backward(params):
            out["dy"] = rng.standard_normal(shape)
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if is_backward(params):
            return {"dx": softmax_backward(x["x"], x["dy"])}
        return {"y": softmax_ref(x["x"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        op = adapter.softmax
        if is_backward(params):
            return backward_build(adapter, lambda x: op(x), t, {"dx": "x"}, "dy")
        x = t["x"]
        return lambda: {"y": op(x)}

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"dx": "x"} if is_backward(params) else {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        return softmax_ref if is_backward(params) else None

    def gradcheck_params(self, params: Params) -> Params:
        return {**params, "rows": min(params["rows"], 8), "cols": min(params["cols"], 8)}

    def reduction_length(self, params: Params, output: str) -> int:
        return int(params["cols"]) if output == "dx" else 1

    def flops(self, params: Params) -> float:
        factor = 2 if is_backward(params) else 1  # backward: a product, a row sum, a scale
        return float(factor * FLOPS_PER_ELEMENT * params["rows"] * params["cols"])

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = params["rows"] * params["cols"]
        return float(itemsize * (3 if is_backward(params) else 2) * n)  # bwd: dy, y; dx
