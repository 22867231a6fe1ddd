"""The conformance kit: the same tests for every registered adapter, generated from the registry.

A new adapter is tested without writing a test. Each runs in this interpreter for now; the
per-framework environments that let every adapter run here arrive with the venv backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from suite.adapters import ADAPTERS, Adapter
from suite.dtypes import DTYPES, quantize
from suite.errors import UnsupportedError
from suite.levels import benchmark_names, load_benchmark
from suite.levels.operator.execute import execute

ADAPTER_NAMES = ADAPTERS.names()
FAST = {
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "min_samples": 3,
    "max_samples": 5,
    "time_budget_s": 0.05,
    "min_sample_s": 0.0,
}


@pytest.fixture(scope="module", params=ADAPTER_NAMES)
def adapter(request: pytest.FixtureRequest) -> Adapter:
    cls = ADAPTERS.load(request.param)
    ok, why = cls.available()
    assert ok, f"adapter {request.param} is registered but its framework is missing: {why}"
    a = cls()
    a.setup("cpu")
    return a


def _supported(adapter: Adapter) -> list[str]:
    return [d for d in DTYPES if adapter.supports(d)[0]]


def test_declares_itself(adapter: Adapter) -> None:
    assert adapter.name and adapter.module and adapter.distribution and adapter.adapter_version
    assert adapter.installed_version()
    versions = adapter.versions()
    assert versions and all(isinstance(v, (str, type(None))) for v in versions.values())
    assert "fp32" in _supported(adapter)
    for d in DTYPES:
        ok, why = adapter.supports(d)
        assert ok or why, f"{d} unsupported without a reason"


def test_tensors_round_trip(adapter: Adapter) -> None:
    rng = np.random.default_rng(1)
    for dtype in _supported(adapter):
        x = quantize(rng.standard_normal((3, 5)), dtype)
        back = adapter.to_numpy(adapter.from_numpy(x, dtype))
        assert back.dtype == np.float64 and back.shape == (3, 5)
        np.testing.assert_array_equal(back, x)


def test_time_is_positive_and_counts_calls(adapter: Adapter) -> None:
    calls: list[int] = []
    t = adapter.time(lambda: calls.append(1), 7)
    assert t > 0 and len(calls) == 7


def test_vjp_matches_analytic_gradient_or_is_declared_missing(adapter: Adapter) -> None:
    rng = np.random.default_rng(2)
    a, b, cot = (rng.standard_normal(s) for s in ((4, 3), (3, 5), (4, 5)))
    ta, tb, tc = (adapter.from_numpy(v, "fp32") for v in (a, b, cot))
    if "vjp" not in adapter.words:
        with pytest.raises(NotImplementedError):
            adapter.vjp(lambda a, b: adapter.matmul(a, b), {"a": ta, "b": tb}, tc)
        return
    grads = adapter.vjp(lambda a, b: adapter.matmul(a, b), {"a": ta, "b": tb}, tc)()
    np.testing.assert_allclose(adapter.to_numpy(grads["a"]), cot @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adapter.to_numpy(grads["b"]), a.T @ cot, rtol=1e-5, atol=1e-5)


def _cases() -> list[Any]:
    cases = []
    for name in benchmark_names("operator"):
        bench = load_benchmark("operator", name)
        for i, spec in enumerate(bench.sizes("quick")):
            cases.append(pytest.param(name, spec.params, id=f"{name}-{i}"))
    return cases


@pytest.mark.parametrize(("benchmark", "params"), _cases())
def test_operator_matches_reference_at_every_supported_dtype(
    adapter: Adapter, benchmark: str, params: dict[str, Any]
) -> None:
    bench = load_benchmark("operator", benchmark)
    missing = bench.needs(bench.validate(params)) - adapter.words
    info = adapter.setup("cpu")
    for dtype in DTYPES:
        task = {
            "benchmark": benchmark,
            "params": params,
            "dtype": dtype,
            "seed": 3,
            "measure": FAST,
        }
        if missing or not adapter.supports(dtype)[0]:
            # declared unsupported: the worker records "skipped" with this reason
            with pytest.raises(UnsupportedError):
                execute(task, adapter, info)
            continue
        out = execute(task, adapter, info)
        assert out["correctness"]["passed"], (dtype, out["correctness"])
        assert out["metrics"][0]["name"] == "time" and out["metrics"][0]["median"] > 0


def test_missing_word_is_declared_not_crashed(adapter: Adapter) -> None:
    class Partial(type(adapter)):  # type: ignore[misc]
        words = frozenset(adapter.words - {"gelu"})

    p = Partial()
    info = p.setup("cpu")
    task = {
        "benchmark": "gelu",
        "params": {"rows": 4, "cols": 4},
        "dtype": "fp32",
        "seed": 0,
        "measure": FAST,
    }
    with pytest.raises(UnsupportedError, match="gelu"):
        execute(task, p, info)
