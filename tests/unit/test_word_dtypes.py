"""Per-word dtype declarations (``Adapter.unsupported_word_dtypes`` / ``supports_word``): a
framework whose build has a dtype for some words but not others says so on the class, and a task
needing such a word at such a dtype is declined by the benchmark (a skipped record with the
declared reason) while the other words still run at that dtype."""

from __future__ import annotations

from typing import ClassVar

import pytest

from suite.adapters.numpy.adapter import NumPyAdapter
from suite.errors import UnsupportedError
from suite.levels import execute

FAST = {"warmup_iters": 1, "warmup_s": 0.0, "min_samples": 3, "max_samples": 3,
        "time_budget_s": 0.0, "min_sample_s": 0.0}  # fmt: skip
NO_FP64_GELU = "partial-numpy: its erf has no float64 kernel in this build (declared per word)"
NO_FP64_BACKWARD = "partial-numpy: no float64 gradients (declared per word)"


class PartialNumPy(NumPyAdapter):
    name: ClassVar[str] = "partial-numpy"
    unsupported_word_dtypes: ClassVar[dict[str, dict[str, str]]] = {
        "gelu": {"fp64": NO_FP64_GELU},
        "vjp": {"fp64": NO_FP64_BACKWARD},
    }


def _task(benchmark: str, params: dict[str, object], dtype: str) -> dict[str, object]:
    return {"benchmark": benchmark, "params": params, "dtype": dtype, "seed": 0, "measure": FAST}


def test_a_word_declared_without_a_dtype_is_declined_with_the_reason() -> None:
    adapter = PartialNumPy()
    info = adapter.setup("cpu")
    assert adapter.supports("fp64") == (True, "")  # the device runs fp64 ...
    assert adapter.supports_word("gelu", "fp64") == (False, NO_FP64_GELU)  # ... gelu does not
    assert adapter.supports_word("gelu", "fp32") == (True, "")
    with pytest.raises(UnsupportedError) as raised:
        execute(_task("gelu", {"rows": 8, "cols": 8}, "fp64"), adapter, info)
    assert str(raised.value) == NO_FP64_GELU
    # the same word at another dtype runs, and so does another word at fp64
    assert execute(_task("gelu", {"rows": 8, "cols": 8}, "fp32"), adapter, info)["correctness"][
        "passed"
    ]
    gemm = execute(_task("gemm", {"m": 16, "n": 16, "k": 16}, "fp64"), adapter, info)
    assert gemm["correctness"]["passed"]


def test_a_backward_benchmark_is_declined_for_its_vjp_word() -> None:
    """conv2d's backward needs ``vjp`` too: its refusal at fp64 declines the backward case, the
    forward one runs."""
    adapter = PartialNumPy()
    info = adapter.setup("cpu")
    base = {"batch": 1, "in_channels": 2, "height": 6, "width": 6, "out_channels": 2, "kernel": 3,
            "stride": 1, "padding": 1}  # fmt: skip
    with pytest.raises(UnsupportedError) as raised:
        execute(_task("conv2d", {**base, "direction": "backward"}, "fp64"), adapter, info)
    assert str(raised.value) == NO_FP64_BACKWARD
    out = execute(_task("conv2d", {**base, "direction": "forward"}, "fp64"), adapter, info)
    assert out["correctness"]["passed"]


def test_the_default_declares_nothing() -> None:
    adapter = NumPyAdapter()
    adapter.setup("cpu")
    assert NumPyAdapter.unsupported_word_dtypes == {}
    assert adapter.supports_word("gelu", "fp64") == (True, "")
