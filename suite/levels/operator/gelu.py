"""Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), elementwise; forward or backward."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.special import erf

from suite.levels.operator.base import SizeSpec
from suite.levels.operator.rowwise import RowwiseBenchmark

# Nominal FLOPs per element: scale, erf (counted as 1), add, two multiplies... 8 by convention.
FLOPS_PER_ELEMENT = 8


def gelu_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def gelu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Float64 gradient of ``sum(dy * gelu(x))``: dy (Phi(x) + x phi(x))."""
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return dy * (0.5 * (1.0 + erf(x / np.sqrt(2.0))) + x * pdf)


class Benchmark(RowwiseBenchmark):
    name: ClassVar[str] = "gelu"
    summary: ClassVar[str] = "exact (erf) GELU activation, forward or backward"
    words: ClassVar[frozenset[str]] = frozenset({"gelu"})
    word: ClassVar[str] = "gelu"
    input_scale: ClassVar[float] = 2.0
    flops_per_element: ClassVar[int] = FLOPS_PER_ELEMENT
    forward_ref = staticmethod(gelu_ref)
    backward_ref = staticmethod(gelu_backward)

    quick_shape: ClassVar[tuple[int, int]] = (1024, 1024)
    full_sizes: ClassVar[tuple[SizeSpec, ...]] = (
        SizeSpec(
            {"rows": 32 * 128, "cols": 3072},
            "BERT-base FFN activation (batch 32 x seq 128 or batch 8 x seq 512 = 4096 tokens, 3072)",
        ),
        SizeSpec(
            {"rows": 32 * 512, "cols": 3072},
            "BERT-base FFN activation (batch 32 x seq 512 = 16384 tokens, 3072)",
        ),
    )
