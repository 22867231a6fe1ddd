"""What the row-wise operators share (GELU, softmax): one (rows, cols) input, forward or backward
(the input's gradient from a cotangent ``dy``), checked against a float64 forward and backward.
A benchmark of this kind names its adapter word, its references, the input's spread, its
FLOPs per element and its sizes (the quick set's forward shape, the full set's forward sizes);
anything else it measures stays its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.grad import DIRECTION, directions, is_backward


class RowwiseBenchmark(OperatorBenchmark):
    fields: ClassVar[dict[str, Field]] = {
        "rows": Field(int),
        "cols": Field(int),
        "direction": DIRECTION,
    }
    #: the adapter word that runs the operator on one tensor
    word: ClassVar[str]
    #: the standard deviation of the input
    input_scale: ClassVar[float] = 1.0
    #: nominal FLOPs per element of the forward (the backward counts twice as many)
    flops_per_element: ClassVar[int]
    #: (rows, cols) of the quick set's forward (a CPU smoke size); the quick set adds the kit's
    #: small backward
    quick_shape: ClassVar[tuple[int, int]]
    #: the full set's sizes, each run forward and then backward
    full_sizes: ClassVar[tuple[SizeSpec, ...]]

    @staticmethod
    def forward_ref(x: np.ndarray) -> np.ndarray:
        """The float64 forward."""
        raise NotImplementedError

    @staticmethod
    def backward_ref(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        """The float64 gradient of ``sum(dy * op(x))`` with respect to ``x``."""
        raise NotImplementedError

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            rows, cols = self.quick_shape
            return [
                SizeSpec({"rows": rows, "cols": cols}, "quick: CPU smoke size"),
                SizeSpec(
                    {"rows": 64, "cols": 48, "direction": "backward"},
                    "quick: CPU smoke size",
                    kit=True,
                ),
            ]
        return directions(self.full_sizes)

    def label(self, p: Params) -> str:
        return ("bwd " if is_backward(p) else "") + f"{p['rows']}x{p['cols']}"

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (params["rows"], params["cols"])
        out = {"x": self.input_scale * rng.standard_normal(shape)}
        if is_backward(params):
            out["dy"] = rng.standard_normal(shape)
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if is_backward(params):
            return {"dx": self.backward_ref(x["x"], x["dy"])}
        return {"y": self.forward_ref(x["x"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        return self.call_build(adapter, params, t, getattr(adapter, self.word), ("x",), "y")

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"dx": "x"} if is_backward(params) else {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        return self.forward_ref if is_backward(params) else None

    def gradcheck_params(self, params: Params) -> Params:
        return {**params, "rows": min(params["rows"], 8), "cols": min(params["cols"], 8)}

    def flops(self, params: Params) -> float:
        factor = (
            2 if is_backward(params) else 1
        )  # softmax's backward: a product, a row sum, a scale
        return float(factor * self.flops_per_element * params["rows"] * params["cols"])

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = params["rows"] * params["cols"]
        # forward: read x, write y; backward: read dy and x (or the saved y), write dx
        return float(itemsize * (3 if is_backward(params) else 2) * n)
