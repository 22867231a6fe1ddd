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


# -- network words ---------------------------------------------------------------------------
def _zoo_cases() -> list[Any]:
    from suite.levels.network import zoo

    return [pytest.param(name, id=name) for name in zoo.network_names()]


@pytest.mark.parametrize("network", _zoo_cases())
def test_zoo_network_matches_onnxruntime_and_learns(adapter: Adapter, network: str) -> None:
    from suite.adapters.base import NetworkOptions
    from suite.levels.network import benchmarks as B
    from suite.levels.network import zoo
    from suite.levels.network.execute import ort_logits

    if "network" not in adapter.words:
        pytest.fail(f"{adapter.name} declares no network words")
    net_def = zoo.get(network)
    arch = net_def.validate(net_def.sizes("quick")[0].params)
    model = net_def.build(arch, seed=5)
    unsupported = [n.op_type for n in model.graph.node if n.op_type not in adapter.onnx_ops]
    assert not unsupported, f"{adapter.name} cannot map {sorted(set(unsupported))} used by the zoo"
    spec, classes = net_def.input_spec(arch), net_def.num_classes(arch)
    x, y = B.synthetic_batch(spec, 3, classes, np.random.default_rng(0))
    lr = B.DEFAULT_LR.get(network, B.BASE_LR)
    net = adapter.build_network(model, "fp32", NetworkOptions(lr=lr))
    xt = adapter.labels_from_numpy(x) if spec.kind == "int64" else adapter.from_numpy(x, "fp32")
    got = adapter.to_numpy(adapter.forward(net, xt))
    ref = ort_logits(model, x, spec)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-4
    yt = adapter.labels_from_numpy(y)
    from suite.levels.network.numpy_eval import cross_entropy

    before = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
    losses = [float(adapter.to_numpy(adapter.train_step(net, xt, yt))) for _ in range(10)]
    after = cross_entropy(adapter.to_numpy(adapter.forward(net, xt)), y)
    if not any(n.op_type == "Dropout" for n in model.graph.node):
        before, after = losses[0], float(np.mean(losses[-5:]))  # see execute.py: BN lags in eval
    assert all(np.isfinite(losses)) and after < before, (before, after, losses)


def test_declared_onnx_ops_match_the_builder(adapter: Adapter) -> None:
    if adapter.name == "pytorch":
        from suite.adapters.pytorch_network import ONNX_OPS

        assert adapter.onnx_ops == ONNX_OPS
    from suite.levels.network import zoo

    assert zoo.OPS <= adapter.onnx_ops, sorted(zoo.OPS - adapter.onnx_ops)
