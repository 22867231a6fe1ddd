"""Softmax over the last axis of a (rows, cols) matrix, e.g. attention scores; forward or
backward (the input's gradient)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from suite.levels.operator.base import Params, SizeSpec
from suite.levels.operator.rowwise import RowwiseBenchmark

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


class Benchmark(RowwiseBenchmark):
    name: ClassVar[str] = "softmax"
    summary: ClassVar[str] = "softmax over the last axis, forward or backward"
    words: ClassVar[frozenset[str]] = frozenset({"softmax"})
    word: ClassVar[str] = "softmax"
    input_scale: ClassVar[float] = 3.0  # logit-like spread, so the max-subtraction matters
    flops_per_element: ClassVar[int] = FLOPS_PER_ELEMENT
    forward_ref = staticmethod(softmax_ref)
    backward_ref = staticmethod(softmax_backward)

    quick_shape: ClassVar[tuple[int, int]] = (2048, 128)
    full_sizes: ClassVar[tuple[SizeSpec, ...]] = (
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
    )

    def reduction_length(self, params: Params, output: str) -> int:
        # the forward divides by a sum over the row, the backward sums dy * y over it: PyTorch's
        # and MXNet's correct fp32 forward over a 262147-word vocabulary was 1.03e-5 from
        # float64, over the fixed 1e-5 (the bound of a 262147-term sum is 6.1e-5)
        return int(params["cols"])
