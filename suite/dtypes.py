"""Dtype names used everywhere (CLI, tasks, records) and their NumPy-side quantisation.

Inputs are generated in float64 and rounded to the benchmark dtype *before* the float64
reference is computed, so a check measures the operator's arithmetic error, not input rounding.
"""

from __future__ import annotations

import numpy as np

DTYPES = ("fp32", "tf32", "bf16", "fp16")
ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


def check_dtype(name: str) -> str:
    from suite.errors import ConfigError

    if name not in ITEMSIZE:
        raise ConfigError(f"dtype {name!r} is not known; use one of: {', '.join(DTYPES)}")
    return name


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bfloat16 (ties to even), returned as float64.

    Goes through float32 first (as frameworks do when casting), so a float64 value within
    ~2^-24 of a bf16 halfway point may round the other way; the reference sees the same values.
    """
    f32 = np.array(x, dtype=np.float32, copy=True, order="C")
    nan = np.isnan(f32)  # rounding a NaN's bits can carry into Inf or zero: put back below
    bits = f32.view(np.uint32)  # rounded in place, 32-bit: a finite value's bits plus the
    bias = bits >> 16  # bias stay below 2**32 (at most 0xFF7FFFFF + 0x8000)
    bias &= 1
    bias += 0x7FFF
    bits += bias
    bits &= np.uint32(0xFFFF0000)
    f32[nan] = np.nan
    return f32.astype(np.float64)


def quantize(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 array holding exactly the values a tensor of ``dtype`` would hold."""
    if dtype == "fp64":
        return np.asarray(x, dtype=np.float64)
    if dtype in ("fp32", "tf32"):  # tf32 tensors are stored as fp32; rounding happens inside the op
        return np.asarray(x, dtype=np.float32).astype(np.float64)
    if dtype == "fp16":
        return np.asarray(x, dtype=np.float16).astype(np.float64)
    if dtype == "bf16":
        return to_bf16(x)
    raise ValueError(f"unknown dtype {dtype!r}")
